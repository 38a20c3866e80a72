"""A request whose kept storage outlives its grant (kept 90 days on a grant ending in 25) is
told so, with the dollars past the grant's end and who pays then: on the live estimate and on
the page the lab admin approves from."""

import datetime as dt
from decimal import Decimal as D

from django.urls import reverse
from django.utils import timezone

from labgov.funding.models import Allocation
from labgov.provisioning.assessment import default_policy, estimate_request, findings
from labgov.provisioning.models import ProvisioningRequest
from tests.factories import AllocationFactory, FundingSourceFactory
from tests.provisioning.conftest import POD_VALUES
from tests.provisioning.test_views import _form

KEPT = {
    "network_volume_gb": 200,
    "data_center_id": "US-KS-2",
    "storage_kept_days": D(90),
}


def _ending(world, days):
    source = FundingSourceFactory(
        lab=world.lab, name="Ending grant", end_date=timezone.now().date() + dt.timedelta(days)
    )
    return AllocationFactory(funding_source=source, user=world.member)


def _codes(world, catalog, allocation, **overrides):
    req = ProvisioningRequest(
        requester=world.member,
        allocation=allocation,
        lab=world.lab,
        **{**POD_VALUES, **KEPT, **overrides},
    )
    gpu = catalog.get(req.gpu_type_id)
    estimate = estimate_request(req, gpu)
    allocation = Allocation.objects.select_related("funding_source__lab").get(pk=allocation.pk)
    found = findings(
        req,
        policy=default_policy(world.institution.pk),
        gpu=gpu,
        estimate=estimate,
        allocation=allocation,
        today=timezone.now().date(),
    )
    return {f.code: f for f in found}


def test_kept_storage_past_the_grants_end_is_named_with_its_dollars_and_payer(world, catalog):
    found = _codes(world, catalog, _ending(world, 25))["storage_outlives_funding"]
    # 200 GB at $0.07/GB/month kept 90 days = $41.42; 10 h of work then 90 days kept run
    # 65.4 days past an end 25 days away: $30.11 of it.
    assert not found.blocking
    assert "kept 90 days after the work" in found.message
    assert "about 66 of those days, $30.11, fall after it ends" in found.message
    assert f"{world.lab.name} pays from other funding" in found.message


def test_storage_that_ends_before_the_grant_is_not_flagged(world, catalog):
    assert "storage_outlives_funding" not in _codes(world, catalog, _ending(world, 120))
    assert "storage_outlives_funding" not in _codes(
        world, catalog, _ending(world, 25), storage_kept_days=D(0)
    )


def test_the_estimate_and_the_approval_page_say_so(world, catalog, client_for, submitted):
    allocation = _ending(world, 25)
    fields = {k: str(v) for k, v in KEPT.items()}
    page = client_for(world.member).get(
        reverse("provisioning:estimate"),
        {**_form(world, **fields), "allocation": allocation.pk},
        HTTP_HX_REQUEST="true",
    )
    assert 'data-code="storage_outlives_funding"' in page.content.decode()
    req = submitted(allocation=allocation, **KEPT)
    detail = client_for(world.lab_admin).get(reverse("provisioning:detail", args=[req.pk]))
    html = detail.content.decode()
    assert 'data-code="storage_outlives_funding"' in html and "$30.11" in html
