"""Alert pages and actions: the permission matrix (200 shown, 302 done, 403 visible but not
allowed, 404 not visible, anonymous to the login page, 405 for the wrong method), pod actions
through the simulator with confirmation and audit, settings pages, and pinned query counts."""

import datetime as dt
from decimal import Decimal as D

import pytest
from django.core import mail
from django.urls import reverse

from labgov.alerts.models import Alert, AlertSettings, Kind
from labgov.audit.models import AuditEvent
from tests.alerts.conftest import T0, bill, evaluate, make_pod, make_volume

pytestmark = pytest.mark.django_db

ROLES = ["inst_admin", "finance", "lab_admin", "member", "other_member", "outsider", "anonymous"]
HOUR = dt.timedelta(hours=1)


def _user(world, role):
    return None if role == "anonymous" else getattr(world, role)


def _status(response):
    if response.status_code == 302 and "/login/" in response["Location"]:
        return "login"
    return response.status_code


@pytest.fixture
def alert(world, account, clock):
    """A stopped-but-billing alert on the member's pod in the Vision lab."""
    from labgov.alerts.config import Resolver
    from labgov.alerts.evaluation import UPDATED_FIELDS
    from labgov.alerts.findings import Context
    from labgov.alerts.rules import stopped_pod_disks

    pod = make_pod(account, world.allocation, status="EXITED", volume_disk_gb=100, name="annot")
    bill(pod, T0 - HOUR)
    # Only the rule it needs (the pages are under test here, the evaluation elsewhere).
    ctx = Context(
        institution_id=world.institution.pk, now=T0, settings=Resolver(world.institution.pk)
    )
    [finding] = stopped_pod_disks(ctx)
    return Alert.objects.create(
        institution=world.institution,
        kind=finding.kind,
        subject_key=finding.subject_key,
        **{name: getattr(finding, name) for name in UPDATED_FIELDS},
    )


PAGE_CODES = {
    # Institution admins and finance see all; the lab's admin and the pod's owner theirs.
    "detail": dict(
        inst_admin=200, finance=200, lab_admin=200, member=200, other_member=404, outsider=404
    ),
    # The pod is stopped: starting it is asked for on a confirmation page (its owner too).
    "pod_confirm": dict(
        inst_admin=200, finance=403, lab_admin=200, member=200, other_member=404, outsider=404
    ),
    # Terminating is never asked for: admins are sent back to the alert, told to open a
    # retention case; the rest are refused as ever.
    "pod_terminate": dict(
        inst_admin=302, finance=403, lab_admin=302, member=403, other_member=404, outsider=404
    ),
}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("page", list(PAGE_CODES))
def test_alert_pages_permissions(world, alert, client_for, role, page):
    client = client_for(_user(world, role))
    if page == "detail":
        url = reverse("alerts:detail", args=[alert.pk])
    elif page == "pod_confirm":
        url = reverse("alerts:pod_action", args=[alert.pk, "start"])
    else:
        url = reverse("alerts:pod_action", args=[alert.pk, "terminate"])
    expected = "login" if role == "anonymous" else PAGE_CODES[page][role]
    assert _status(client.get(url)) == expected


@pytest.mark.parametrize("role", ROLES)
def test_alert_list_shows_only_what_each_person_may_see(world, alert, client_for, role):
    client = client_for(_user(world, role))
    response = client.get(reverse("alerts:list"))
    if role == "anonymous":
        assert _status(response) == "login"
        return
    assert response.status_code == 200
    visible = role in ("inst_admin", "finance", "lab_admin", "member")
    assert (f'data-alert="{alert.pk}"' in response.content.decode()) == visible


