"""Runpod's published storage prices, for estimates. Billing records are the truth; these
only say what something costs per month now (see README, "Configuration")."""

from decimal import Decimal

from django.conf import settings

from labgov.core.money import ZERO
from labgov.runpod.types import PodStatus


def _price(name: str) -> Decimal:
    return getattr(settings, name)


def pod_storage_monthly_usd(*, status: str, container_disk_gb: int, volume_disk_gb: int) -> Decimal:
    """Container disk bills only while running; a volume disk bills at double the running
    rate while the pod is stopped."""
    if status == PodStatus.RUNNING:
        return (container_disk_gb + volume_disk_gb) * _price("LABGOV_PRICE_POD_DISK_RUNNING")
    if status == PodStatus.EXITED:
        return volume_disk_gb * _price("LABGOV_PRICE_VOLUME_DISK_STOPPED")
    return ZERO


def network_volume_monthly_usd(
    *, size_gb: int, volume_type: str, standard_gb_before: int = 0
) -> Decimal:
    """A network volume's monthly cost. The standard tier's cheaper rate applies beyond 1 TB of
    the account's standard capacity: `standard_gb_before` is the capacity counted ahead of it."""
    if volume_type == "HIGH_PERFORMANCE":
        return size_gb * _price("LABGOV_PRICE_NETWORK_HIGH_PERFORMANCE")
    tier = settings.LABGOV_NETWORK_TIER_GB
    under = max(0, min(size_gb, tier - standard_gb_before))
    over = size_gb - under
    return under * _price("LABGOV_PRICE_NETWORK_STANDARD") + over * _price(
        "LABGOV_PRICE_NETWORK_STANDARD_OVER_TIER"
    )


def resource_storage_monthly_usd(resource) -> Decimal:
    from labgov.runpod.models import ResourceKind

    if resource.gone_at is not None:
        return ZERO
    if resource.kind == ResourceKind.POD:
        return pod_storage_monthly_usd(
            status=resource.status,
            container_disk_gb=resource.container_disk_gb,
            volume_disk_gb=resource.volume_disk_gb,
        )
    if resource.kind == ResourceKind.NETWORK_VOLUME:
        return network_volume_monthly_usd(
            size_gb=resource.size_gb, volume_type=resource.volume_type
        )
    return ZERO
