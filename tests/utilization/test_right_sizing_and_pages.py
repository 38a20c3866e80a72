"""Right-sizing figures on a pod with known utilization, its CSV, and who may see the idle
pages (lab admin, institution admin, finance read; member 403; outsider 404)."""

import datetime as dt
from decimal import Decimal as D

import pytest
from django.urls import reverse

from labgov.idle.models import AutoStopPolicy
from labgov.idle.rightsizing import suggestions
from labgov.provisioning.models import ProvisioningRequest
from tests.alerts.conftest import T0, bill, make_pod
from tests.provisioning.conftest import H100, catalog, draft  # noqa: F401 - fixtures
from tests.utilization.conftest import samples

pytestmark = pytest.mark.django_db
H = dt.timedelta(hours=1)


@pytest.fixture
def oversized(world, account, catalog, draft, clock):  # noqa: F811 - fixtures
    """8 × H100 for 30 hours of which one GPU worked (90 %, 40 % of its memory)."""
    pod = make_pod(
        account,
        world.allocation,
        name="eight-for-one",
        gpu_type_id=H100,
        gpu_count=8,
        cloud="SECURE",
        cost_per_hr_usd=D("35.12"),
    )
    samples(pod, T0 - 30 * H, T0, util=90, mem=40, busy=1)
    for hour in range(30):
        bill(pod, T0 - (30 - hour) * H, disk="0", gpu="35.12", allocation=world.allocation)
    request = draft(gpu_type_id=H100, gpu_count=8)
    ProvisioningRequest.objects.filter(pk=request.pk).update(state="provisioned")
    request.resources.add(pod)
    return pod, request


def test_one_busy_gpu_of_eight_suggests_one_smaller_gpu_with_the_monthly_saving(world, oversized):
    pod, request = oversized
    (s,) = suggestions(world.lab, now=T0)
    assert s.pod == pod and s.request == request
    assert (s.gpu_count, s.gpu_type_id) == (1, "NVIDIA A40")  # 32 GB peak × 1.2 fits 48 GB
    assert s.usage.hours == 30 and s.usage.busy_gpus_max == 1
    assert s.usage.util_mean == pytest.approx(11.25) and s.usage.memory_util_max == 40
    assert s.billed_usd == D("1053.60")
    # ($35.12 − $0.40) × 30 h in 30 days, scaled to a 730-hour month
    assert s.monthly_saving_usd == (D("35.12") - D("0.40")) * 30 * D(730) / D(720)
    assert s.basis_words == "1.3 days of samples (30 hours)"


def test_a_pod_that_uses_its_gpus_is_not_listed(world, account, catalog, clock):  # noqa: F811
    pod = make_pod(account, world.allocation, gpu_type_id=H100, gpu_count=2, cloud="SECURE")
    samples(pod, T0 - 5 * H, T0, util=80, mem=90)
    assert suggestions(world.lab, now=T0) == []


def test_page_and_csv_for_who_may_see_the_lab(world, oversized, client_for):
    url = reverse("idle:right_sizing", args=[world.lab.pk])
    for user in (world.lab_admin, world.inst_admin, world.finance):
        assert client_for(user).get(url).status_code == 200
    assert client_for(world.member).get(url).status_code == 403
    assert client_for(world.outsider).get(url).status_code == 404
    response = client_for(world.lab_admin).get(url + "?format=csv")
    text = response.content.decode()
    assert "eight-for-one" in text and "1× NVIDIA A40" in text and "1056.07" in text
    assert "1.3 days of samples (30 hours)" in text


def test_idle_pages_and_policy_permissions(world, client_for):
    lab_page = reverse("idle:lab", args=[world.lab.pk])
    policy = reverse("idle:policy", args=[world.lab.pk])
    values = {"enabled": "on", "idle_hours": "4", "warn_minutes": "30", "keep_hours": "2"}
    assert client_for(world.lab_admin).get(lab_page).status_code == 200
    assert client_for(world.member).get(lab_page).status_code == 403
    assert client_for(world.outsider).get(lab_page).status_code == 404
    assert client_for(world.finance).post(policy, values).status_code == 403
    assert client_for(world.member).post(policy, values).status_code == 403
    assert client_for(world.outsider).post(policy, values).status_code == 404
    assert client_for(world.lab_admin).put(policy).status_code == 405
    assert not AutoStopPolicy.objects.exists()
    assert client_for(world.lab_admin).post(policy, values).status_code == 302
    saved = AutoStopPolicy.objects.get(lab=world.lab)
    assert saved.enabled and saved.idle_hours == 4
    values["idle_hours"] = "100000"  # bounded by the form
    assert client_for(world.lab_admin).post(policy, values).status_code == 200
    assert AutoStopPolicy.objects.get(lab=world.lab).idle_hours == 4


def test_the_request_form_shows_the_requesters_past_utilization(world, oversized, client_for):
    _, request = oversized
    page = client_for(world.member).get(reverse("provisioning:new")).content.decode()
    assert "What your GPUs did on similar requests" in page
    assert f'data-past-request="{request.pk}"' in page
    others = client_for(world.lab_admin).get(reverse("provisioning:new")).content.decode()
    assert "data-past-request" not in others  # only one's own requests


