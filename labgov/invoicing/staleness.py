"""Drafts that know they are stale.

A draft's generated lines (usage, corrections of closed months, cost transfers) are what its
billing records, attribution, splits and transfers said when it was generated. When any of
that changes, the draft says so with the difference, and issuing it is refused until it is
regenerated (services.invoice_issue).

Cheap on purpose: every change of an account's spend bumps the version of its UTC days
(labgov.usage SpendVersion, written with the rollups), and a draft keeps the version of the
days it was generated from. While that holds, one small query answers "not stale". Only
when it moved are the lines generated afresh (without reconciling them) and compared with
the draft's, once per version: the answer is cached under it.
"""

import datetime as dt
import hashlib
from dataclasses import dataclass
from decimal import Decimal

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from labgov.core.money import ZERO, to_cents
from labgov.invoicing.models import Invoice, InvoiceLine
from labgov.usage.periods import closed_until

GENERATED_KINDS = (InvoiceLine.Kind.USAGE, InvoiceLine.Kind.LATE_USAGE, InvoiceLine.Kind.TRANSFER)
EXACT = Decimal("1e-10")
CACHE_SECONDS = 3600


@dataclass(frozen=True)
class Stale:
    """A draft whose generated lines differ from what regenerating it would give."""

    invoice_id: int
    generated_usd: Decimal  # its generated lines as they stand (rounded, before F&A)
    fresh_usd: Decimal  # the same lines generated now

    @property
    def difference_usd(self) -> Decimal:
        return self.fresh_usd - self.generated_usd

    @property
    def message(self) -> str:
        return (
            "Stale: the spend it was generated from changed since (attribution, a transfer, "
            f"a split, late records); its generated lines say {self.generated_usd:,.2f} USD, "
            f"regenerated they would say {self.fresh_usd:,.2f} USD "
            f"({self.difference_usd:+,.2f} USD). Regenerate the drafts before issuing."
        )


def _key(kind, category, resource_id, allocation_id, corrects_month, exact) -> tuple:
    return (
        str(kind),
        str(category),
        resource_id or 0,
        allocation_id or 0,
        corrects_month.isoformat() if corrects_month else "",
        str(Decimal(exact).quantize(EXACT)),
    )


def _digest(keys) -> str:
    return hashlib.sha256(repr(sorted(keys)).encode()).hexdigest()


def _fresh(institution, month: dt.date, version: int, *, now) -> dict[int, tuple[str, Decimal]]:
    """{funding source id: (digest, rounded sum)} of the lines generation would make now."""
    from labgov.invoicing.services import generated_lines

    # Which closed months the lines correct (late usage) is part of what they depend on.
    closed = closed_until(institution.pk)
    cache_key = f"invoicing:fresh:{institution.pk}:{month:%Y-%m}:{version}:{closed}"
    cached = cache.get(cache_key)
    if cached is not None:
        return cached
    fresh = {}
    for fs_id, lines in generated_lines(institution, month, now=now, reconcile=False).items():
        keys = [
            _key(
                line.kind,
                line.category,
                line.resource_id,
                line.allocation_id,
                line.corrects_month,
                line.exact_amount_usd,
            )
            for line in lines
        ]
        fresh[fs_id] = (
            _digest(keys),
            sum((to_cents(line.exact_amount_usd) for line in lines), ZERO),
        )
    # Kept once the transaction that computed it commits: a version bumped in a transaction
    # that rolls back is given again to the next change, which must not find this answer.
    transaction.on_commit(lambda: cache.set(cache_key, fresh, CACHE_SECONDS))
    return fresh


def _drafts_now(draft_ids) -> dict[int, tuple[str, Decimal]]:
    keys: dict[int, list] = {pk: [] for pk in draft_ids}
    sums: dict[int, Decimal] = dict.fromkeys(draft_ids, ZERO)
    for invoice_id, *fields, amount in (
        InvoiceLine.objects.filter(invoice_id__in=draft_ids, kind__in=GENERATED_KINDS)
        .order_by()
        .values_list(
            "invoice_id",
            "kind",
            "category",
            "resource_id",
            "allocation_id",
            "corrects_month",
            "exact_amount_usd",
            "amount_usd",
        )
        .iterator(chunk_size=5000)
    ):
        keys[invoice_id].append(_key(*fields))
        sums[invoice_id] += amount
    return {pk: (_digest(keys[pk]), sums[pk]) for pk in draft_ids}


def stale_drafts(institution, month: dt.date, drafts, *, now=None) -> dict[int, Stale]:
    """{invoice id: Stale} for the drafts (of one institution and month) that are stale."""
    from labgov.invoicing.services import draft_spend_version

    drafts = [d for d in drafts if d.status == Invoice.Status.DRAFT]
    if not drafts:
        return {}
    version = draft_spend_version(institution, month)
    moved = [d for d in drafts if d.generated_spend_version != version]
    if not moved:
        return {}
    fresh = _fresh(institution, month.replace(day=1), version, now=now or timezone.now())
    current = _drafts_now([d.pk for d in moved])
    stale = {}
    for draft in moved:
        digest, usd = current[draft.pk]
        fresh_digest, fresh_usd = fresh.get(draft.funding_source_id, (_digest([]), ZERO))
        if digest != fresh_digest:
            stale[draft.pk] = Stale(draft.pk, usd, fresh_usd)
    return stale
