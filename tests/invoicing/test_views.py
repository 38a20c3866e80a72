"""Every invoicing page and action, as each role, performing the refused attempts."""

import datetime as dt
from decimal import Decimal as D

import pytest
import time_machine
from django.urls import reverse

from labgov.audit.models import AuditEvent
from labgov.invoicing.models import Invoice
from labgov.invoicing.services import invoice_issue, invoices_generate
from labgov.usage.models import ClosedPeriod
from tests.factories import AllocationFactory, ResourceFactory
from tests.invoicing.conftest import at, bill, synced

pytestmark = pytest.mark.django_db
OCT = dt.date(2026, 10, 1)


@pytest.fixture(autouse=True)
def _clock():
    with time_machine.travel(at(2026, 11, 5, 12), tick=False):
        yield


@pytest.fixture
def drafts(world, account, pod):
    """A draft for each lab's funding source in October, every day held and matching."""
    bill(pod, at(2026, 10, 3, 1), allocation=world.allocation, gpu="3.333")
    other = AllocationFactory(funding_source=world.other_funding_source, user=world.other_member)
    other_pod = ResourceFactory(account=account, name="nlp-1")
    bill(other_pod, at(2026, 10, 4, 1), allocation=other, gpu="1.5")
    synced(account, at(2026, 9, 30), at(2026, 11, 2))
    mine, theirs = sorted(
        invoices_generate(actor=world.finance, institution=world.institution, month=OCT),
        key=lambda i: i.lab_id != world.lab.pk,
    )
    return mine, theirs


def _period_url(world, name="invoicing:period"):
    return reverse(name, args=[world.institution.pk, 2026, 10])


def test_finance_sees_the_period_by_cost_center_with_its_reconciliation(
    world, drafts, client_for, django_assert_max_num_queries
):
    client = client_for(world.finance)
    with django_assert_max_num_queries(20):
        response = client.get(_period_url(world))
    assert response.status_code == 200
    body = response.content.decode()
    assert "<strong>Reconciled</strong>" in body
    assert world.funding_source.cost_center in body and world.other_funding_source.name in body
    assert "$4.83" in body  # 3.33 + 1.50
    with django_assert_max_num_queries(8):
        assert client.get(reverse("invoicing:periods")).status_code == 200
    assert client.get(_period_url(world).replace("/10/", "/13/")).status_code == 404


def test_the_invoice_page_shows_lines_totals_and_the_rounding_difference(
    world, drafts, client_for, django_assert_max_num_queries
):
    mine, _ = drafts
    client = client_for(world.finance)
    with django_assert_max_num_queries(12):
        response = client.get(reverse("invoicing:invoice", args=[mine.pk]))
    body = response.content.decode()
    assert response.status_code == 200
    assert 'id="invoice-total">$3.33<' in body
    assert 'id="rounding-difference">−$0.003<' in body
    assert "Reconciled" in body and "Issue" in body


@pytest.mark.parametrize("role", ["lab_admin", "member", "other_member", "outsider"])
def test_who_sees_which_invoice(world, drafts, client_for, role):
    mine, theirs = drafts
    client = client_for(getattr(world, role))
    status = {
        "lab_admin": (200, 404, 200, 200),
        "member": (404, 404, 404, 403),
        "other_member": (404, 404, 404, 403),
        "outsider": (404, 404, 404, 200),  # admin of another institution: their own list
    }[role]
    got = (
        client.get(reverse("invoicing:invoice", args=[mine.pk])).status_code,
        client.get(reverse("invoicing:invoice", args=[theirs.pk])).status_code,
        client.get(_period_url(world)).status_code,
        client.get(reverse("invoicing:periods")).status_code,
    )
    assert got == status
    if role == "lab_admin":
        body = client.get(_period_url(world)).content.decode()
        assert world.other_funding_source.name not in body
        assert "Reconciliation with Runpod" not in body and "Generate" not in body


def test_anonymous_people_are_sent_to_log_in(world, drafts, client):
    mine, _ = drafts
    for url in (
        reverse("invoicing:periods"),
        reverse("invoicing:mine"),
        _period_url(world),
        reverse("invoicing:invoice", args=[mine.pk]),
    ):
        assert client.get(url).status_code == 302
    assert client.post(reverse("invoicing:issue", args=[mine.pk])).status_code == 302
    assert Invoice.objects.get(pk=mine.pk).status == "draft"


