"""The forecast alert goes by the earlier run-out of the last 7 days' rate and the rate of what
runs and is stored now: two 8×H100 pods started on a grant with no spend yet still alert."""

import datetime as dt
from decimal import Decimal as D

import pytest

from labgov.alerts.models import Kind
from tests.alerts.conftest import T0, evaluate, make_pod, unresolved
from tests.factories import AllocationFactory, FundingSourceFactory

pytestmark = pytest.mark.django_db


def test_two_new_8x_h100_pods_raise_the_forecast_alert(world, account, clock):
    fs = FundingSourceFactory(
        lab=world.lab, amount_usd=D("20000"), end_date=T0.date() + dt.timedelta(days=90)
    )
    allocation = AllocationFactory(funding_source=fs, user=world.member, cap_usd=D("20000"))
    for name in ("llm-pretrain-a", "llm-pretrain-b"):
        make_pod(
            account,
            allocation,
            name=name,
            gpu_count=8,
            cost_per_hr_usd=D("21.52"),  # 8 × $2.69
            container_disk_gb=0,
        )
    evaluate(world)
    alerts = {a.subject_key: a for a in unresolved(Kind.FORECAST_OVERRUN)}
    alert = alerts[f"funding_source:{fs.pk}"]
    # $20,000 at $1,032.96/day lasts 19 whole days.
    assert alert.facts["run_out_date"] == (T0.date() + dt.timedelta(days=19)).isoformat()
    assert alert.facts["by_now_rate"] is True
    assert alert.facts["now_rate_usd_per_day"] == "1032.96"
    assert alert.title.startswith(f"{fs.name} runs out on")
    assert "at what runs and is stored on it now ($" in alert.title
    assert "no spend" in alert.detail  # at the last 7 days' rate
    assert f"allocation:{allocation.pk}" in alerts  # the allocation runs out as early
