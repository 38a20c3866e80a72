"""The balance alert speaks in hours when under two days, reaches the lab admins whose pods
would lose their data at $0, and approvers see the runway before approving new spend."""

import datetime as dt
from decimal import Decimal as D

import pytest
from django.urls import reverse

from labgov.alerts.balance import Runway, runway_words
from labgov.alerts.models import Alert, Kind, Severity
from labgov.notifications.models import Notification
from tests.alerts.conftest import T0, evaluate, make_pod, spend, unresolved
from tests.provisioning.conftest import catalog, draft, submitted  # noqa: F401, F811 - fixtures

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("days", "words"),
    [
        ("0.0100", "less than an hour"),
        ("0.0417", "about 1 hour"),
        ("0.3", "about 7 hours"),
        ("0.3333", "about 8 hours"),
        ("1.99", "about 48 hours"),
        ("2.4", "about 2 days"),
        ("12.6", "about 13 days"),
    ],
)
def test_runway_in_hours_under_two_days_and_days_otherwise(days, words):
    assert runway_words(D(days)) == words


def _low_balance(world, account):
    # $100 at $300/day: a third of a day.
    account.manual_balance_usd = D("100")
    account.save()
    for back in range(1, 8):
        spend(world, account, T0.date() - dt.timedelta(days=back), "300")


def test_balance_alert_says_about_8_hours(world, account, clock):
    _low_balance(world, account)
    evaluate(world)
    [alert] = unresolved(Kind.BALANCE_RISK)
    assert alert.title == "Runpod account Lab Runpod: $100.00 lasts about 8 hours at $300.00/day"
    assert "0.3" not in alert.title
    assert alert.severity == Severity.CRITICAL


def test_lab_admins_of_labs_whose_pods_would_be_lost_see_and_are_told(
    world, account, clock, client_for
):
    # An institution-wide account: its own alert concerns the institution's admins. One of the
    # pods without a network volume is paid by the member's lab.
    _low_balance(world, account)
    make_pod(account, world.allocation, name="vision-train")
    make_pod(account, name="nobodys")
    evaluate(world)
    alerts = {a.subject_key: a for a in unresolved(Kind.BALANCE_RISK)}
    assert set(alerts) == {f"account:{account.pk}", f"account:{account.pk}:lab:{world.lab.pk}"}
    assert alerts[f"account:{account.pk}"].lab is None
    lab_alert = alerts[f"account:{account.pk}:lab:{world.lab.pk}"]
    assert lab_alert.lab == world.lab
    assert [p["name"] for p in lab_alert.facts["pods_at_risk"]] == ["vision-train"]
    assert "about 8 hours" in lab_alert.title
    told = Notification.objects.filter(kind="alert.balance_risk", recipient=world.lab_admin)
    assert told.count() == 1
    assert "vision-train" in told.get().body and "nobodys" not in told.get().body
    page = client_for(world.lab_admin).get(reverse("alerts:list")).content.decode()
    assert "lasts about 8 hours" in page
    # The other lab's admin has no pod at risk there and sees nothing.
    from labgov.accounts.models import Role
    from tests.factories import MembershipFactory

    other_admin = MembershipFactory(role=Role.LAB_ADMIN, lab=world.other_lab).user
    assert not Alert.objects.visible_to(other_admin).filter(kind=Kind.BALANCE_RISK)
    # Evaluating again changes nothing and tells nobody twice.
    evaluate(world)
    assert told.count() == 1


def test_the_approver_sees_the_runway_before_approving(
    world,
    account,
    clock,
    client_for,
    submitted,  # noqa: F811 - the fixture
):
    _low_balance(world, account)
    req = submitted()
    assert req.state == "submitted"
    page = client_for(world.lab_admin).get(reverse("provisioning:detail", args=[req.pk]))
    text = page.content.decode()
    assert 'id="balance-runway"' in text
    assert "$100.00 (entered by an admin) lasts about 8 hours at $300.00/day" in text
    # The requester is not the approver: no runway on their page.
    mine = client_for(world.member).get(reverse("provisioning:detail", args=[req.pk]))
    assert 'id="balance-runway"' not in mine.content.decode()


def test_runway_without_spend_is_unbounded():
    runway = Runway(balance_usd=D("5"), source="entered by an admin", daily_usd=D("0"))
    assert runway.days_left is None and runway.words == "as long as nothing is spent"


def test_the_review_queue_shows_the_runway_too(world, account, clock, client_for, submitted):  # noqa: F811
    _low_balance(world, account)
    submitted()
    page = client_for(world.lab_admin).get(reverse("provisioning:review")).content.decode()
    assert 'id="balance-runways"' in page
    assert "Lab Runpod: $100.00 lasts about 8 hours at $300.00/day" in page
