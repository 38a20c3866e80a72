"""The seam every billing provider writes through: a provider's resources, records and totals.

labgov's pipeline after billing (attribution, the unattributed queue, the ledger, rollups,
budgets and alerts, invoices, reconciliation, close and late usage) reads only these tables,
so a provider is a module that fills them, not a new design:

- an **account** (`RunpodAccount`): who is billed, in which institution and lab, by which
  provider (`provider`, `billing_source`), in which currency;
- its **resources** (`Resource`, unique on account, kind and the provider's id), which rules
  and people attribute (`Assignment`, `AttributionRule`);
- its **billing records** (`BillingRecord`, upserted on resource and bucket start, in USD with
  every digit, each carrying the allocation its resource's timeline gives its bucket);
- the provider's **own totals** per bucket (`AccountBillingRecord`), which the reconciliation
  compares the records with, and a **run** (`SyncRun`) whose window says which span is held.

Runpod's sync writes them from the API in slices (labgov/runpod/sync.py, billing_store.py);
the FOCUS import writes them from a file, one billing period at a time (labgov/runpod/
focus.py). Both then call `span_written` for the UTC days they touched, in the transaction that
wrote them, under the account's lock.
"""

import datetime as dt
from collections.abc import Iterable

from labgov.runpod.attribution import unattributed_refresh, usage_reconcile
from labgov.usage.services import rollups_rebuild


def span_written(*, account, days: Iterable[dt.date]) -> int:
    """After a provider wrote records of these UTC days: the ledger's usage, the rollups and
    the unattributed queue follow them. Returns the ledger entries posted."""
    days = sorted(set(days))
    entries = usage_reconcile(account=account, days=days)
    rollups_rebuild(account=account, days=days)
    unattributed_refresh(account=account)
    return entries
