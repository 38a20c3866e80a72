"""Stopped and idle are judged from the billing history the first sync fetches, not from when
labgov first saw a resource: the simulator's month holds a pod stopped on 8 November and
network volumes nothing has used for weeks (one since June, before any history)."""

import datetime as dt
from decimal import Decimal as D

import pytest
import time_machine

from labgov.alerts.evaluation import alerts_evaluate
from labgov.alerts.models import Kind
from labgov.runpod.sync import account_sync
from tests.alerts.conftest import unresolved

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("at_sim_now")]


def _first_sync_and_evaluate(sim, world, account, clients):
    with time_machine.travel(sim.state.now, tick=False):
        account_sync(account_id=account.pk, client_factory=clients)
        alerts_evaluate(institution_id=world.institution.pk)


def _alerts(kind):
    return {a.subject_label: a for a in unresolved(kind)}


def test_stopped_since_comes_from_the_last_hour_of_compute(
    sim, world, sim_account, fast_clients, settings
):
    # vision-annotate stopped at 17:45 on 8 November; labgov first syncs on 20 November,
    # fetching two weeks of history.
    settings.LABGOV_SYNC_FIRST_DAYS = 14
    _first_sync_and_evaluate(sim, world, sim_account, fast_clients)
    alert = _alerts(Kind.STOPPED_POD_DISK)["Pod vision-annotate"]
    assert "Stopped since 2026-11-08 18:00 UTC." in alert.detail
    assert alert.facts["stopped_at"] == "2026-11-08T18:00:00+00:00"
    assert alert.facts["stopped_before"] is False
    assert "2026-11-20" not in alert.detail  # not the first sync's time


def test_a_stop_before_the_history_held_reads_before_its_start(
    sim, world, sim_account, fast_clients
):
    # The tests' first sync fetches eight days, whole, from midnight on 12 November: the pod
    # stopped four days before that (twelve before the sync).
    _first_sync_and_evaluate(sim, world, sim_account, fast_clients)
    alert = _alerts(Kind.STOPPED_POD_DISK)["Pod vision-annotate"]
    assert "Stopped since before 12 November 2026 (the start of the billing history" in (
        alert.detail
    )
    assert alert.facts["stopped_before"] is True
    assert alert.facts["stopped_at"] == "2026-11-12T00:00:00+00:00"


def test_the_first_sync_flags_idle_network_volumes(sim, world, sim_account, fast_clients):
    _first_sync_and_evaluate(sim, world, sim_account, fast_clients)
    idle = _alerts(Kind.IDLE_NETWORK_VOLUME)
    # old-thesis-data (June), shared-models (October) and scratch-hp (3 November) were not
    # mounted by a pod billed for compute in the eight days held. vision-checkpoints was used
    # by vision-data-sync until 16 November: four days, not yet idle.
    assert set(idle) == {
        "Network volume old-thesis-data",
        "Network volume shared-models",
        "Network volume scratch-hp",
    }
    thesis = idle["Network volume old-thesis-data"]
    assert thesis.facts["idle_since_before"] is True
    assert "at least 8 days" in thesis.title
    assert "Idle since before 12 November 2026" in thesis.detail


def test_idle_volumes_count_from_the_last_billed_hour_of_a_pod_using_them(
    sim, world, sim_account, fast_clients, settings
):
    # Four days after the simulator's now, vision-checkpoints has been idle for eight: its pod
    # last ran in the hour ending 12:00 on 16 November, within the ten days fetched.
    settings.LABGOV_SYNC_FIRST_DAYS = 10
    sim.advance(hours=24 * 4)
    _first_sync_and_evaluate(sim, world, sim_account, fast_clients)
    idle = _alerts(Kind.IDLE_NETWORK_VOLUME)
    checkpoints = idle["Network volume vision-checkpoints"]
    assert checkpoints.facts["idle_since"] == "2026-11-16T12:00:00+00:00"
    assert checkpoints.facts["idle_days"] == 8
    # The four idle volumes of the demo: $21 + $28 + $14 + $52.50 a month.
    assert len(idle) == 4
    assert sum((a.monthly_cost_usd for a in idle.values()), D(0)) == D("115.50")


def test_idle_volume_evaluation_reads_usage_in_one_grouped_query(
    sim, world, sim_account, fast_clients, django_assert_max_num_queries
):
    from labgov.alerts.config import Resolver
    from labgov.alerts.findings import Context
    from labgov.alerts.rules import idle_network_volumes

    with time_machine.travel(sim.state.now, tick=False):
        account_sync(account_id=sim_account.pk, client_factory=fast_clients)
    ctx = Context(
        institution_id=world.institution.pk,
        now=sim.state.now + dt.timedelta(days=4),
        settings=Resolver(world.institution.pk),
    )
    ctx.settings.for_lab(None)  # settings are read once per evaluation, not per volume
    with django_assert_max_num_queries(3):  # volumes, pods' last compute, pods mounting now
        idle_network_volumes(ctx)


def test_a_standing_alert_keeps_its_stop_time_without_reading_the_history_again(
    world, account, clock
):
    from labgov.runpod.models import BillingRecord
    from tests.alerts.conftest import T0, bill, evaluate, make_pod

    pod = make_pod(account, world.allocation, status="EXITED", volume_disk_gb=100)
    hour = dt.timedelta(hours=1)
    ran = bill(pod, T0 - 3 * hour, gpu="0.69")
    bill(pod, T0 - 2 * hour)
    bill(pod, T0 - hour)
    evaluate(world)
    [alert] = unresolved(Kind.STOPPED_POD_DISK)
    assert alert.facts["stopped_at"] == (T0 - 2 * hour).isoformat()
    # Were the history read again, this pod would now look stopped since before it began.
    BillingRecord.objects.filter(pk=ran.pk).update(gpu_usd=0)
    evaluate(world)
    alert.refresh_from_db()
    assert alert.facts["stopped_at"] == (T0 - 2 * hour).isoformat()
    assert alert.facts["stopped_before"] is False
