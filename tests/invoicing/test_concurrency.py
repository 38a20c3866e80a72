"""Invoice numbers stay unique and gap-free when many are issued at once (PostgreSQL: each
thread its own connection; issuing locks the year's counter row)."""

import datetime as dt
import threading
from decimal import Decimal as D

import pytest
import time_machine
from django.db import connection

from labgov.invoicing.models import Invoice, InvoiceCounter
from labgov.invoicing.services import invoice_issue
from labgov.usage.periods import billing_period
from tests.factories import FundingSourceFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _in_parallel(functions):
    barrier = threading.Barrier(len(functions))
    outcomes = [None] * len(functions)

    def run(index, fn):
        try:
            barrier.wait(timeout=10)
            outcomes[index] = fn()
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test checks
            outcomes[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(functions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return outcomes


@time_machine.travel(dt.datetime(2026, 11, 5, tzinfo=dt.UTC), tick=False)
def test_concurrent_issues_number_invoices_without_gaps_or_twins(postgres, world):
    start, end = billing_period(2026, 10)
    drafts = [
        Invoice.objects.create(
            institution=world.institution,
            funding_source=FundingSourceFactory(lab=world.lab),
            lab=world.lab,
            month=dt.date(2026, 10, 1),
            period_start=start,
            period_end=end,
            total_usd=D("1.00"),
        )
        for _ in range(8)
    ]
    # The same draft twice at once: issued once, the other refused.
    jobs = [lambda d=d: invoice_issue(actor=world.finance, invoice=d) for d in drafts]
    jobs.append(lambda: invoice_issue(actor=world.inst_admin, invoice=drafts[0]))
    outcomes = _in_parallel(jobs)
    issued = [o for o in outcomes if isinstance(o, Invoice)]
    assert len(issued) == 8, outcomes
    assert sorted(i.number_seq for i in Invoice.objects.filter(status="issued")) == list(
        range(1, 9)
    )
    assert InvoiceCounter.objects.get(institution=world.institution, year=2026).last_seq == 8