TRANSITION_CODES = dict(
    inst_admin=302, finance=403, lab_admin=302, member=403, other_member=404, outsider=404
)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", ["acknowledge", "snooze", "resolve", "reopen"])
def test_alert_transitions_permissions(world, alert, client_for, role, action):
    client = client_for(_user(world, role))
    url = reverse("alerts:transition", args=[alert.pk, action])
    assert client.get(url).status_code in (405, 302)  # the wrong method never changes it
    data = {"until": (T0 + dt.timedelta(days=3)).date().isoformat(), "note": "done"}
    response = client.post(url, data)
    expected = "login" if role == "anonymous" else TRANSITION_CODES[role]
    assert _status(response) == expected
    alert.refresh_from_db()
    if expected == 302 and action != "reopen":
        assert (
            alert.state
            == {
                "acknowledge": "acknowledged",
                "snooze": "snoozed",
                "resolve": "resolved",
            }[action]
        )
        assert AuditEvent.objects.filter(action=f"alert.{action}").exists()
    elif expected != 302:
        assert alert.state == "open"


def test_wrong_method_is_405(world, alert, client_for):
    client = client_for(world.lab_admin)
    assert client.get(reverse("alerts:transition", args=[alert.pk, "resolve"])).status_code == 405
    assert client.put(reverse("alerts:pod_action", args=[alert.pk, "stop"])).status_code == 405
    assert client.post(reverse("alerts:list")).status_code == 405


def test_snooze_with_a_past_date_says_why(world, alert, client_for):
    client = client_for(world.lab_admin)
    response = client.post(
        reverse("alerts:transition", args=[alert.pk, "snooze"]),
        {"until": "2020-01-01"},
        follow=True,
    )
    assert "Snooze until a time in the future." in response.content.decode()
    alert.refresh_from_db()
    assert alert.state == "open"


def test_alert_list_query_count_is_pinned(world, account, client_for, clock):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def count():
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(reverse("alerts:list"), {"state": "all"}).status_code == 200
        return len(ctx.captured_queries)

    client = client_for(world.lab_admin)
    make_volume(account, world.allocation, created_at_runpod=T0 - dt.timedelta(days=30))
    evaluate(world)
    small = count()
    for n in range(20):
        make_volume(account, world.allocation, created_at_runpod=T0 - dt.timedelta(days=30 + n))
    evaluate(world)
    assert Alert.objects.filter(kind=Kind.IDLE_NETWORK_VOLUME).count() == 21
    assert count() == small


# -- Pod actions through the simulator --------------------------------------------------------


@pytest.fixture
def sim_alert(
    world, sim, sim_account, at_sim_now, fast_clients, django_capture_on_commit_callbacks
):
    from labgov.runpod.sync import account_sync

    with django_capture_on_commit_callbacks(execute=True):
        run = account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    assert run.status == "succeeded", run.error
    alert = Alert.objects.get(kind=Kind.STOPPED_POD_DISK, subject_label="Pod vision-annotate")
    # The pod is unattributed in the scenario: it concerns the institution's admins.
    assert alert.lab is None
    return alert


def test_the_stopped_pod_alert_offers_a_retention_case_and_no_terminate(
    world, sim, sim_alert, client_for
):
    page = client_for(world.inst_admin).get(reverse("alerts:detail", args=[sim_alert.pk]))
    html = page.content.decode()
    assert "Open a retention case" in html
    assert reverse("retention:open", args=[sim_alert.resource_id]) in html
    assert "Start pod…" in html and "Terminate" not in html


@pytest.mark.parametrize("method", ["get", "post"])
def test_terminating_from_the_alert_is_refused_and_points_to_a_retention_case(
    world, sim, sim_alert, client_for, method
):
    # The attack: an institution admin (who handles this alert) posts the terminate action
    # straight to the alert's pod endpoint. Deleting data needs a second person.
    client = client_for(world.inst_admin)
    url = reverse("alerts:pod_action", args=[sim_alert.pk, "terminate"])
    response = getattr(client, method)(url, follow=True)
    assert response.redirect_chain[-1][0] == reverse("alerts:detail", args=[sim_alert.pk])
    text = response.content.decode()
    assert "needs two people" in text and "retention case" in text
    assert sim.state.pod_status(sim_alert.resource.runpod_id) == "EXITED"  # still there
    sim_alert.refresh_from_db()
    assert sim_alert.state == "open"
    resource = sim_alert.resource
    resource.refresh_from_db()
    assert resource.status == "EXITED" and resource.gone_at is None
    assert not AuditEvent.objects.filter(action="runpod.pod_terminate").exists()