def test_notice_page_and_keep_running_only_for_owner_and_lab_admins(world, account, client_for):
    from labgov.idle.models import StopNotice

    pod = make_pod(account, world.allocation, gpu_type_id=H100, gpu_count=8)
    notice = StopNotice.objects.create(
        resource=pod,
        lab=world.lab,
        owner=world.member,
        idle_since=T0,
        warned_at=T0,
        stop_at=T0 + H,
    )
    page = reverse("idle:notice", args=[notice.pk])
    keep = reverse("idle:notice_keep", args=[notice.pk])
    for user in (world.member, world.lab_admin, world.inst_admin):
        assert client_for(user).get(page).status_code == 200
    for user in (world.finance, world.other_member, world.outsider):
        assert client_for(user).get(page).status_code == 404
        assert client_for(user).post(keep).status_code == 404  # the attack: keeping another's pod
    assert client_for(world.member).get(keep).status_code == 405
    notice.refresh_from_db()
    assert notice.state == StopNotice.State.WARNED and notice.kept_by is None
    assert client_for(world.member).post(keep).status_code == 302
    notice.refresh_from_db()
    assert notice.state == StopNotice.State.KEPT and notice.kept_by == world.member


def test_right_sizing_names_the_owner_by_name(world, oversized, client_for):
    world.member.first_name, world.member.last_name = "Sam", "Okafor"
    world.member.save(update_fields=["first_name", "last_name"])
    url = reverse("idle:right_sizing", args=[world.lab.pk])
    page = client_for(world.lab_admin).get(url).content.decode()
    assert "Sam Okafor" in page and f">{world.member.username}<" not in page
    csv_text = client_for(world.lab_admin).get(url + "?format=csv").content.decode()
    assert "Sam Okafor" in csv_text


def test_keep_running_is_capped_at_the_policy_counted_and_the_admins_hear_of_the_second(
    world, account, client_for
):
    from labgov.idle.models import AutoStopPolicy, StopNotice
    from labgov.notifications.models import Notification

    AutoStopPolicy.objects.create(lab=world.lab, enabled=True, idle_hours=3, keep_hours=1)
    pod = make_pod(account, world.allocation, gpu_type_id=H100, gpu_count=8)
    notice = StopNotice.objects.create(
        resource=pod, lab=world.lab, owner=world.member, idle_since=T0, warned_at=T0, stop_at=T0
    )
    keep = reverse("idle:notice_keep", args=[notice.pk])
    member = client_for(world.member)
    # The attack: 72 hours when the lab's policy says 1.
    page = member.post(keep, {"hours": "72"}, follow=True).content.decode()
    assert "at most 1 hours at a time" in page
    notice.refresh_from_db()
    assert notice.state == StopNotice.State.WARNED and notice.keeps == 0

    member.post(keep)
    notice.refresh_from_db()
    from django.utils import timezone

    assert notice.keeps == 1 and notice.stop_at == notice.kept_until
    assert notice.kept_until - timezone.now() <= dt.timedelta(hours=1)  # the policy's hour
    assert not Notification.objects.filter(kind="idle.kept_again").exists()
    member.post(keep)
    notice.refresh_from_db()
    assert notice.keeps == 2
    (told,) = Notification.objects.filter(kind="idle.kept_again")
    assert told.recipient == world.lab_admin and "a second time" in told.subject
    member.post(keep)  # the third: counted, the admins were told already
    notice.refresh_from_db()
    assert notice.keeps == 3 and Notification.objects.filter(kind="idle.kept_again").count() == 1
    page = member.get(reverse("idle:notice", args=[notice.pk])).content.decode()
    assert "kept 3 times" in page


@pytest.mark.usefixtures("catalog", "clock")
def test_less_than_a_day_of_samples_suggests_no_saving_and_says_so(world, account, client_for):
    """An 8 × H100 pod idle but for one GPU over 10 sampled hours: the rules would suggest
    one A40, but 10 hours is no basis for giving up GPUs."""
    pod = make_pod(
        account,
        world.allocation,
        name="ten-hours-young",
        gpu_type_id=H100,
        gpu_count=8,
        cloud="SECURE",
        cost_per_hr_usd=D("35.12"),
    )
    samples(pod, T0 - 10 * H, T0, util=90, mem=40, busy=1)
    (s,) = suggestions(world.lab, now=T0)
    assert not s.enough_data and s.monthly_saving_usd is None
    assert s.basis_words == "not enough data yet: 10 hours of samples"
    url = reverse("idle:right_sizing", args=[world.lab.pk])
    page = client_for(world.lab_admin).get(url).content.decode()
    assert "not enough data yet: 10 hours of samples" in page
    assert "NVIDIA A40" not in page  # no GPU suggested
    csv_rows = client_for(world.lab_admin).get(url + "?format=csv").content.decode()
    (row,) = [line for line in csv_rows.splitlines() if "ten-hours-young" in line]
    assert row.rstrip().endswith("not enough data yet: 10 hours of samples,")


@pytest.mark.usefixtures("catalog", "clock")
def test_a_day_of_samples_is_enough_and_the_short_one_waits_below_it(world, account):
    young, grown = (
        make_pod(
            account,
            world.allocation,
            name=name,
            gpu_type_id=H100,
            gpu_count=8,
            cloud="SECURE",
            cost_per_hr_usd=D("35.12"),
        )
        for name in ("young", "grown")
    )
    samples(young, T0 - 23 * H, T0, util=90, mem=40, busy=1)
    samples(grown, T0 - 24 * H, T0, util=90, mem=40, busy=1)
    found = suggestions(world.lab, now=T0)
    assert [(s.pod, s.enough_data) for s in found] == [(grown, True), (young, False)]
    assert found[0].basis_words == "1.0 days of samples (24 hours)"
    assert found[0].monthly_saving_usd > 0
