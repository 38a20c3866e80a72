import datetime as dt
from decimal import Decimal

import factory
from django.utils import timezone

from labgov.accounts.models import Institution, Lab, Membership, Role, User
from labgov.funding.models import Allocation, FundingSource

# Tests meet two clocks: the simulator's, fixed by its default scenario (2026-11-20, with a
# month of history before it), which tests of synced spend travel to, and the machine's, which
# the rest read. Default dates cover both, whatever day the suite runs on, so no test depends
# on the calendar: roles and money start before the earlier of the two days and end after the
# later one.
SCENARIO_DAY = dt.date(2026, 11, 20)


def _since(days: int) -> dt.date:
    return min(timezone.now().date(), SCENARIO_DAY) - dt.timedelta(days=days)


def _until(days: int) -> dt.date:
    return max(timezone.now().date(), SCENARIO_DAY) + dt.timedelta(days=days)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    first_name = factory.Faker("first_name")
    last_name = factory.Faker("last_name")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.edu")
    password = factory.PostGenerationMethodCall("set_password", "pw")

    @factory.post_generation
    def _save(obj, create, extracted, **kwargs):  # noqa: N805
        if create:
            obj.save()


class InstitutionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Institution

    name = factory.Sequence(lambda n: f"University {n}")
    slug = factory.Sequence(lambda n: f"uni-{n}")


class LabFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Lab

    institution = factory.SubFactory(InstitutionFactory)
    name = factory.Sequence(lambda n: f"Lab {n}")
    slug = factory.Sequence(lambda n: f"lab-{n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    role = Role.MEMBER
    lab = factory.SubFactory(LabFactory)
    institution = factory.LazyAttribute(lambda m: m.lab.institution if m.lab else None)
    start_date = factory.LazyFunction(lambda: _since(365))


class FundingSourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = FundingSource

    lab = factory.SubFactory(LabFactory)
    institution = factory.LazyAttribute(lambda f: f.lab.institution)
    name = factory.Sequence(lambda n: f"Grant {n}")
    award_number = factory.Sequence(lambda n: f"AWD-{n:05d}")
    sponsor = "NSF"
    cost_center = factory.Sequence(lambda n: f"CC-{n}")
    start_date = factory.LazyFunction(lambda: _since(100))
    end_date = factory.LazyFunction(lambda: _until(265))
    amount_usd = Decimal("10000.00")


class AllocationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Allocation

    funding_source = factory.SubFactory(FundingSourceFactory)
    user = factory.SubFactory(UserFactory)
    cap_usd = Decimal("1000.00")
    start_date = factory.LazyAttribute(lambda a: a.funding_source.start_date)
    end_date = factory.LazyAttribute(lambda a: a.funding_source.end_date)


class RunpodAccountFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "runpod.RunpodAccount"

    institution = factory.SubFactory(InstitutionFactory)
    name = factory.Sequence(lambda n: f"Runpod {n}")
    base_url = "http://127.0.0.1:9"
    api_key_encrypted = factory.LazyFunction(lambda: _encrypt("rp_test_key_0000"))
    api_key_last4 = "0000"
    write_key_encrypted = factory.LazyFunction(lambda: _encrypt("rp_test_key_0000"))
    write_key_last4 = "0000"


def _encrypt(text: str) -> str:
    from labgov.core.crypto import encrypt

    return encrypt(text)


class ResourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "runpod.Resource"

    account = factory.SubFactory(RunpodAccountFactory)
    kind = "pod"
    runpod_id = factory.Sequence(lambda n: f"pod{n:05d}")
    name = factory.Sequence(lambda n: f"pod-{n}")
    status = "RUNNING"