def test_starting_the_pod_from_the_alert(world, sim, sim_alert, client_for):
    client = client_for(world.inst_admin)
    client.post(reverse("alerts:pod_action", args=[sim_alert.pk, "start"]))
    assert sim.state.pod_status(sim_alert.resource.runpod_id) in ("STARTING", "RUNNING")
    sim_alert.refresh_from_db()
    assert sim_alert.state == "resolved"


def test_a_pod_action_runpod_refuses_is_shown_and_changes_nothing(
    world, sim, sim_alert, client_for
):
    # Someone terminated the pod on Runpod's console since the last sync.
    sim.state.pod_action(sim_alert.resource.runpod_id, "terminate")
    client = client_for(world.inst_admin)
    response = client.post(reverse("alerts:pod_action", args=[sim_alert.pk, "start"]), follow=True)
    assert "Could not start the pod on Runpod" in response.content.decode()
    sim_alert.refresh_from_db()
    assert sim_alert.state == "open"
    assert not AuditEvent.objects.filter(action="runpod.pod_start").exists()


def test_stop_is_not_offered_for_a_stopped_pod(world, sim, sim_alert, client_for):
    client = client_for(world.inst_admin)
    response = client.post(reverse("alerts:pod_action", args=[sim_alert.pk, "stop"]), follow=True)
    assert "cannot have the pod stopped now" in response.content.decode()


# -- Settings ---------------------------------------------------------------------------------

SETTINGS_CODES = {
    # The outsider administers another institution: its own settings, none of ours.
    "list": dict(
        inst_admin=200, finance=403, lab_admin=200, member=403, other_member=403, outsider=200
    ),
    "lab": dict(
        inst_admin=200, finance=403, lab_admin=200, member=403, other_member=404, outsider=404
    ),
    "default": dict(
        inst_admin=200, finance=403, lab_admin=403, member=403, other_member=403, outsider=404
    ),
}


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("page", list(SETTINGS_CODES))
def test_settings_pages_permissions(world, client_for, role, page):
    url = {
        "list": reverse("alerts:settings"),
        "lab": reverse("alerts:settings_lab", args=[world.lab.pk]),
        "default": reverse("alerts:settings_default", args=[world.institution.pk]),
    }[page]
    client = client_for(_user(world, role))
    expected = "login" if role == "anonymous" else SETTINGS_CODES[page][role]
    assert _status(client.get(url)) == expected
    if page != "list" and expected not in (200, "login"):
        assert _status(client.post(url, {})) == expected


VALID = {
    "enabled_kinds": ["stopped_pod_disk", "budget_threshold"],
    "idle_volume_days": "14",
    "budget_thresholds": "60, 90",
    "funding_ending_days": "45",
    "balance_days": "5",
    "unattributed_threshold_usd": "250",
    "sync_failing_hours": "12",
    "idle_gpu_util_percent": "5",
    "idle_memory_util_percent": "5",
    "idle_grace_hours": "2",
}


def test_lab_admin_saves_lab_settings_audited(world, client_for):
    client = client_for(world.lab_admin)
    response = client.post(reverse("alerts:settings_lab", args=[world.lab.pk]), VALID)
    assert response.status_code == 302
    row = AlertSettings.objects.get(lab=world.lab)
    assert row.budget_thresholds == "60, 90" and row.idle_volume_days == 14
    assert "idle_network_volume" in row.disabled_kinds
    assert row.unattributed_threshold_usd == D("250")
    event = AuditEvent.objects.get(action="alert_settings.save")
    assert event.actor == world.lab_admin and event.after["idle_volume_days"] == 14


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("budget_thresholds", "fifty", "is not a whole percentage"),
        ("idle_volume_days", "0", "greater than or equal to 1"),
        ("unattributed_threshold_usd", "-5", "greater than or equal to 0"),
    ],
)
def test_settings_errors_are_shown_by_their_field(world, client_for, field, value, message):
    client = client_for(world.inst_admin)
    response = client.post(
        reverse("alerts:settings_default", args=[world.institution.pk]), {**VALID, field: value}
    )
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not AlertSettings.objects.exists()


