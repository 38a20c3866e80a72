"""An endpoint's workers as Runpod takes them (EndpointWorkers: min ≥ 0, max ≥ min, labgov
asks max ≥ 1, idle timeout 1 to 3,600 s), refused in words wherever they are given: the request
form and its live estimate, the API, submission, approval, and the workers-change service and
page. Each test sends the bad value."""

import re
from decimal import Decimal as D

import pytest
from django.urls import reverse

from labgov.core.errors import DomainError
from labgov.idle import endpoints
from labgov.idle.models import EndpointWorkersChange
from labgov.provisioning.models import ProvisioningRequest
from labgov.provisioning.services import request_approve, request_save, request_submit
from labgov.runpod.models import GpuType
from tests.api.conftest import api, make_token  # noqa: F401 - fixtures
from tests.factories import ResourceFactory, RunpodAccountFactory
from tests.provisioning.conftest import H100

S = ProvisioningRequest.State
ENDPOINT = {
    "title": "Serve the 8B model",
    "deployment_model": "serverless",
    "gpu_type_id": H100,
    "gpu_count": "1",
    "cloud": "SECURE",
    "image": "runpod/worker-vllm:2.1",
    "requests_per_day": "2000",
    "seconds_per_request": "1.5",
    "duration_days": "2",
    "idle_workers": "1",
    "workers_max": "4",
    "idle_timeout_seconds": "30",
    "scaling_type": "QUEUE_DELAY",
    "scaling_value": "4",
    "container_disk_gb": "20",
}
FEWER = "The most workers (2) cannot be fewer than the always-on workers (3)"
NONE_AT_MOST = "An endpoint needs at least 1 worker at most (workers.max), not 0"
TIMEOUT = "The idle timeout is 1 to 3,600 seconds, not 4000"
BAD = (
    ({"idle_workers": "3", "workers_max": "2"}, "workers_max", FEWER),
    ({"idle_workers": "0", "workers_max": "0"}, "workers_max", NONE_AT_MOST),
    ({"idle_timeout_seconds": "4000"}, "idle_timeout_seconds", TIMEOUT),
)


def _form(world, **overrides):
    return {**ENDPOINT, "allocation": world.allocation.pk, **overrides}


def _values(**overrides):
    numbers = {"requests_per_day", "seconds_per_request", "duration_days"}
    values = {
        k: (D(v) if k in numbers else int(v) if v.isdigit() else v) for k, v in ENDPOINT.items()
    }
    return {**values, **overrides}


@pytest.mark.parametrize(("bad", "field", "words"), BAD)
def test_the_request_form_and_its_live_estimate_refuse_it_beside_the_field(
    world, catalog, client_for, bad, field, words
):
    client = client_for(world.member)
    live = client.get(reverse("provisioning:estimate"), _form(world, **bad), HTTP_HX_REQUEST="true")
    assert words in live.content.decode()
    sent = client.post(reverse("provisioning:new"), _form(world, **bad, submit="1"))
    assert sent.status_code == 200 and words in sent.content.decode()
    assert not ProvisioningRequest.objects.exists()


def test_good_workers_pass_the_form(world, catalog, client_for):
    sent = client_for(world.member).post(reverse("provisioning:new"), _form(world, submit="1"))
    assert sent.status_code == 302
    req = ProvisioningRequest.objects.get()
    assert (req.idle_workers, req.workers_max, req.idle_timeout_seconds) == (1, 4, 30)


def test_a_blank_maximum_counts_as_its_default_of_3(world, catalog, client_for):
    live = client_for(world.member).get(
        reverse("provisioning:estimate"),
        _form(world, idle_workers="5", workers_max=""),
        HTTP_HX_REQUEST="true",
    )
    assert "The most workers (3) cannot be fewer than the always-on workers (5)" in (
        live.content.decode()
    )


@pytest.mark.parametrize(("bad", "field", "words"), BAD)
def test_the_api_refuses_it_with_the_field(world, catalog, api, bad, field, words):  # noqa: F811
    answer = api(world.member).post(
        "/api/v1/provisioning-requests/",
        {**_form(world, **bad), "submit": True},
        content_type="application/json",
    )
    assert answer.status_code == 400, answer.content
    errors = answer.json()["errors"]
    assert [e["field"] for e in errors] == [field]
    assert words in str(errors)
    assert not ProvisioningRequest.objects.exists()


