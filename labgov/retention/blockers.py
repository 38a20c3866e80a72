"""What stands in the way of deleting a case's resource, as labgov last saw it (the last sync),
so that the people deciding see it before anyone approves.

Runpod refuses (409) to delete a network volume that any pod mounts, running or stopped. A
stopped pod that mounts it can be included in the case and is then terminated with the
volume, on the same request and approval; a running pod never is: it must be stopped first.
Names come from Runpod: they are bounded here and escaped by the templates.
"""

from dataclasses import dataclass, field
from decimal import Decimal

from labgov.core.money import ZERO, to_cents
from labgov.retention.models import Hold, RetentionCase
from labgov.runpod.models import Resource, ResourceKind
from labgov.runpod.pricing import pod_storage_monthly_usd
from labgov.runpod.types import PodStatus

NAME_CHARS = 80


def bounded(text: str, limit: int = NAME_CHARS) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pod_words(pod: Resource) -> str:
    owner = pod.current_allocation.user if pod.current_allocation_id else None
    who = f", {owner.get_full_name() or owner.username}'s" if owner else ", of nobody in labgov"
    return f"{pod_state(pod)} pod {bounded(pod.label)} ({pod.runpod_id}{who})"


def pod_state(pod: Resource) -> str:
    return "stopped" if pod.status == PodStatus.EXITED else (pod.status or "unknown").lower()


@dataclass(frozen=True)
class Blocker:
    pod: Resource
    included: bool

    @property
    def stopped(self) -> bool:
        return self.pod.status == PodStatus.EXITED

    @property
    def name(self) -> str:
        return bounded(self.pod.label)

    @property
    def owner(self):
        return self.pod.current_allocation.user if self.pod.current_allocation_id else None

    @property
    def state(self) -> str:
        return pod_state(self.pod)

    @property
    def hourly_usd(self) -> Decimal:
        return self.pod.cost_per_hr_usd if not self.stopped else ZERO

    @property
    def disk_monthly_usd(self) -> Decimal:
        """What its own disks bill per month while it is stopped (deleted with it)."""
        return pod_storage_monthly_usd(
            status=PodStatus.EXITED,
            container_disk_gb=self.pod.container_disk_gb,
            volume_disk_gb=self.pod.volume_disk_gb,
        )


@dataclass
class Blockers:
    pods: list[Blocker] = field(default_factory=list)
    held: bool = False
    # A pod case: the pod itself runs.
    runs_itself: bool = False

    @property
    def reasons(self) -> list[str]:
        found = []
        if self.held:
            found.append("a hold stands: nothing deletes it while it does")
        if self.runs_itself:
            found.append("the pod runs: stop it first (labgov never terminates a running pod)")
        for b in self.pods:
            if not b.stopped:
                found.append(
                    f"the {pod_words(b.pod)} mounts it: stop that pod first (labgov never "
                    "terminates a running pod)"
                )
            elif not b.included:
                found.append(
                    f"the {pod_words(b.pod)} mounts it, and Runpod refuses to delete a volume "
                    "a pod mounts: include the pod in this case to delete it with the volume"
                )
        return found

    @property
    def possible(self) -> bool:
        return not self.reasons

    @property
    def included(self) -> list[Blocker]:
        return [b for b in self.pods if b.included]

    @property
    def includable(self) -> list[Blocker]:
        return [b for b in self.pods if b.stopped and not b.included]

    @property
    def words(self) -> str:
        return "; ".join(self.reasons)


def mounting_pods(volume: Resource):
    """The pods labgov knows on the volume's account that mount it, not terminated."""
    return (
        Resource.objects.present()
        .filter(
            account_id=volume.account_id,
            kind=ResourceKind.POD,
            network_volume_id=volume.runpod_id,
        )
        .exclude(status=PodStatus.TERMINATED)
        .select_related("current_allocation__user", "current_allocation__funding_source")
        .order_by("name", "id")
    )


def deletion_blockers(case: RetentionCase) -> Blockers:
    resource = case.resource
    held = Hold.objects.active().filter(resource=resource).exists()
    if resource.kind != ResourceKind.NETWORK_VOLUME:
        return Blockers(held=held, runs_itself=resource.status != PodStatus.EXITED)
    included = set(case.included_pods.values_list("pk", flat=True)) if case.pk else set()
    pods = [Blocker(pod=p, included=p.pk in included) for p in mounting_pods(resource)]
    return Blockers(pods=pods, held=held)


def usd(amount: Decimal) -> str:
    return f"${to_cents(amount):,.2f}"