def test_manual_balance_is_saved_by_institution_admins_only(world, account, client_for):
    url = reverse("runpod:account_balance", args=[account.pk])
    assert client_for(world.lab_admin).post(url, {"balance_usd": "50"}).status_code in (403, 404)
    assert client_for(world.finance).post(url, {"balance_usd": "50"}).status_code == 403
    assert client_for(world.inst_admin).get(url).status_code == 405
    response = client_for(world.inst_admin).post(url, {"balance_usd": "123.45"})
    assert response.status_code == 302
    account.refresh_from_db()
    assert account.manual_balance_usd == D("123.45")
    assert AuditEvent.objects.filter(action="runpod_account.manual_balance").exists()


def test_critical_alert_emails_at_once_others_wait_for_the_digest(
    world, account, clock, django_capture_on_commit_callbacks
):
    world.inst_admin.email = "admin@example.edu"
    world.inst_admin.save()
    account.manual_balance_usd = D("10")
    account.balance_spend_per_hr_usd = None
    account.save()
    from tests.alerts.conftest import spend

    for back in range(1, 8):
        spend(world, account, T0.date() - dt.timedelta(days=back), "100")  # hours left
    make_volume(account, created_at_runpod=T0 - dt.timedelta(days=30))  # a warning
    with django_capture_on_commit_callbacks(execute=True):
        evaluate(world)
    assert Alert.objects.get(kind=Kind.BALANCE_RISK).severity == "critical"
    assert [m.subject for m in mail.outbox] == [
        f"[labgov] {Alert.objects.get(kind=Kind.BALANCE_RISK).title}"
    ]


def test_home_shows_the_alert_to_its_lab_admin(world, alert, client_for):
    page = client_for(world.lab_admin).get(reverse("home")).content.decode()
    assert "Needs attention" in page and f'data-alert="{alert.pk}"' in page
    other = client_for(world.other_member).get(reverse("home")).content.decode()
    assert f'data-alert="{alert.pk}"' not in other


LAB_PANEL_CODES = dict(
    inst_admin=200, finance=200, lab_admin=200, member=403, other_member=404, outsider=404
)


@pytest.mark.parametrize("role", ROLES)
def test_lab_spend_page_alerts_panel(world, alert, client_for, role):
    url = reverse("alerts:lab_panel", args=[world.lab.pk])
    response = client_for(_user(world, role)).get(url)
    expected = "login" if role == "anonymous" else LAB_PANEL_CODES[role]
    assert _status(response) == expected
    if expected == 200:
        assert f'data-alert="{alert.pk}"' in response.content.decode()


def test_lab_panel_shows_only_that_labs_alerts(world, alert, client_for):
    client = client_for(world.inst_admin)
    page = client.get(reverse("dashboard:lab", args=[world.lab.pk])).content.decode()
    assert reverse("alerts:lab_panel", args=[world.lab.pk]) in page  # loaded by htmx
    other = client.get(reverse("alerts:lab_panel", args=[world.other_lab.pk])).content.decode()
    assert f'data-alert="{alert.pk}"' not in other


def test_alert_list_downloads_as_csv_with_its_filters(world, alert, client_for):
    import csv
    import io

    client = client_for(world.finance)
    response = client.get(reverse("alerts:list"), {"kind": "stopped_pod_disk", "format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:3] == ["Severity", "Kind", "Alert"]
    assert len(rows) == 2 and rows[1][2] == alert.title and rows[1][6] == "20.00"
    none = client.get(reverse("alerts:list"), {"kind": "balance_risk", "format": "csv"})
    assert len(list(csv.reader(io.StringIO(none.content.decode())))) == 1
    # Nobody downloads what they could not see on the page.
    other = client_for(world.other_member).get(reverse("alerts:list"), {"format": "csv"})
    assert len(list(csv.reader(io.StringIO(other.content.decode())))) == 1
