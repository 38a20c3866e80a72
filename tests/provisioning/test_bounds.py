"""Numbers larger than a column holds, strings longer than it, NUL characters and dates past
the calendar: a form error, a row error or a 400, never a 500 (issue 9, item 11).

tests/test_fuzz.py throws extreme values at every form and page; these are the reported
cases, each checked for the answer it should give."""

from decimal import Decimal as D

import pytest
from django.urls import reverse

from labgov.core.bounds import MAX_AMOUNT
from labgov.funding.models import FundingSource
from labgov.provisioning.models import ProvisioningPolicy, ProvisioningRequest
from tests.factories import FundingSourceFactory
from tests.provisioning.conftest import H100

REQUEST = {
    "title": "Big",
    "deployment_model": "pod",
    "gpu_type_id": H100,
    "gpu_count": "1",
    "cloud": "SECURE",
    "image": "runpod/pytorch",
    "expected_hours": "10",
    "container_disk_gb": "20",
    "restart_minutes": "10",
}


def _request_form(world, **values):
    return {**REQUEST, "allocation": world.allocation.pk, **values}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gpu_count", "99999999999"),
        ("gpu_count", str(2**31)),
        ("node_count", str(2**31)),
        ("container_disk_gb", "99999999999999999999"),
        ("expected_hours", "9999999999.99"),
        ("requests_per_day", "1e308"),
        ("duration_days", "99999999"),
        ("title", "x" * 121),
        ("justification", "a\x00b"),
    ],
)
def test_a_request_field_past_its_column_is_a_form_error(world, catalog, client_for, field, value):
    client = client_for(world.member)
    response = client.post(reverse("provisioning:new"), _request_form(world, **{field: value}))
    assert response.status_code == 200
    assert response.context["form"].errors.get(field), response.context["form"].errors
    assert not ProvisioningRequest.objects.filter(title="Big").exists()


def test_a_request_at_every_limit_saves_or_says_why_and_every_page_still_shows(
    world, catalog, client_for
):
    """The largest numbers the form takes: the estimate they make either fits its column
    (and the lists show it) or is refused with a message, for the requester and the admin."""
    client = client_for(world.member)
    form = client.get(reverse("provisioning:new")).context["form"]
    at_max = {
        name: str(field.max_value)
        for name, field in form.fields.items()
        if getattr(field, "max_value", None) is not None
    }
    at_max["network_volume_gb"] = "4096"
    response = client.post(reverse("provisioning:new"), _request_form(world, **at_max))
    assert response.status_code in (200, 302)
    if response.status_code == 200:
        assert response.context["form"].errors
    for user, page in [
        (world.member, "provisioning:list"),
        (world.lab_admin, "provisioning:review"),
        (world.inst_admin, "provisioning:review"),
    ]:
        assert client_for(user).get(reverse(page)).status_code == 200


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_gpus", str(2**31)),
        ("max_usd_per_hour", "99999999999999.99"),
        ("max_request_usd", "1e13"),
        ("second_approval_over_usd", "10000000000"),
        ("auto_approve_under_usd", "NaN"),
    ],
)
def test_a_policy_number_past_its_column_is_a_form_error(world, client_for, field, value):
    url = reverse("provisioning:policy_lab", args=[world.lab.pk])
    data = {"allowed_models": ["pod"], "allowed_clouds": ["SECURE"], "auto_approve_under_usd": "0"}
    response = client_for(world.lab_admin).post(url, {**data, field: value})
    assert response.status_code == 200
    assert response.context["form"].errors.get(field)
    assert not ProvisioningPolicy.objects.filter(lab=world.lab).exists()


FUNDING = {
    "kind": "grant",
    "name": "Huge",
    "start_date": "2026-01-01",
    "end_date": "2026-12-31",
    "status": "active",
}


@pytest.mark.parametrize("amount", ["10000000000", "99999999999999", "1e308", "-1e308"])
def test_a_funding_amount_past_the_limit_is_a_form_error(world, client_for, amount):
    data = {**FUNDING, "lab": world.lab.pk, "amount_usd": amount}
    response = client_for(world.inst_admin).post(reverse("funding:create"), data)
    assert response.status_code == 200
    assert response.context["form"].errors.get("amount_usd")
    assert not FundingSource.objects.filter(name="Huge").exists()