@pytest.mark.parametrize(
    ("bad", "words"),
    (
        ({"idle_workers": 3, "workers_max": 2}, FEWER),
        ({"idle_workers": 0, "workers_max": 0}, NONE_AT_MOST),
        ({"idle_timeout_seconds": 4000}, TIMEOUT),
        ({"idle_timeout_seconds": 0}, "The idle timeout is 1 to 3,600 seconds, not 0"),
    ),
)
def test_submission_through_the_service_refuses_it(world, catalog, bad, words):
    """A script calling the services directly, past the form."""
    req = request_save(actor=world.member, allocation=world.allocation, values=_values(**bad))
    with pytest.raises(DomainError, match=re.escape(words)):
        request_submit(actor=world.member, req=req)
    req.refresh_from_db()
    assert req.state == S.DRAFT


def test_approval_refuses_a_submitted_request_whose_workers_are_wrong(world, catalog):
    """A request submitted before the check (or changed in the database since) is judged
    again at approval."""
    req = request_save(actor=world.member, allocation=world.allocation, values=_values())
    req = request_submit(actor=world.member, req=req)
    assert req.state == S.SUBMITTED
    ProvisioningRequest.objects.filter(pk=req.pk).update(idle_workers=3, workers_max=2)
    with pytest.raises(DomainError, match=re.escape(FEWER)):
        request_approve(actor=world.lab_admin, req=req)
    req.refresh_from_db()
    assert req.state == S.SUBMITTED


@pytest.fixture
def endpoint(world):
    GpuType.objects.create(
        gpu_id="NVIDIA GeForce RTX 4090",
        name="RTX 4090",
        memory_gb=24,
        serverless_price_per_hr_usd=D("0.74"),
    )
    return ResourceFactory(
        account=RunpodAccountFactory(institution=world.institution),
        kind="serverless",
        runpod_id="ep-bounds",
        status="ACTIVE",
        gpu_type_id="NVIDIA GeForce RTX 4090",
        gpu_count=1,
        current_allocation=world.allocation,
        details={"workers_min": 1, "workers_max": 4, "idle_timeout_seconds": 5},
    )


def _never_called(account):
    raise AssertionError("a refused change reached Runpod")


@pytest.mark.parametrize(
    ("workers_min", "idle", "words"),
    (
        (5, None, "The minimum of workers (5) cannot be above the endpoint's maximum (4)"),
        (-1, None, "0 or more"),
        (0, 0, "1 to 3600 seconds, not 0"),
        (0, 3601, "1 to 3600 seconds, not 3601"),
    ),
)
def test_the_workers_change_service_refuses_it(world, endpoint, workers_min, idle, words):
    with pytest.raises(DomainError, match=re.escape(words)):
        endpoints.endpoint_workers_change(
            actor=world.lab_admin,
            resource=endpoint,
            workers_min=workers_min,
            idle_timeout_seconds=idle,
            client_factory=_never_called,
        )
    assert not EndpointWorkersChange.objects.filter(resource=endpoint).exists()


@pytest.mark.parametrize(
    ("posted", "words"),
    (
        (
            {"workers_min": "5"},
            "The minimum of workers (5) cannot be above the endpoint&#x27;s maximum (4)",
        ),
        ({"workers_min": "-1"}, "greater than or equal to 0"),
        ({"workers_min": "0", "idle_timeout_seconds": "0"}, "greater than or equal to 1"),
        ({"workers_min": "0", "idle_timeout_seconds": "3601"}, "less than or equal to 3600"),
    ),
)
def test_the_workers_page_refuses_it_beside_the_field(world, endpoint, client_for, posted, words):
    url = reverse("idle:endpoint_workers", args=[endpoint.pk])
    response = client_for(world.lab_admin).post(url, posted)
    assert response.status_code == 200
    assert words in response.content.decode()
    assert not EndpointWorkersChange.objects.filter(resource=endpoint).exists()
    endpoint.refresh_from_db()
    assert endpoint.details["workers_min"] == 1


def test_an_endpoint_scaling_on_request_count_takes_no_idle_timeout(world, endpoint):
    """Runpod has none for it: the change says so in words instead of sending one."""
    endpoint.details = {**endpoint.details, "scaling_type": "REQUEST_COUNT"}
    endpoint.save(update_fields=["details"])
    with pytest.raises(DomainError, match="scales on its request count"):
        endpoints.endpoint_workers_change(
            actor=world.lab_admin,
            resource=endpoint,
            workers_min=0,
            idle_timeout_seconds=30,
            client_factory=_never_called,
        )
    assert not EndpointWorkersChange.objects.filter(resource=endpoint).exists()
