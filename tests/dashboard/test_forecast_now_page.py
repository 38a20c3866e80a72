"""The funding page's forecast names both rates: a grant with two 8×H100 pods running since
this morning no longer reads "No spend in the last 7 days"."""

from decimal import Decimal

from django.urls import reverse

from labgov.dashboard.forecast import Outlook
from tests.factories import (
    AllocationFactory,
    FundingSourceFactory,
    ResourceFactory,
    RunpodAccountFactory,
)


def test_running_pods_on_a_grant_without_recent_spend(world, client_for):
    fs = FundingSourceFactory(lab=world.lab, amount_usd=Decimal("20000"))
    allocation = AllocationFactory(funding_source=fs, user=world.member, cap_usd=Decimal("20000"))
    account = RunpodAccountFactory(institution=world.institution)
    for name in ("llm-pretrain-a", "llm-pretrain-b"):
        ResourceFactory(
            account=account,
            name=name,
            status="RUNNING",
            gpu_count=8,
            cost_per_hr_usd=Decimal("21.52"),
            container_disk_gb=0,
            current_allocation=allocation,
        )
    url = reverse("dashboard:funding", args=[fs.pk])
    response = client_for(world.lab_admin).get(url)
    f = response.context["data"].forecast
    assert f.outlook == Outlook.RUNS_OUT_EARLY and f.by_now_rate
    assert f.now_rate_usd == Decimal("1032.96")
    page = response.content.decode()
    assert "No spend in the last 7 days" not in page
    assert "at what runs and is stored now ($1,032.96/day)" in page
    # The burn rate shown stays the last 7 days' spend; the rate of what runs is named apart.
    assert "<span>Burn rate</span><strong>$0.00/day</strong>" in page
    [row] = response.context["data"].tables["allocations"].rows
    assert row.cells[7] == f.run_out_date  # the allocation's own forecast agrees
