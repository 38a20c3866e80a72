"""Billing arithmetic of the simulator, checked against the prices by hand.

The default scenario's clock stands at 2026-11-20T14:30:00Z; the pods and volumes named here
are described in labgov/simulator/scenarios/default.json.
"""

import datetime as dt
import re
from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labgov.simulator import SimulatorServer, billing, load_scenario
from labgov.simulator.scenario import HOUR
from tests.simulator.conftest import NOW, UTC, Api

Q10 = Decimal("1e-10")
STOPPED_POD = "a4n8d2r6t0w5y1"  # vision-annotate: RTX 4090 community, 100 GB volume disk, EXITED
RUNNING_POD = "vq7m2k4x9p1b3c"  # vision-train-h100: 2 x H100 SXM secure, 50 GB + 200 GB volume
CPU_POD = "c9p3u7d1a5t8a4"  # nlp-data-prep: 4 vCPU
TERMINATED_POD = "o7l6d5b4a3s2e1"  # vision-old-baseline, terminated 2026-11-10T16:00
NEW_POD = "p1r0v4s6n8g2q5"  # vision-sweep-03, PROVISIONING since 14:18 today


def q(value: Decimal) -> Decimal:
    return value.quantize(Q10, rounding=ROUND_HALF_EVEN)


def t(text: str) -> str:
    return f"2026-{text}:00Z"


def hour_record(api: Api, path: str, id_field: str, resource_id: str, start: str) -> dict:
    end = (dt.datetime.fromisoformat(start) + dt.timedelta(hours=1)).isoformat()
    body = api.json(
        path, bucketSize="hour", startTime=start, endTime=end, **{id_field: resource_id}
    )
    [record] = body["records"]
    return record


def test_stopped_pod_bills_its_volume_disk_at_the_stopped_rate(api):
    record = hour_record(api, "/v2/billing/pods", "podId", STOPPED_POD, t("11-12T05:00"))
    assert record["diskAmount"] == q(Decimal(100) * Decimal("0.20") / Decimal(730))
    assert record["diskAmount"] == Decimal("0.0273972603")
    assert record["gpuAmount"] == record["cpuAmount"] == 0
    assert record["totalAmount"] == record["diskAmount"]
    assert api.json(f"/v2/pods/{STOPPED_POD}")["cost"] == 0


def test_running_pod_bills_its_cost_per_hour_and_disks_at_the_running_rate(api):
    pod = api.json(f"/v2/pods/{RUNNING_POD}")
    assert pod["cost"] == Decimal("5.38")  # 2 x 2.69, the catalog's secure price
    record = hour_record(api, "/v2/billing/pods", "podId", RUNNING_POD, t("11-18T05:00"))
    assert record["gpuAmount"] == Decimal("5.38")
    assert record["diskAmount"] == q((50 + 200) * Decimal("0.10") / 730)
    assert record["totalAmount"] == record["gpuAmount"] + record["diskAmount"]


def test_cpu_pod_bills_cpu_amount(api):
    record = hour_record(api, "/v2/billing/pods", "podId", CPU_POD, t("11-19T05:00"))
    assert record["cpuAmount"] == Decimal("0.12")  # 4 vCPU x 0.03
    assert record["gpuAmount"] == 0


def test_hour_with_a_stop_splits_compute_and_disk_by_the_second(api):
    # vision-train-h100 stopped at 2026-11-09T22:15:00: 900 s running, 2700 s stopped.
    record = hour_record(api, "/v2/billing/pods", "podId", RUNNING_POD, t("11-09T22:00"))
    assert record["gpuAmount"] == q(Decimal("5.38") * 900 / 3600)
    running_disk = (50 + 200) * Decimal("0.10") * 900
    stopped_disk = 200 * Decimal("0.20") * 2700
    assert record["diskAmount"] == q((running_disk + stopped_disk) / (730 * 3600))


def test_network_volumes_share_the_account_1tb_standard_tier_oldest_first(api):
    def rate(volume_id: str, at: str) -> Decimal:
        record = hour_record(api, "/v2/billing/network-volumes", "networkVolumeId", volume_id, at)
        return record

    # After tmp-conversion went (2026-11-15): 300 + 500 GB in the 1,000 GB tier, then 200 of
    # 750.
    at = t("11-18T05:00")
    assert rate("th5d8r2y7e", at)["standardAmount"] == q(300 * Decimal("0.07") / 730)
    assert rate("nv4lpd7x2k", at)["standardAmount"] == q(500 * Decimal("0.07") / 730)
    checkpoints = 200 * Decimal("0.07") + 550 * Decimal("0.05")
    assert rate("vc8h2m5q1z", at)["standardAmount"] == q(checkpoints / 730)
    # While tmp-conversion existed it was youngest: all 150 GB beyond the tier.
    assert rate("tm9p2x5d3v", t("11-01T05:00"))["standardAmount"] == q(150 * Decimal("0.05") / 730)
    # High-performance volumes bill the premium rate, and whether or not anything uses them.
    unused_hp = rate("sc7r4a1t9c", at)
    assert unused_hp["highPerformanceAmount"] == q(100 * Decimal("0.14") / 730)
    assert unused_hp["standardAmount"] == 0


