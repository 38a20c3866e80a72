from io import StringIO

from django.core.management import call_command

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


def test_the_demo_scenarios_tagged_pods_find_their_demo_allocations(db, sim, at_sim_now):
    """`make run`: the simulator's pods carry the demo institution's tag codes, so the tagged
    ones are paid by their allocations from the first sync, and none is refused."""
    from labgov.runpod.models import Resource

    call_command("seed_demo", simulator=sim.base_url, stdout=StringIO())
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


def test_a_freshly_seeded_demo_shows_a_running_idle_pod_and_its_dollars(db, sim, at_sim_now):
    """`make run`: the demo's history includes the utilization labgov would have sampled, so
    the idle-GPU alert is open from the first page (not two hours after the first sync), with
    the dollars spent idle, and right-sizing has its samples."""
    from labgov.alerts.models import Alert, Kind
    from labgov.utilization.models import Hour

    call_command("seed_demo", simulator=sim.base_url, stdout=StringIO())
    alert = Alert.objects.unresolved().get(kind=Kind.RUNNING_IDLE)
    assert alert.resource.runpod_id == "m8n7b6v5c4x3z2"  # idle since 10:30, 4 h before now
    assert float(alert.facts["spent_idle_usd"]) > 0
    assert "spent idle" in alert.title and "$" in alert.title
    # The history reaches back a day and more: the busy pods have their hours too.
    hours = Hour.objects.filter(resource__account__institution__slug="northfield")
    assert hours.values("hour").distinct().count() >= 24
    # Seeding again records the same samples, not more.
    before = hours.count()
    call_command("seed_demo", simulator=sim.base_url, stdout=StringIO())
    assert hours.count() in (before, before + 1)  # the clock ticks on into the next hour
