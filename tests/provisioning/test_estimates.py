"""The estimator against the seeds' worked figures, and its edge cases."""

from decimal import Decimal as D

import pytest

from labgov.core.money import to_cents
from labgov.provisioning.estimates import (
    CheckpointPlan,
    Storage,
    checkpoint_figures,
    cluster_estimate,
    pod_estimate,
    serverless_estimate,
)

H100_SECURE = D("4.39")


def test_seed_checkpoint_8b_full_finetune():
    cp = checkpoint_figures(
        CheckpointPlan(params_billion=D(8), bytes_per_param=D(14), write_mb_per_s=D(200))
    )
    assert cp.size_gb == D(112)
    assert cp.save_seconds == D(560)
    assert cp.recommended_interval_minutes.quantize(D("0.01")) == D("93.33")
    assert round(cp.recommended_interval_minutes) == 93
    assert cp.interval_minutes == cp.recommended_interval_minutes  # no plan: the recommendation


@pytest.mark.parametrize(
    ("size_gb", "rate", "seconds"),
    [
        (D(112), D(400), D(280)),
        (D(112), D(10000), D("11.2")),  # the 10 GB/s peak
        (D("2.49"), D(200), D("12.45")),  # 70B LoRA adapter
        (D("0.50"), D(200), D("2.5")),  # 8B LoRA adapter
    ],
)
def test_seed_save_times(size_gb, rate, seconds):
    cp = checkpoint_figures(CheckpointPlan(size_gb=size_gb, write_mb_per_s=rate))
    assert cp.save_seconds == seconds


def test_seed_8xh100_ten_hours_with_and_without_a_stop():
    est = pod_estimate(
        gpu_price_per_hr_usd=H100_SECURE,
        gpu_count=8,
        hours=D(10),
        checkpoint_plan=CheckpointPlan(interval_minutes=D(60), restart_minutes=D(10)),
    )
    assert est.hourly_rate_usd == D("35.12")
    assert est.compute_usd == D("351.20")
    assert to_cents(est.total_usd) == D("351.20")
    assert to_cents(est.stop.hours_lost) == D("1.17")
    assert (D(10) + est.stop.hours_lost).quantize(D("0.001")) == D("11.167")
    assert to_cents(est.total_with_stop_usd) == D("392.17")
    assert to_cents(est.stop.cost_usd) == D("40.97")


@pytest.mark.parametrize(
    ("price", "no_stop", "with_stop"),
    [(D("2.69"), D("215.20"), D("240.31")), (D("2.60"), D("208.00"), D("232.27"))],
)
def test_seed_other_rows_of_the_table(price, no_stop, with_stop):
    est = pod_estimate(
        gpu_price_per_hr_usd=price,
        gpu_count=8,
        hours=D(10),
        checkpoint_plan=CheckpointPlan(interval_minutes=D(60)),
    )
    assert to_cents(est.total_usd) == no_stop
    assert to_cents(est.total_with_stop_usd) == with_stop


def test_pod_storage_running_and_after(settings):
    settings.LABGOV_HOURS_PER_MONTH = D(730)
    est = pod_estimate(
        gpu_price_per_hr_usd=D(1),
        gpu_count=1,
        hours=D(730),
        storage=Storage(container_disk_gb=50, volume_disk_gb=100, kept_days_after=D("30.4166")),
    )
    # Running: 150 GB x $0.10 for a whole month.
    assert est.storage_running_usd == D("15.00")
    # After: the stopped pod's volume disk at double rate; the container disk is gone.
    assert to_cents(est.storage_after_usd) == D("20.00")
    assert to_cents(est.total_usd) == D("765.00")


def test_network_volume_tier_and_kept_time(settings):
    settings.LABGOV_HOURS_PER_MONTH = D(730)
    est = pod_estimate(
        gpu_price_per_hr_usd=D(0),
        gpu_count=1,
        hours=D(73),
        storage=Storage(network_volume_gb=200, kept_days_after=D("0")),
    )
    assert est.storage_running_usd == D("1.4")  # 200 x 0.07 x 73/730
    big = pod_estimate(
        gpu_price_per_hr_usd=D(0),
        gpu_count=1,
        hours=D(730),
        storage=Storage(network_volume_gb=2024),
    )
    assert big.storage_running_usd == D(1000) * D("0.07") + D(1024) * D("0.05")


