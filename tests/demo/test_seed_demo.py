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
