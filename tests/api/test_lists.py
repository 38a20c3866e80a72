"""Lists: keyset cursors that neither skip nor repeat a row when rows arrive while a client
pages, page numbers with a capped size, filters, and query counts that do not grow with the
data."""

import datetime as dt
from decimal import Decimal as D

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from labgov.funding.models import LedgerEntry
from labgov.usage.models import DailySpend
from tests.factories import RunpodAccountFactory

DAY = dt.date(2026, 11, 1)


@pytest.fixture
def account(world):
    return RunpodAccountFactory(institution=world.institution)


def _spend(world, account, n, *, first=DAY, allocation=True, category="gpu_compute"):
    rows = [
        DailySpend(
            account=account,
            institution=world.institution,
            day=first + dt.timedelta(days=i % 20),
            category=category,
            allocation=world.allocation if allocation else None,
            funding_source=world.funding_source if allocation else None,
            lab=world.lab,
            user=world.member if allocation else None,
            amount_usd=D("1.0000000001") * (i + 1),
        )
        for i in range(n)
    ]
    return DailySpend.objects.bulk_create(rows)


def _walk(client, url):
    """Every row id of a cursor-paged list, following `next`; `between(n)` runs after each
    page."""
    seen, pages = [], 0
    while url:
        body = client.get(url).json()
        seen.extend(row["id"] for row in body["results"])
        url, pages = body["next"], pages + 1
        yield seen, pages


def test_spend_cursor_is_stable_under_inserts(world, api, account):
    _spend(world, account, 45)
    client = api(world.finance)
    url = "/api/v1/spend/daily/?page_size=10"
    for seen, pages in _walk(client, url):  # noqa: B007 - read after the loop
        if pages == 2:
            # New rows arrive mid-walk: for days already read and for days to come.
            late = _spend(world, account, 20, first=DAY)
    expected = set(DailySpend.objects.values_list("id", flat=True))
    assert len(seen) == len(set(seen)), "a row was read twice"
    old = expected - {row.id for row in late}
    assert old <= set(seen), "a row that was there from the start was skipped"
    # The rows added for days still ahead of the cursor are read too.
    rows = DailySpend.objects.in_bulk(seen)
    days = [rows[i].day for i in seen]
    assert days == sorted(days)


def test_ledger_cursor_newest_first_is_stable_under_inserts(world, api):
    entries = [
        LedgerEntry.objects.create(
            funding_source=world.funding_source,
            allocation=world.allocation,
            kind="usage",
            amount_usd=D("0.10"),
        )
        for _ in range(12)
    ]
    client = api(world.member)
    seen = []
    for seen, pages in _walk(client, "/api/v1/ledger-entries/?page_size=5"):  # noqa: B007
        if pages == 1:
            LedgerEntry.objects.create(
                funding_source=world.funding_source, kind="usage", amount_usd=D("0.20")
            )
    assert seen == [e.pk for e in reversed(entries)]


def test_spend_filters_and_window(world, api, account):
    _spend(world, account, 20)
    _spend(world, account, 3, allocation=False, category="pod_disk")
    client = api(world.inst_admin)
    body = client.get("/api/v1/spend/daily/?start=2026-11-03&end=2026-11-05").json()
    assert {row["day"] for row in body["results"]} == {"2026-11-03", "2026-11-04"}
    row = body["results"][0]
    assert row["currency"] == "USD" and isinstance(row["amount"], str)
    assert D(row["amount"]) == DailySpend.objects.get(pk=row["id"]).amount_usd
    body = client.get("/api/v1/spend/daily/?unattributed=true").json()
    assert len(body["results"]) == 3 and {r["category"] for r in body["results"]} == {"pod_disk"}
    body = client.get(f"/api/v1/spend/daily/?allocation={world.allocation.pk}&ordering=-day")
    days = [r["day"] for r in body.json()["results"]]
    assert len(days) == 20 and days == sorted(days, reverse=True)


def test_spend_scope(world, api, account):
    _spend(world, account, 4)
    _spend(world, account, 2, allocation=False)
    assert len(api(world.member).get("/api/v1/spend/daily/").json()["results"]) == 4
    assert len(api(world.lab_admin).get("/api/v1/spend/daily/").json()["results"]) == 6
    assert api(world.other_member).get("/api/v1/spend/daily/").json()["results"] == []
    assert api(world.outsider).get("/api/v1/spend/daily/").json()["results"] == []


@pytest.mark.parametrize(
    "query",
    [
        "cursor=nonsense",
        "cursor=eyJvIjoiZGF5IiwidiI6WzEsMl19",
        "page_size=0",
        "page_size=101",
        "ordering=amount",
        "start=2026-13-01",
        "lab=-1",
        "lab=x",
        "category=gold",
    ],
)
def test_bad_list_parameters_are_400_problems(world, api, query):
    response = api(world.finance).get(f"/api/v1/spend/daily/?{query}")
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["errors"]


def test_page_numbers_are_capped(world, api):
    response = api(world.inst_admin).get("/api/v1/labs/?page_size=1000")
    assert response.status_code == 200
    response = api(world.inst_admin).get("/api/v1/labs/?page=99")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"


