from decimal import Decimal

import pytest
from django.urls import reverse

from labgov.funding.models import LedgerEntry
from labgov.funding.services import ledger_post
from tests.dashboard.conftest import past_rate_only
from tests.factories import AllocationFactory, FundingSourceFactory


def _grow(world, n):
    """Add n funding sources to each lab, each with an allocation for the member and money on
    the ledger, so a query per row would show."""
    for _ in range(n):
        for lab in (world.lab, world.other_lab):
            fs = FundingSourceFactory(lab=lab)
            holder = world.member if lab == world.lab else world.other_member
            allocation = AllocationFactory(funding_source=fs, user=holder)
            ledger_post(
                actor=None,
                funding_source=fs,
                allocation=allocation,
                kind=LedgerEntry.Kind.USAGE,
                amount_usd=Decimal("1.50"),
            )


def _queries(client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        response = client.get(reverse("home"))
    assert response.status_code == 200
    return len(ctx.captured_queries), response


# Pinned counts: session, user, the role scope (plus the institution's labs for institution
# admins), funding sources with their figures, my allocations, and (for lab admins' funding
# sources and my own allocations) the spend of the burn-rate window and what runs and is
# stored now on them (the forecasts' second rate), and the top alerts.
EXPECTED_QUERIES = {"inst_admin": 7, "finance": 6, "lab_admin": 8, "member": 7}


@pytest.mark.parametrize("role", list(EXPECTED_QUERIES))
def test_home_query_count_is_pinned_and_flat(world, client_for, role):
    client = client_for(getattr(world, role))
    small, _ = _queries(client)
    _grow(world, 15)
    large, _ = _queries(client)
    assert small == large == EXPECTED_QUERIES[role]


def test_lab_admin_sees_figures_of_their_labs_only(world, client_for):
    ledger_post(
        actor=None,
        funding_source=world.funding_source,
        allocation=world.allocation,
        kind=LedgerEntry.Kind.COMMITMENT,
        amount_usd=Decimal("250.00"),
    )
    ledger_post(
        actor=None,
        funding_source=world.funding_source,
        allocation=world.allocation,
        kind=LedgerEntry.Kind.USAGE,
        amount_usd=Decimal("100.004"),
    )
    response = client_for(world.lab_admin).get(reverse("home"))
    page = response.content.decode()
    assert world.funding_source.name in page
    assert world.other_funding_source.name not in page
    assert "$10,000.00" in page and "$250.00" in page and "$100.00" in page
    assert "$9,650.00" in page  # remaining = 10,000 - 250 - 100.004, shown in cents


def test_member_sees_own_allocations_only(world, client_for):
    AllocationFactory(
        funding_source=world.other_funding_source, user=world.other_member, project_name="theirs"
    )
    response = client_for(world.member).get(reverse("home"))
    page = response.content.decode()
    assert "My allocations" in page
    assert world.funding_source.name in page
    assert "theirs" not in page
    assert "Institution funding overview" not in page


def test_finance_sees_institution_overview(world, client_for):
    response = client_for(world.finance).get(reverse("home"))
    page = response.content.decode()
    assert "Institution funding overview" in page
    assert "$20,000.00" in page  # two labs' grants of $10,000


def test_outsider_sees_nothing_of_ours(world, client_for):
    page = client_for(world.outsider).get(reverse("home")).content.decode()
    assert world.funding_source.name not in page
    assert world.lab.name not in page


def test_person_without_roles_is_told_so(db, client_for):
    from tests.factories import UserFactory

    page = client_for(UserFactory()).get(reverse("home")).content.decode()
    assert "no role" in page


def test_lab_admin_and_member_see_forecasts_and_dashboard_links(world, spend, client_for):
    past_rate_only(spend)
    page = client_for(world.lab_admin).get(reverse("home")).content.decode()
    assert reverse("dashboard:lab", args=[world.lab.pk]) in page
    assert reverse("dashboard:funding", args=[world.funding_source.pk]) in page
    assert "$11.00" in page  # the burn rate: $11 a day for the last 7 days
    assert "Lasts past its end (8 December 2026)" in page
    page = client_for(world.member).get(reverse("home")).content.decode()
    assert reverse("dashboard:me") in page
    assert "Runs out 6 June 2026, 6 months before it ends" in page
    page = client_for(world.finance).get(reverse("home")).content.decode()
    assert reverse("dashboard:institution") in page