def test_the_standard_tier_ends_at_runpods_1_tb_of_1000_gb():
    """GB are 10^9 bytes (README), so Runpod's 1 TB tier is 1,000 GB: 1,500 GB cost
    1,000 x $0.07 + 500 x $0.05 = $95.00 a month, not $95.48."""
    from labgov.runpod.pricing import network_volume_monthly_usd

    assert network_volume_monthly_usd(size_gb=1500, volume_type="STANDARD") == D("95.00")


def test_hours_per_month_setting_is_used(settings):
    settings.LABGOV_HOURS_PER_MONTH = D(720)
    est = pod_estimate(
        gpu_price_per_hr_usd=D(0), gpu_count=1, hours=D(720), storage=Storage(volume_disk_gb=10)
    )
    assert est.storage_running_usd == D("1.0")


def test_no_checkpoints_means_a_stop_redoes_the_whole_run():
    est = pod_estimate(gpu_price_per_hr_usd=D(2), gpu_count=1, hours=D(5))
    assert est.checkpoint is None
    assert est.stop.hours_lost == D(5) + D(10) / D(60)


def test_interval_longer_than_the_run_loses_at_most_the_run():
    est = pod_estimate(
        gpu_price_per_hr_usd=D(1),
        gpu_count=1,
        hours=D(1),
        checkpoint_plan=CheckpointPlan(interval_minutes=D(600), restart_minutes=D(0)),
    )
    assert est.stop.hours_lost == D(1)


def test_zero_hours_and_zero_gpus_cost_nothing():
    est = pod_estimate(gpu_price_per_hr_usd=D("4.39"), gpu_count=0, hours=D(0))
    assert est.total_usd == 0
    assert est.stop.cost_usd == 0


def test_checkpoint_without_rate_has_size_but_no_save_time():
    cp = checkpoint_figures(CheckpointPlan(params_billion=D(70), bytes_per_param=D(2)))
    assert cp.size_gb == D(140)
    assert cp.save_seconds is None and cp.recommended_interval_minutes is None


def test_checkpoint_overhead_fraction():
    cp = checkpoint_figures(
        CheckpointPlan(size_gb=D(112), write_mb_per_s=D(200), interval_minutes=D(60))
    )
    assert cp.overhead_fraction.quantize(D("0.0001")) == D("0.1556")


def test_no_checkpoint_info_is_none():
    assert checkpoint_figures(None) is None
    assert checkpoint_figures(CheckpointPlan()) is None


def test_cluster_is_nodes_times_gpus_times_hours_plus_shared_storage(settings):
    settings.LABGOV_HOURS_PER_MONTH = D(730)
    est = cluster_estimate(
        gpu_price_per_hr_usd=H100_SECURE,
        nodes=2,
        gpus_per_node=8,
        hours=D(10),
        storage=Storage(network_volume_gb=1000, kept_days_after=D(0)),
        checkpoint_plan=CheckpointPlan(interval_minutes=D(60)),
    )
    assert est.hourly_rate_usd == D("70.24")
    assert est.compute_usd == D("702.40")
    assert est.storage_running_usd == D(1000) * D("0.07") * D(10) / D(730)
    assert to_cents(est.stop.cost_usd) == D("81.95")


def test_serverless_worker_seconds(settings):
    settings.LABGOV_HOURS_PER_MONTH = D(730)
    est = serverless_estimate(
        gpu_price_per_hr_usd=D("1.20"),
        gpus_per_worker=1,
        requests_per_day=D(1000),
        seconds_per_request=D("3.6"),
        days=D(30),
    )
    assert est.hours == D(30)  # 1000 x 3.6 s = 1 worker-hour a day
    assert est.compute_usd == D("36.00")
    assert est.stop is None and est.checkpoint is None


def test_serverless_idle_workers_bill_all_the_time():
    est = serverless_estimate(
        gpu_price_per_hr_usd=D("1.00"),
        gpus_per_worker=2,
        requests_per_day=D(0),
        seconds_per_request=D(0),
        days=D(2),
        idle_workers=1,
    )
    assert est.hours == D(48)
    assert est.compute_usd == D(96)
    assert "always-on" in est.notes[0]