def _queries(client, url) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/spend/daily/",
        "/api/v1/spend/monthly/",
        "/api/v1/ledger-entries/",
        "/api/v1/funding-sources/",
        "/api/v1/allocations/",
        "/api/v1/resources/",
        "/api/v1/memberships/",
        "/api/v1/provisioning-requests/",
        "/api/v1/alerts/",
    ],
)
def test_query_counts_are_flat(world, api, account, url, django_assert_max_num_queries):
    """The same number of queries for a few rows as for many (pinned: token, scope, the page,
    its count and at most one prefetch)."""
    from tests.api.fixtures import make_alert
    from tests.factories import AllocationFactory, FundingSourceFactory, ResourceFactory

    client = api(world.inst_admin)

    def grow(n):
        _spend(world, account, n)
        for _ in range(n):
            LedgerEntry.objects.create(
                funding_source=world.funding_source, kind="usage", amount_usd=D("1")
            )
            fs = FundingSourceFactory(lab=world.lab)
            AllocationFactory(funding_source=fs, user=world.member)
            ResourceFactory(account=account, current_allocation=world.allocation)
            make_alert(world)

    grow(2)
    _queries(client, url)  # the token's first use records it
    few = _queries(client, url)
    grow(15)
    assert _queries(client, url) == few
    assert few <= 6


def test_invoices_filters_money_and_lines(world, api):
    from tests.api.fixtures import make_invoice

    issued = make_invoice(world)
    draft = make_invoice(world, world.other_funding_source, status="draft")
    client = api(world.finance)
    body = client.get("/api/v1/invoices/").json()
    assert body["count"] == 2 and "lines" not in body["results"][0]
    assert [r["id"] for r in client.get("/api/v1/invoices/?status=draft").json()["results"]] == [
        draft.pk
    ]
    for query in (f"lab={world.lab.pk}", f"funding_source={world.funding_source.pk}"):
        rows = client.get(f"/api/v1/invoices/?{query}").json()["results"]
        assert [r["id"] for r in rows] == [issued.pk]
    assert client.get("/api/v1/invoices/?month=2026-10-17").json()["count"] == 2
    assert client.get("/api/v1/invoices/?month=2026-09-01").json()["count"] == 0
    assert client.get("/api/v1/invoices/?ordering=total").status_code == 200  # ignored
    row = client.get(f"/api/v1/invoices/{issued.pk}/").json()
    assert row["number"] == "2026-" + f"{issued.number_seq:04d}" and row["status"] == "issued"
    # 3.0049999 rounds to 3.00 and -1.00 stays: 2.00 against 2.0049999 exactly.
    assert (row["total"], row["currency"]) == ("2.00", "USD")
    assert D(row["exact_total"]) == D("2.0049999")
    assert D(row["rounding_difference"]) == D("-0.0049999")
    assert row["reconciled"] is False  # the credit is not reconciled
    assert [line["kind"] for line in row["lines"]] == ["usage", "credit"]
    assert row["lines"][0]["amount"] == "3.00" and row["lines"][0]["unit"] == "GPU-hour"
    assert client.get(f"/api/v1/invoices/{draft.pk}/").json()["number"] == ""
    # Lab admins see their labs' invoices only; members none.
    assert api(world.lab_admin).get("/api/v1/invoices/").json()["count"] == 1
    assert api(world.member).get("/api/v1/invoices/").json()["count"] == 0


def test_invoice_lines_are_ones_own_on_issued_invoices(world, api):
    from tests.api.fixtures import make_invoice

    issued = make_invoice(world)
    make_invoice(world, world.other_funding_source, status="draft", allocation=world.allocation)
    rows = api(world.member).get("/api/v1/invoice-lines/").json()["results"]
    assert {r["invoice"] for r in rows} == {issued.pk}  # never a draft's
    assert {r["allocation"] for r in rows} == {world.allocation.pk}
    assert all(isinstance(r["amount"], str) and r["currency"] == "USD" for r in rows)
    assert api(world.lab_admin).get("/api/v1/invoice-lines/").json()["results"] == []
    assert api(world.other_member).get("/api/v1/invoice-lines/").json()["results"] == []


def test_retention_cases(world, api, account):
    from tests.api.fixtures import make_retention_case

    case = make_retention_case(world, account)
    make_retention_case(world, account, state="kept", lab=world.other_lab, owner=None)
    row = api(world.member).get("/api/v1/retention-cases/").json()["results"]
    assert [r["id"] for r in row] == [case.pk]
    row = row[0]
    assert row["state"] == "open" and row["reason"] == "idle" and row["size_gb"] == 100
    assert (row["monthly_cost"], row["currency"]) == ("7.0000000001", "USD")
    assert row["payer"] == world.allocation.pk and row["lab"] == world.lab.pk
    assert row["owner"] == world.member.pk and row["resource"] == case.resource_id
    assert [h["kind"] for h in row["holds"]] == ["thesis"]
    client = api(world.finance)
    assert client.get("/api/v1/retention-cases/").json()["count"] == 2
    assert client.get("/api/v1/retention-cases/?state=kept").json()["count"] == 1
    assert client.get(f"/api/v1/retention-cases/?lab={world.lab.pk}").json()["count"] == 1


@pytest.mark.parametrize(
    ("url", "role"),
    [
        ("/api/v1/invoices/", "finance"),
        ("/api/v1/invoice-lines/", "member"),
        ("/api/v1/retention-cases/", "lab_admin"),
    ],
)
def test_invoice_and_retention_query_counts_are_flat(world, api, account, url, role):
    from tests.api.fixtures import make_invoice, make_retention_case
    from tests.factories import FundingSourceFactory

    client = api(getattr(world, role))

    def grow(n):
        for _ in range(n):
            source = FundingSourceFactory(lab=world.lab)
            make_invoice(world, source, allocation=world.allocation)
            make_retention_case(world, account)

    grow(2)
    _queries(client, url)  # the token's first use records it
    few = _queries(client, url)
    grow(12)
    assert _queries(client, url) == few
    assert few <= 6