def test_a_deleted_volume_bills_until_its_deletion_and_not_after(api):
    body = api.json(
        "/v2/billing/network-volumes", networkVolumeId="tm9p2x5d3v", bucketSize="hour", lastN="200"
    )
    assert body["records"][-1]["startTime"] == t("11-15T11:00")
    assert "tm9p2x5d3v" not in {v["id"] for v in api.json("/v2/network-volumes")["networkVolumes"]}


def test_serverless_bills_worker_seconds_of_the_hourly_pattern(api):
    # nlp-llm-inference at 10:00 UTC: 80 requests x 3.2 s on one L40S (serverless $1.90/h).
    record = hour_record(
        api, "/v2/billing/serverless", "serverlessId", "x1nlpinfer0a1b", t("11-18T10:00")
    )
    worker_seconds = 80 * Decimal("3.2")
    assert record["gpuAmount"] == q(worker_seconds * Decimal("1.90") / 3600)
    assert record["feeAmount"] == q(80 * Decimal("0.00002"))
    assert record["diskAmount"] == q(worker_seconds * 40 * Decimal("0.10") / (3600 * 730))
    assert record["cpuAmount"] == 0
    # An always-on worker bills every hour, even one without requests.
    quiet = hour_record(
        api, "/v2/billing/serverless", "serverlessId", "x2visionseg0c3", t("11-18T02:00")
    )
    assert quiet["gpuAmount"] == q(3600 * Decimal("1.10") / 3600)


def test_cluster_bills_nodes_times_gpus_times_rate_plus_disk_and_networking(api):
    record = hour_record(
        api, "/v2/billing/clusters", "clusterId", "cl7v1s2d3p4q5r", t("11-20T05:00")
    )
    assert record["gpuAmount"] == Decimal("70.24")  # 2 nodes x 8 GPUs x 4.39
    assert record["networkingAmount"] == Decimal("0.5")
    assert record["diskAmount"] == q(2 * 100 * Decimal("0.10") / 730)


def test_public_endpoints_are_one_aggregate_without_an_id(api):
    body = api.json(
        "/v2/billing/endpoints",
        bucketSize="hour",
        startTime=t("11-18T10:00"),
        endTime=t("11-18T11:00"),
    )
    assert body["records"] == [
        {"startTime": t("11-18T10:00"), "endTime": t("11-18T11:00"), "totalAmount": Decimal("0.22")}
    ]


def _bucket_sums(api: Api, params: dict) -> dict[str, dict[str, Decimal]]:
    """Per bucket start: each account field summed from the per-resource routes."""
    fields = {
        "/v2/billing/pods": {
            "gpuAmount": "podGpuAmount",
            "cpuAmount": "podCpuAmount",
            "diskAmount": "podDiskAmount",
        },
        "/v2/billing/serverless": {
            "gpuAmount": "serverlessGpuAmount",
            "cpuAmount": "serverlessCpuAmount",
            "diskAmount": "serverlessDiskAmount",
            "feeAmount": "serverlessFeeAmount",
        },
        "/v2/billing/network-volumes": {
            "standardAmount": "storageStandardAmount",
            "highPerformanceAmount": "storageHighPerformanceAmount",
        },
        "/v2/billing/endpoints": {"totalAmount": "endpointAmount"},
        "/v2/billing/clusters": {
            "gpuAmount": "clusterGpuAmount",
            "diskAmount": "clusterDiskAmount",
            "networkingAmount": "clusterNetworkingAmount",
        },
    }
    sums: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for path, mapping in fields.items():
        for record in api.json(path, **params)["records"]:
            for name, account_name in mapping.items():
                sums[record["startTime"]][account_name] += record[name]
                sums[record["startTime"]]["totalAmount"] += record[name]
    return sums


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"bucketSize": "hour", "startTime": t("11-05T00:00"), "endTime": t("11-07T00:00")},
        {"bucketSize": "hour", "lastN": "30"},
        {"bucketSize": "week", "lastN": "8"},
        {"bucketSize": "month", "lastN": "3"},
    ],
)
def test_account_billing_is_the_sum_of_the_resources_to_the_last_digit(api, params):
    sums = _bucket_sums(api, params)
    account = api.json("/v2/billing", **params)
    assert account["records"], "expected account records"
    for record in account["records"]:
        expected = sums.get(record["startTime"], {})
        for name, value in record.items():
            if name.endswith("Amount"):
                assert value == expected.get(name, Decimal(0)), (record["startTime"], name)
        components = sum(
            v for k, v in record.items() if k.endswith("Amount") and k != "totalAmount"
        )
        assert record["totalAmount"] == components
    totals = account["metadata"]["totals"]
    assert totals["totalAmount"] == sum(r["totalAmount"] for r in account["records"])
    assert account["metadata"]["recordCount"] == len(account["records"])