def test_members_see_their_allocations_share_of_issued_invoices_only(world, drafts, client_for):
    mine, theirs = drafts
    client = client_for(world.member)
    assert "Nothing invoiced" in client.get(reverse("invoicing:mine")).content.decode()
    invoice_issue(actor=world.finance, invoice=mine)
    invoice_issue(actor=world.finance, invoice=theirs)
    body = client.get(reverse("invoicing:mine")).content.decode()
    assert "$3.33" in body and "$1.50" not in body


def _actions(world, invoice):
    return [
        (_period_url(world, "invoicing:generate"), {}),
        (_period_url(world, "invoicing:close"), {"acceptance_reason": "x"}),
        (reverse("invoicing:issue", args=[invoice.pk]), {}),
        (reverse("invoicing:void", args=[invoice.pk]), {"reason": "x"}),
        (
            reverse("invoicing:line_add", args=[invoice.pk]),
            {"kind": "credit", "amount_usd": "5", "reason": "x"},
        ),
    ]


@pytest.mark.parametrize(
    ("role", "expected"),
    [("lab_admin", 403), ("member", 404), ("other_member", 404), ("outsider", 404)],
)
def test_only_finance_and_institution_admins_act(world, drafts, client_for, role, expected):
    mine, _ = drafts
    client = client_for(getattr(world, role))
    before = AuditEvent.objects.count()
    for url, data in _actions(world, mine):
        assert client.post(url, data).status_code == expected, url
    mine.refresh_from_db()
    assert mine.status == "draft" and mine.total_usd == D("3.33")
    assert not ClosedPeriod.objects.exists()
    assert AuditEvent.objects.count() == before


def test_actions_refuse_get(world, drafts, client_for):
    mine, _ = drafts
    client = client_for(world.finance)
    for url, _ in _actions(world, mine):
        assert client.get(url).status_code == 405


def test_finance_credits_another_issues_voids_and_closes_through_the_pages(
    world, drafts, client_for
):
    mine, _ = drafts
    finance = client_for(world.finance)
    url = reverse("invoicing:line_add", args=[mine.pk])
    finance.post(url, {"kind": "credit", "amount_usd": "1.00", "reason": "Goodwill"})
    mine.refresh_from_db()
    assert mine.total_usd == D("2.33")
    response = finance.post(reverse("invoicing:issue", args=[mine.pk]), follow=True)
    assert "another person issues it" in response.content.decode()
    admin = client_for(world.inst_admin)
    admin.post(reverse("invoicing:issue", args=[mine.pk]))
    mine.refresh_from_db()
    assert mine.number == "2026-00001"
    # Finance voids (the replacement carries her credit and is her change): the admin closes.
    finance = client_for(world.finance)
    response = finance.post(reverse("invoicing:void", args=[mine.pk]), {"reason": "Wrong grant"})
    replacement = Invoice.objects.get(replaces=mine)
    assert response.url == reverse("invoicing:invoice", args=[replacement.pk])
    admin = client_for(world.inst_admin)
    response = admin.post(_period_url(world, "invoicing:close"), {"acceptance_reason": ""})
    assert ClosedPeriod.objects.filter(month=OCT).exists()
    replacement.refresh_from_db()
    assert replacement.status == "issued" and replacement.number != mine.number
    numbers = Invoice.objects.exclude(number="").values_list("number", flat=True)
    assert sorted(numbers) == ["2026-00001", "2026-00002", "2026-00003"]
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"invoice.credit", "invoice.issue", "invoice.void", "period.close"} <= actions


def test_the_time_zone_is_set_by_institution_admins_only(world, client_for):
    url = reverse("accounts:institution_time_zone")
    assert client_for(world.finance).post(url, {"time_zone": "Europe/Berlin"}).status_code == 403
    client_for(world.inst_admin).post(url, {"time_zone": "Europe/Berlin"})
    world.institution.refresh_from_db()
    assert world.institution.time_zone == "Europe/Berlin"
    assert client_for(world.inst_admin).get(url).status_code == 405


def test_a_period_not_yet_over_says_so_and_adds_up_its_figures(world, drafts, client_for):
    """November on 5 November: every held day matches, yet it cannot reconcile before it ends."""
    body = client_for(world.finance).get(_period_url(world).replace("/10/", "/11/")).content
    body = body.decode()
    assert "<strong>Not reconciled</strong>: the period has not ended (26 days to come)" in body
    october = client_for(world.finance).get(_period_url(world)).content.decode()
    assert "Attributed $4.83 + unattributed $0.00 = $4.83, against Runpod" in october
