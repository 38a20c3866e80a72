from io import StringIO

import pytest
from django.core.management import call_command
from django.db import transaction

from labgov.accounts.models import Institution, Membership, Role
from labgov.funding.models import Allocation, FundingSource


def test_seed_demo_creates_every_role_and_is_idempotent(db):
    out = StringIO()
    call_command("seed_demo", stdout=out)
    call_command("seed_demo", stdout=out)
    assert Institution.objects.filter(slug="northfield").count() == 1
    roles = set(Membership.objects.values_list("role", flat=True))
    assert roles == set(Role.values)
    assert FundingSource.objects.filter(institution__slug="northfield").count() == 5
    assert Allocation.objects.filter(funding_source__institution__slug="northfield").count() == 6
    text = out.getvalue()
    assert "nothing to seed" in text
    for username in ("ada", "fin", "pia", "sam"):
        assert f"  {username}" in text


@pytest.fixture(scope="class")
def seeded(django_db_setup, django_db_blocker):
    """`make run`'s demo seeded from the simulator once for the class's tests, which read it
    (seeding is the slow part): at the simulator's clock, in a transaction rolled back at the
    class's end, each test in a savepoint of it (pytest-django's `db` nests in it), so what a
    test writes is gone before the next one."""
    import time_machine

    from labgov.simulator import SimulatorServer, load_scenario

    with (
        SimulatorServer(scenario=load_scenario("default")) as sim,
        time_machine.travel(sim.state.now, tick=True),
        django_db_blocker.unblock(),
        transaction.atomic(),
    ):
        call_command("seed_demo", simulator=sim.base_url, stdout=StringIO())
        yield sim
        transaction.set_rollback(True)


class TestTheDemoSeededFromTheSimulator:
    def test_the_demo_scenarios_tagged_pods_find_their_demo_allocations(self, db, seeded):
        """`make run`: the simulator's pods carry the demo institution's tag codes, so the tagged
        ones are paid by their allocations from the first sync, and none is refused."""
        from labgov.runpod.models import Resource

        tagged = [r for r in Resource.objects.all() if "LABGOV_ALLOCATION" in r.env]
        assert tagged
        codes = dict(
            Allocation.objects.filter(funding_source__institution__slug="northfield").values_list(
                "tag_code", "pk"
            )
        )
        for resource in tagged:
            assert resource.tag_refusal == "", (resource.name, resource.tag_refusal)
            assert resource.current_allocation_id == codes[resource.env["LABGOV_ALLOCATION"]]
        # Journey 4 in the demo: a retention case waits on the Vision lab's forgotten pod.
        from labgov.retention.models import RetentionCase

        case = RetentionCase.objects.get(resource__name="vision-annotate")
        assert case.state == "open" and case.lab.slug == "vision"

    def test_a_freshly_seeded_demo_shows_a_running_idle_pod_and_its_dollars(self, db, seeded):
        """`make run`: the demo's history includes the utilization labgov would have sampled, so
        the idle-GPU alert is open from the first page (not two hours after the first sync), with
        the dollars spent idle, and right-sizing has its samples."""
        from labgov.alerts.models import Alert, Kind
        from labgov.utilization.models import Hour

        alert = Alert.objects.unresolved().get(kind=Kind.RUNNING_IDLE)
        assert alert.resource.runpod_id == "m8n7b6v5c4x3z2"  # idle since 10:30, 4 h before now
        assert float(alert.facts["spent_idle_usd"]) > 0
        assert "spent idle" in alert.title and "$" in alert.title
        # The history reaches back a day and more: the busy pods have their hours too.
        hours = Hour.objects.filter(resource__account__institution__slug="northfield")
        assert hours.values("hour").distinct().count() >= 24
        # Seeding again records the same samples, not more.
        before = hours.count()
        call_command("seed_demo", simulator=seeded.base_url, stdout=StringIO())
        assert hours.count() in (before, before + 1)  # the clock ticks on into the next hour

    def test_a_freshly_seeded_demo_shows_an_endpoint_whose_always_on_worker_serves_nothing(
        self, db, seeded
    ):
        """`make run`: the scenario's nlp-embed-api keeps one always-on L40S worker and serves no
        request at any hour; the demo's history has its readings, so its idle-workers alert is
        open from the first page with the dollars billed so far and per day, on Raj's NLP
        allocation, and its lab admin may change its workers."""
        from decimal import Decimal

        from labgov.alerts.models import Alert, Kind
        from labgov.idle.endpoints import may_change_workers
        from labgov.utilization.models import WorkerReading

        alert = Alert.objects.unresolved().get(
            kind=Kind.IDLE_ENDPOINT_WORKERS, resource__runpod_id="x5nlpembed7f8g"
        )
        assert alert.owner.username == "raj" and alert.lab.slug == "nlp"
        # One L40S worker all day: Runpod bills $1.9027 an hour (its price of $1.90 a GPU-hour and
        # the disk), the hour under way only in part, which does not lower the rate.
        assert alert.facts["per_day_usd"] == "45.67"
        assert Decimal(alert.facts["billed_usd"]) > 0
        assert "nlp-embed-api keeps 1 always-on worker serving nothing" in alert.title
        assert "$45.67/day" in alert.title
        readings = WorkerReading.objects.filter(resource=alert.resource)
        assert readings.count() >= 4 * 24 and not readings.filter(running__gt=0).exists()
        lee = alert.lab.memberships.get(role="lab_admin").user
        assert may_change_workers(lee, alert.resource)