@pytest.mark.parametrize(
    "path,id_field",
    [
        ("/v2/billing/pods", "podId"),
        ("/v2/billing/network-volumes", "networkVolumeId"),
        ("/v2/billing/serverless", "serverlessId"),
        ("/v2/billing/clusters", "clusterId"),
    ],
)
def test_day_buckets_are_sums_of_hour_buckets(api, path, id_field):
    window = {"startTime": t("11-05T00:00"), "endTime": t("11-08T00:00")}
    hours = api.json(path, bucketSize="hour", **window)["records"]
    days = api.json(path, bucketSize="day", **window)["records"]
    summed: dict[tuple, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for record in hours:
        key = (record[id_field], record["startTime"][:10])
        for name, value in record.items():
            if name.endswith("Amount"):
                summed[key][name] += value
    assert len(days) == len(summed)
    for record in days:
        expected = summed[(record[id_field], record["startTime"][:10])]
        assert {k: v for k, v in record.items() if k.endswith("Amount")} == dict(expected)
        start = dt.datetime.fromisoformat(record["startTime"])
        assert dt.datetime.fromisoformat(record["endTime"]) - start == dt.timedelta(days=1)


def test_windows_are_half_open_and_adjacent_windows_do_not_overlap(api):
    def starts(start, end):
        body = api.json(
            "/v2/billing/pods", podId=RUNNING_POD, bucketSize="hour", startTime=start, endTime=end
        )
        return [r["startTime"] for r in body["records"]]

    first, second = (
        starts(t("11-18T10:00"), t("11-18T12:00")),
        starts(t("11-18T12:00"), t("11-18T14:00")),
    )
    assert first == [t("11-18T10:00"), t("11-18T11:00")]
    assert second == [t("11-18T12:00"), t("11-18T13:00")]
    assert starts(t("11-18T10:00"), t("11-18T14:00")) == first + second


def test_window_edges_snap_to_bucket_boundaries(api):
    body = api.json(
        "/v2/billing/pods",
        bucketSize="hour",
        startTime="2026-11-18T10:30:00Z",
        endTime="2026-11-18T11:20:00+00:00",
    )
    assert body["metadata"]["query"] == {
        "startTime": t("11-18T10:00"),
        "endTime": t("11-18T12:00"),
        "bucketSize": "hour",
        "podId": None,
    }
    assert {r["startTime"] for r in body["records"]} == {t("11-18T10:00"), t("11-18T11:00")}


def test_default_window_is_thirty_days_of_day_buckets_up_to_now(api):
    body = api.json("/v2/billing")
    assert body["metadata"]["query"] == {
        "startTime": t("10-21T00:00"),
        "endTime": t("11-21T00:00"),
        "bucketSize": "day",
    }
    assert len(body["records"]) == 31
    assert body["records"][-1]["startTime"] == t("11-20T00:00")


def test_current_bucket_is_partial_and_grows_as_the_clock_moves(sim, api):
    def current():
        body = api.json("/v2/billing/pods", podId=RUNNING_POD, bucketSize="hour", lastN="2")
        return body["records"]

    before = current()
    assert [r["startTime"] for r in before] == [t("11-20T13:00"), t("11-20T14:00")]
    assert before[-1]["gpuAmount"] == Decimal("2.69")  # 30 of 60 minutes
    sim.advance(minutes=15)
    assert current()[-1]["gpuAmount"] == q(Decimal("5.38") * 45 * 60 / 3600)
    sim.advance(minutes=20)  # 15:05: the 14:00 bucket is complete and a new one has begun
    after = current()
    assert [r["startTime"] for r in after] == [t("11-20T14:00"), t("11-20T15:00")]
    assert after[0]["gpuAmount"] == Decimal("5.38")


def test_no_buckets_after_now_and_no_records_before_a_resource_existed(api):
    body = api.json(
        "/v2/billing/pods", bucketSize="hour", startTime=t("11-19T00:00"), endTime=t("11-25T00:00")
    )
    assert max(r["startTime"] for r in body["records"]) == t("11-20T14:00")
    newest = [r for r in body["records"] if r["podId"] == NEW_POD]
    assert [r["startTime"] for r in newest] == [t("11-20T14:00")]
    assert newest[0]["totalAmount"] == 0  # PROVISIONING: exists, bills nothing yet
    gone = api.json(
        "/v2/billing/pods", podId=TERMINATED_POD, bucketSize="hour", startTime=t("11-10T00:00")
    )
    assert gone["records"][-1]["startTime"] == t("11-10T15:00")


def test_a_window_from_long_ago_costs_only_what_existed(api):
    body = api.json(
        "/v2/billing/pods", podId=STOPPED_POD, bucketSize="hour", startTime="1970-01-01T00:00:00Z"
    )
    assert body["records"][0]["startTime"] == t("10-23T13:00")  # the pod's first hour
    assert body["metadata"]["query"]["startTime"] == "1970-01-01T00:00:00Z"


def test_lastn_counts_buckets_back_from_the_current_one(api):
    body = api.json("/v2/billing", bucketSize="day", lastN="3")
    assert [r["startTime"] for r in body["records"]] == [
        t("11-18T00:00"),
        t("11-19T00:00"),
        t("11-20T00:00"),
    ]
    assert body["metadata"]["query"]["endTime"] == t("11-21T00:00")


def test_week_month_and_year_buckets_align_to_the_calendar(api):
    weeks = api.json("/v2/billing", bucketSize="week", lastN="2")["records"]
    assert [r["startTime"] for r in weeks] == [t("11-09T00:00"), t("11-16T00:00")]  # Mondays
    months = api.json("/v2/billing", bucketSize="month", lastN="2")["records"]
    assert [(r["startTime"], r["endTime"]) for r in months] == [
        (t("10-01T00:00"), t("11-01T00:00")),
        (t("11-01T00:00"), t("12-01T00:00")),
    ]
    years = api.json("/v2/billing", bucketSize="year", lastN="1")["records"]
    days = api.json("/v2/billing", bucketSize="day", startTime=t("01-01T00:00"))["records"]
    assert years[0]["totalAmount"] == sum(r["totalAmount"] for r in days)


def test_metadata_counts_records_and_distinct_resources(api):
    body = api.json("/v2/billing/pods", bucketSize="day", lastN="2")
    metadata = body["metadata"]
    assert metadata["recordCount"] == len(body["records"])
    assert metadata["uniquePodCount"] == len({r["podId"] for r in body["records"]})
    assert metadata["totals"]["diskAmount"] == sum(r["diskAmount"] for r in body["records"])


def test_amounts_are_written_as_exact_decimal_text(api):
    text = api.get("/v2/billing/pods", bucketSize="hour", lastN="24").text
    numbers = re.findall(r'Amount":([^,}]+)', text)
    assert numbers
    assert all(re.fullmatch(r"\d+(\.\d{1,10})?", n) for n in numbers), numbers[:5]


def test_the_empty_account_answers_with_no_records():
    with SimulatorServer(scenario=load_scenario("empty")) as sim:
        api = Api(sim)
        body = api.json("/v2/billing")
        assert body["records"] == []
        assert body["metadata"]["recordCount"] == 0
        assert body["metadata"]["totals"]["totalAmount"] == 0
        api.close()


def test_clock_can_be_set_explicitly_and_a_bucket_starting_now_is_not_yet_there(sim, api):
    sim.set_now(dt.datetime(2026, 11, 20, 18, 0, tzinfo=UTC))
    assert sim.state.now == dt.datetime(2026, 11, 20, 18, 0, tzinfo=UTC) > NOW
    body = api.json("/v2/billing/pods", podId=RUNNING_POD, bucketSize="hour", lastN="2")
    assert [r["startTime"] for r in body["records"]] == [t("11-20T17:00")]
    assert body["metadata"]["query"]["endTime"] == t("11-20T19:00")


@given(
    rates=st.lists(
        st.decimals(min_value=0, max_value=1000, places=6, allow_nan=False), min_size=1, max_size=4
    ),
    seconds=st.lists(st.integers(min_value=1, max_value=3600), min_size=4, max_size=4),
    month=st.sampled_from([HOUR, 730 * HOUR, HOUR * HOUR, HOUR * 730 * HOUR]),
)
def test_exact_integer_amounts_equal_decimal_quantization(rates, seconds, month):
    """Hours cut by an edge use integer arithmetic; it must give the Decimal result exactly."""
    numerator = sum((r * s for r, s in zip(rates, seconds, strict=False)), Decimal(0))
    places = max(-r.as_tuple().exponent for r in rates)
    exact = sum(int(r.scaleb(places)) * s for r, s in zip(rates, seconds, strict=False))
    expected = q(numerator / Decimal(month)) if numerator else Decimal(0)
    assert billing._units(numerator, month) == int(expected.scaleb(10))
    assert billing._units_exact(exact, month * 10**places) == int(expected.scaleb(10))
