"""Drafts that know they are stale: a draft records the spend version it was generated from;
when attribution or records change, it says so with the difference, and issuing it is refused
until it is regenerated."""

import datetime as dt
from decimal import Decimal as D

import pytest
import time_machine
from django.urls import reverse

from labgov.core.errors import DomainError
from labgov.invoicing.models import Invoice
from labgov.invoicing.services import invoice_issue, invoices_generate
from labgov.invoicing.staleness import stale_drafts
from labgov.runpod.services import resource_assign
from labgov.usage.services import rollups_rebuild
from tests.factories import AllocationFactory
from tests.invoicing.conftest import at, bill, synced

pytestmark = pytest.mark.django_db
OCT = dt.date(2026, 10, 1)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(at(2026, 11, 5, 12), tick=False):
        yield


def _sync(account, *days):
    """What a sync does after writing records: rebuild the rollups of their days."""
    rollups_rebuild(account=account, days=[dt.date(2026, 10, d) for d in days])


@pytest.fixture
def draft(world, account, pod):
    bill(pod, at(2026, 10, 3, 1), allocation=world.allocation, gpu="3.333")
    bill(pod, at(2026, 10, 9, 1), allocation=world.allocation, gpu="6.65")
    synced(account, at(2026, 9, 30), at(2026, 11, 2))
    _sync(account, 3, 9)
    (invoice,) = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    assert invoice.total_usd == D("9.98")
    return invoice


def test_a_fresh_draft_is_not_stale_and_costs_one_query_to_know(
    world, draft, django_assert_num_queries
):
    with django_assert_num_queries(2):  # the closed months, the spend version
        assert stale_drafts(world.institution, OCT, [draft]) == {}


def test_a_sync_that_changes_nothing_leaves_the_draft_current(world, account, draft):
    _sync(account, 3, 9)  # the same records written again
    assert stale_drafts(world.institution, OCT, [draft]) == {}
    invoice_issue(actor=world.finance, invoice=draft)


def test_re_attribution_makes_the_draft_stale_and_issuing_it_is_refused_until_regenerated(
    world, account, pod, draft, client_for
):
    course = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    # The pod goes to another funding source from its first hour (its first assignment).
    resource_assign(actor=world.inst_admin, resource=pod, allocation=course)
    stale = stale_drafts(world.institution, OCT, [draft])[draft.pk]
    assert (stale.generated_usd, stale.fresh_usd, stale.difference_usd) == (
        D("9.98"),
        D("0.00"),
        D("-9.98"),
    )
    with pytest.raises(DomainError, match="Stale.*9.98 USD.*0.00 USD.*-9.98 USD.*Regenerate"):
        invoice_issue(actor=world.finance, invoice=draft)
    assert Invoice.objects.get(pk=draft.pk).status == Invoice.Status.DRAFT

    client = client_for(world.finance)
    page = client.get(reverse("invoicing:invoice", args=[draft.pk])).content.decode()
    assert 'id="invoice-stale"' in page and "-9.98 USD" in page
    period = client.get(reverse("invoicing:period", args=[world.institution.pk, 2026, 10]))
    text = period.content.decode()
    assert 'id="stale-drafts"' in text and "Stale: −$9.98" in text
    assert "1 draft stale" in text

    fresh = invoices_generate(actor=world.finance, institution=world.institution, month=OCT)
    assert {i.funding_source_id: i.total_usd for i in fresh} == {
        world.other_funding_source.pk: D("9.98")
    }
    (course_draft,) = fresh
    assert stale_drafts(world.institution, OCT, [course_draft]) == {}
    issued = invoice_issue(actor=world.finance, invoice=course_draft)
    assert issued.status == Invoice.Status.ISSUED
    text = client.get(
        reverse("invoicing:period", args=[world.institution.pk, 2026, 10])
    ).content.decode()
    assert 'id="stale-drafts"' not in text


def test_a_late_record_makes_the_draft_stale_by_its_amount(world, account, pod, draft):
    bill(pod, at(2026, 10, 20, 7), allocation=world.allocation, gpu="389.91")
    _sync(account, 20)
    stale = stale_drafts(world.institution, OCT, [draft])[draft.pk]
    assert (stale.fresh_usd, stale.difference_usd) == (D("399.89"), D("389.91"))
    with pytest.raises(DomainError, match="stale|Stale"):
        invoice_issue(actor=world.finance, invoice=draft)


def test_a_draft_from_before_versions_is_checked_by_its_lines(world, account, draft):
    Invoice.objects.filter(pk=draft.pk).update(generated_spend_version=0)
    draft.refresh_from_db()
    assert stale_drafts(world.institution, OCT, [draft]) == {}


def test_spend_of_another_month_leaves_octobers_drafts_alone(
    world, account, pod, draft, django_assert_num_queries
):
    bill(pod, at(2026, 11, 3, 1), allocation=world.allocation, gpu="5")
    rollups_rebuild(account=account, days=[dt.date(2026, 11, 3)])
    with django_assert_num_queries(2):
        assert stale_drafts(world.institution, OCT, [draft]) == {}


def test_an_answer_worked_out_in_a_rolled_back_change_is_not_kept(world, account, pod, draft):
    """A change bumps the spend version, staleness is worked out, and the change rolls back;
    the next change gets the same version number, and must be judged on its own data."""
    from django.db import transaction

    with pytest.raises(RuntimeError), transaction.atomic():
        bill(pod, at(2026, 10, 9, 2), allocation=world.allocation, gpu="0.00")
        _sync(account, 9)  # a change that moves nothing: the draft stays current...
        assert stale_drafts(world.institution, OCT, [draft]) == {}
        raise RuntimeError("...and it rolls back")
    # The next change of the same day, at the same version, adds $5.00 of spend.
    bill(pod, at(2026, 10, 9, 3), allocation=world.allocation, gpu="5.00")
    _sync(account, 9)
    stale = stale_drafts(world.institution, OCT, [draft])
    assert stale[draft.pk].difference_usd == D("5.00")