def test_a_funding_source_at_the_limit_keeps_every_page_showing(world, client_for):
    """The largest amount allowed, several times over in one lab: the remaining-money
    annotations and the dashboards' sums still fit."""
    data = {**FUNDING, "lab": world.lab.pk, "amount_usd": str(MAX_AMOUNT)}
    client = client_for(world.inst_admin)
    assert client.post(reverse("funding:create"), data).status_code == 302
    for _ in range(12):
        FundingSourceFactory(lab=world.lab, amount_usd=MAX_AMOUNT)
    for url in [
        reverse("home"),
        reverse("funding:list"),
        reverse("funding:list") + "?sort=remaining",
        reverse("dashboard:lab", args=[world.lab.pk]),
        reverse("dashboard:institution"),
        reverse("dashboard:funding", args=[FundingSource.objects.get(name="Huge").pk]),
    ]:
        assert client.get(url).status_code == 200, url
    for user in (world.lab_admin, world.finance):
        assert client_for(user).get(reverse("home")).status_code == 200


def _csv(**cells):
    row = {
        "lab": "vision",
        "name": "Imported",
        "award_number": "IMP-1",
        "start_date": "2026-01-01",
        "end_date": "2026-12-31",
        "amount_usd": "100",
        "sponsor": "NSF",
        **cells,
    }
    body = ",".join(row) + "\n" + ",".join(f'"{v}"' for v in row.values()) + "\n"
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile("grants.csv", body.encode(), "text/csv")


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ({"amount_usd": "99999999999999"}, "amount_usd must be at most"),
        ({"amount_usd": "1e308"}, "amount_usd must be at most"),
        ({"name": "x" * 201}, "name is longer than 200"),
        ({"award_number": "x" * 101}, "award_number is longer than 100"),
        ({"sponsor": "N\x00SF"}, "sponsor contains a NUL"),
        ({"cost_center": "x" * 201}, "cost_center is longer than 200"),
    ],
)
def test_a_grant_import_cell_past_its_column_is_a_row_error(world, client_for, cells, message):
    data = {"institution": world.institution.pk, "file": _csv(**cells)}
    response = client_for(world.inst_admin).post(reverse("funding:import"), data)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not FundingSource.objects.filter(award_number__startswith="IMP").exists()


@pytest.mark.parametrize(
    ("url", "params"),
    [
        ("dashboard:institution", {"start": "9999-12"}),
        ("dashboard:institution", {"end": "9999-12"}),
        ("dashboard:institution", {"start": "0000-00"}),
        ("dashboard:me", {"start": "9999-12-31", "end": "9999-12-31"}),
        ("dashboard:me", {"start": "0001-01-01", "end": "0001-01-02"}),
    ],
)
def test_a_date_past_the_calendar_is_shown_as_an_error(world, client_for, url, params):
    user = world.member if url == "dashboard:me" else world.inst_admin
    response = client_for(user).get(reverse(url), params)
    assert response.status_code == 200
    assert response.context["data"].period.errors


@pytest.mark.parametrize(
    ("url", "params"),
    [
        ("provisioning:review", {"lab": "99999999999999999999999"}),
        ("provisioning:review", {"lab": "-1"}),
        ("provisioning:review", {"who": "a\x00b"}),
        ("funding:list", {"q": "a\x00b"}),
        ("audit", {"action": "\x00"}),
        ("runpod:resources", {"status": "x\x00"}),
    ],
)
def test_a_query_parameter_no_column_holds_is_a_400(world, client_for, url, params):
    response = client_for(world.inst_admin).get(reverse(url), params)
    assert response.status_code == 400


def test_the_review_queue_still_filters_by_lab(world, client_for):
    response = client_for(world.inst_admin).get(
        reverse("provisioning:review"), {"lab": world.lab.pk}
    )
    assert response.status_code == 200
    assert response.context["lab"] == str(world.lab.pk)


def test_a_next_that_is_not_a_path_returns_to_the_request(world, catalog, draft, client_for):
    from labgov.provisioning.services import request_submit

    req = request_submit(actor=world.member, req=draft())
    response = client_for(world.lab_admin).post(
        reverse("provisioning:deny", args=[req.pk]), {"reason": "no", "next": "2026-01-01"}
    )
    assert response.status_code == 302
    assert response.url == reverse("provisioning:detail", args=[req.pk])


def test_bounds_follow_the_model_columns():
    from labgov.provisioning.forms import PolicyForm, RequestForm

    form = RequestForm(allocations=ProvisioningRequest.objects.none(), gpus=[])
    assert form.fields["gpu_count"].max_value == 2**31 - 1
    assert form.fields["expected_hours"].max_value == D("99999999.99")  # max_digits 10, 2 places
    assert form.fields["bytes_per_param"].max_value == D("9999.99")
    assert form.fields["title"].max_length == 120
    policy = PolicyForm(gpus=[])
    assert policy.fields["max_usd_per_hour"].max_value == MAX_AMOUNT
    assert 'max="2147483647"' in str(form["gpu_count"])
