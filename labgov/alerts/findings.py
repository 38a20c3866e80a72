"""What every alert rule (rules.py, idle_rule.py) finds and reads with: a Finding, the
Context it is found in, and the resource helpers the rules share."""

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal

from labgov.alerts.config import Resolver
from labgov.alerts.models import Severity
from labgov.core.money import ZERO, to_cents
from labgov.runpod.models import Resource


@dataclass
class Finding:
    kind: str
    subject_key: str
    subject_label: str
    lab_id: int | None
    severity: str
    title: str
    detail: str = ""
    monthly_cost_usd: Decimal | None = None
    level: int = 0
    facts: dict = field(default_factory=dict)
    resource_id: int | None = None
    account_id: int | None = None
    funding_source_id: int | None = None
    allocation_id: int | None = None
    owner_id: int | None = None


@dataclass
class Context:
    institution_id: int
    now: dt.datetime
    settings: Resolver

    @property
    def today(self) -> dt.date:
        return self.now.date()


def usd(amount: Decimal | None) -> str:
    return f"${to_cents(amount or ZERO):,.2f}"


def day_words(day: dt.date) -> str:
    return f"{day.day} {day:%B %Y}"


def _lab_and_owner(resource: Resource) -> tuple[int | None, int | None]:
    allocation = resource.current_allocation
    if allocation is not None:
        return allocation.funding_source.lab_id, allocation.user_id
    return resource.account.lab_id, None


# What the rules read of a resource's account and paying allocation (who governs it, who owns
# it): a thousand resources load without each one's full account and funding source rows.
_RESOURCE_RELATED = (
    "account__lab_id",
    "account__institution_id",
    "account__is_active",
    "current_allocation__user_id",
    "current_allocation__funding_source_id",
    "current_allocation__funding_source__lab_id",
)


def _resources(ctx: Context):
    own = [f.name for f in Resource._meta.concrete_fields if f.name not in ("env", "details")]
    return (
        Resource.objects.present()
        .filter(account__institution_id=ctx.institution_id, account__is_active=True)
        .select_related("account", "current_allocation__funding_source")
        .only(*own, *_RESOURCE_RELATED)
    )


def _resource_finding(kind: str, resource: Resource, label: str, **fields) -> Finding:
    """A warning about one resource, concerning whoever pays for it (or its account's lab)."""
    lab_id, owner_id = _lab_and_owner(resource)
    return Finding(
        kind=kind,
        subject_key=f"resource:{resource.pk}",
        subject_label=label,
        lab_id=lab_id,
        owner_id=owner_id,
        resource_id=resource.pk,
        account_id=resource.account_id,
        allocation_id=resource.current_allocation_id,
        severity=Severity.WARNING,
        **fields,
    )
