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
