"""JSON from the Runpod REST API v2, turned into the typed values of `types.py`.

Tolerant where the contract lets an answer vary: unknown fields are ignored, optional fields
may be absent or null, and a field the contract requires but allows to be null may also be
absent. Strict where labgov depends on it: a required field that is missing, null where
labgov's value cannot be None, or any field read with the wrong type raises RunpodBadResponse
naming the field and the object.

Amounts come from `decode_json`, which parses JSON numbers with a fraction into Decimal from
their text; whole numbers arrive as int and become Decimal(int). Nothing passes through float.
"""

import datetime as dt
import json
from decimal import Decimal
from typing import Any

from labgov.runpod.errors import RunpodBadResponse
from labgov.runpod.redaction import redacted_env
from labgov.runpod.types import (
    AccountBalance,
    AccountBillingRecord,
    BillingKind,
    BillingRecord,
    Cluster,
    Endpoint,
    GpuType,
    GpuUtilization,
    NetworkVolume,
    Pod,
    PodRuntime,
    WorkerSummary,
)

_ABSENT = object()


class MalformedBody(ValueError):
    """The bytes are not a complete JSON document (cut short, empty, an HTML page)."""


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def decode_json(content: bytes) -> Any:
    if not content.strip():
        raise MalformedBody("the answer was empty")
    try:
        return json.loads(content, parse_float=Decimal, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise MalformedBody("the answer was not complete JSON") from exc


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | Decimal):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _bad(owner: str, problem: str) -> RunpodBadResponse:
    return RunpodBadResponse(f"Runpod's answer does not match its API: {owner} {problem}.")


def parse_time(value: str) -> dt.datetime:
    """An RFC 3339 time (`Z` or an offset) as a UTC-aware datetime; ValueError otherwise."""
    moment = dt.datetime.fromisoformat(value.strip().upper())
    if moment.tzinfo is None:
        raise ValueError("no UTC offset")
    return moment.astimezone(dt.UTC)


class _Fields:
    """One JSON object being read. `owner` names it in errors ("pod 'abc'"), `path` is its
    place inside that object ("mounts.persistent.")."""

    def __init__(self, data: Any, owner: str, path: str = ""):
        if not isinstance(data, dict):
            where = f"has '{path.rstrip('.')}' as" if path else "is"
            raise _bad(owner, f"{where} {_kind_of(data)}, expected an object")
        self._data = data
        self.owner = owner
        self._path = path

    def _value(self, key: str, *, required: bool) -> Any:
        value = self._data.get(key, _ABSENT)
        if value is _ABSENT and required:
            raise _bad(self.owner, f"has no '{self._path}{key}'")
        return None if value is _ABSENT else value

    def _wrong(self, key: str, value: Any, expected: str) -> RunpodBadResponse:
        return _bad(
            self.owner, f"has '{self._path}{key}' as {_kind_of(value)}, expected {expected}"
        )

    def _read(self, key, required, nullable, check, expected):
        value = self._value(key, required=required)
        if value is None:
            if required and not nullable and key in self._data:
                raise self._wrong(key, value, expected)
            return None
        if not check(value):
            raise self._wrong(key, value, expected)
        return value

    def text(self, key: str) -> str:
        return self._read(key, True, False, _is_str, "text")

    def optional_text(self, key: str, *, required: bool = False) -> str | None:
        return self._read(key, required, True, _is_str, "text")

    def integer(self, key: str) -> int:
        return self._read(key, True, False, _is_int, "a whole number")

    def optional_integer(self, key: str) -> int | None:
        return self._read(key, False, True, _is_int, "a whole number")

    def boolean(self, key: str) -> bool:
        return self._read(key, True, False, _is_bool, "true or false")

    def amount(self, key: str) -> Decimal:
        return Decimal(self._read(key, True, False, _is_number, "a number"))

    def optional_amount(self, key: str) -> Decimal | None:
        value = self._read(key, False, True, _is_number, "a number")
        return None if value is None else Decimal(value)

    def time(self, key: str) -> dt.datetime:
        moment = self.optional_time(key, required=True)
        if moment is None:
            raise self._wrong(key, None, "an RFC 3339 time")
        return moment

    def optional_time(self, key: str, *, required: bool = False) -> dt.datetime | None:
        value = self._read(key, required, True, _is_str, "an RFC 3339 time")
        if value is None:
            return None
        try:
            return parse_time(value)
        except ValueError:
            raise _bad(
                self.owner, f"has '{self._path}{key}' = {value[:40]!r}, not an RFC 3339 time"
            ) from None

    def text_list(self, key: str, *, required: bool = True) -> list[str]:
        values = self._read(key, required, False, _is_list, "a list") or []
        for value in values:
            if not _is_str(value):
                raise _bad(
                    self.owner,
                    f"has an item in '{self._path}{key}' as {_kind_of(value)}, expected text",
                )
        return list(values)

    def text_map(self, key: str, *, required: bool = True) -> dict[str, str]:
        values = self._read(key, required, False, _is_dict, "an object") or {}
        for value in values.values():
            if not _is_str(value):
                raise _bad(
                    self.owner,
                    f"has a value in '{self._path}{key}' as {_kind_of(value)}, expected text",
                )
        return dict(values)

    def obj(self, key: str) -> "_Fields":
        return _Fields(self._value(key, required=True), self.owner, f"{self._path}{key}.")

    def optional_obj(self, key: str) -> "_Fields | None":
        value = self._value(key, required=False)
        if value is None:
            return None
        return _Fields(value, self.owner, f"{self._path}{key}.")

    def objects(self, key: str, *, required: bool = True) -> list[Any]:
        return list(self._read(key, required, False, _is_list, "a list") or [])

    def amounts_except_total(self) -> dict[str, Decimal]:
        """Every `*Amount` field but `totalAmount`, however many the record's kind carries."""
        components = {}
        for key in self._data:
            if key.endswith("Amount") and key != "totalAmount":
                value = self.optional_amount(key)
                if value is not None:
                    components[key] = value
        return components


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return _is_int(value) or (isinstance(value, Decimal) and value.is_finite())


def _is_list(value: Any) -> bool:
    return isinstance(value, list)


def _is_dict(value: Any) -> bool:
    return isinstance(value, dict)


def _identified(data: Any, noun: str, where: str) -> _Fields:
    """Read an object's id first, so every later error names the object."""
    fields = _Fields(data, f"{noun} {where}".strip())
    fields.owner = f"{noun} {fields.text('id')!r}"
    return fields


def _list_items(data: Any, key: str, what: str) -> list[Any]:
    return _Fields(data, f"the {what}").objects(key)


def parse_pod(data: Any, where: str = "") -> Pod:
    f = _identified(data, "pod", where)
    mounts = f.obj("mounts")
    persistent = mounts.optional_obj("persistent")
    network = mounts.objects("network", required=False)
    network_volume_id = None
    if network:
        network_volume_id = _Fields(network[0], f.owner, "mounts.network[0].").text("volumeId")
    gpu = f.optional_obj("gpu")
    gpu_count = 0
    if gpu is not None:
        count = gpu.optional_integer("count")
        gpu_count = 1 if count is None else count
    cluster = f.optional_obj("cluster")
    return Pod(
        id=f.text("id"),
        name=f.text("name"),
        status=f.text("status"),
        cost_per_hr_usd=f.amount("cost"),
        image=f.text("image"),
        env=redacted_env(f.text_map("env")),
        container_disk_gb=f.integer("disk"),
        volume_disk_gb=persistent.integer("size") if persistent is not None else 0,
        network_volume_id=network_volume_id,
        gpu_type_id=gpu.text("id") if gpu is not None else None,
        gpu_count=gpu_count,
        cloud=f.optional_text("cloud", required=True),
        data_center_id=f.optional_text("dataCenterId"),
        template_id=f.optional_text("template"),
        cluster_id=cluster.text("id") if cluster is not None else None,
        created_at=f.optional_time("createdAt", required=True),
        started_at=f.optional_time("startedAt"),
        runtime=_runtime(f),
    )


def _percent(f: "_Fields", key: str) -> int | None:
    """A utilization percentage: a whole number, clamped to 0-100 (a reading, not money: a
    GPU reported at 101 % is busy, not an error worth failing the sync for)."""
    value = f.optional_integer(key)
    return None if value is None else max(0, min(100, value))


def _runtime(pod: "_Fields") -> PodRuntime | None:
    """`runtime` (PodRuntime, or null when the pod is not running; absent is read as null)."""
    runtime = pod.optional_obj("runtime")
    if runtime is None:
        return None
    gpus = []
    for i, item in enumerate(runtime.objects("gpus", required=False)):
        gpu = _Fields(item, pod.owner, f"runtime.gpus[{i}].")
        gpus.append(
            GpuUtilization(util=_percent(gpu, "util"), memory_util=_percent(gpu, "memoryUtil"))
        )
    cpu = runtime.optional_obj("cpu")
    memory = runtime.optional_obj("memory")
    return PodRuntime(
        uptime_s=runtime.optional_integer("uptime"),
        gpus=tuple(gpus),
        cpu_util=_percent(cpu, "util") if cpu is not None else None,
        memory_util=_percent(memory, "util") if memory is not None else None,
    )


def parse_pods(data: Any) -> list[Pod]:
    items = _list_items(data, "pods", "list of pods")
    return [parse_pod(item, f"pods[{i}]") for i, item in enumerate(items)]


def parse_network_volumes(data: Any) -> list[NetworkVolume]:
    items = _list_items(data, "networkVolumes", "list of network volumes")
    volumes = []
    for i, item in enumerate(items):
        f = _identified(item, "network volume", f"networkVolumes[{i}]")
        volumes.append(
            NetworkVolume(
                id=f.text("id"),
                name=f.text("name"),
                size_gb=f.integer("size"),
                data_center_id=f.text("dataCenter"),
                volume_type=f.text("type"),
            )
        )
    return volumes


def parse_endpoints(data: Any) -> list[Endpoint]:
    items = _list_items(data, "endpoints", "list of serverless endpoints")
    return [parse_endpoint(item, f"endpoints[{i}]") for i, item in enumerate(items)]


def parse_endpoint(item: Any, where: str = "") -> Endpoint:
    """One `Endpoint`: an item of the list, or the answer to a create or an update."""
    f = _identified(item, "serverless endpoint", where)
    gpu = f.optional_obj("gpu")
    gpu_count = 0
    if gpu is not None:
        count = gpu.optional_integer("count")
        gpu_count = 1 if count is None else count
    workers = f.obj("workers")
    scaling = f.obj("scaling")
    scaling_type = scaling.optional_text("type")
    scaling_value = None
    if scaling_type == "QUEUE_DELAY":
        scaling_value = scaling.amount("queueDelay")
    elif scaling_type == "REQUEST_COUNT":
        scaling_value = Decimal(scaling.integer("requestCount"))
    return Endpoint(
        id=f.text("id"),
        name=f.text("name"),
        # Not in the read schema today (only `templateId` on create); kept if sent.
        template_id=f.optional_text("template") or f.optional_text("templateId"),
        gpu_type_ids=[],
        gpu_count=gpu_count,
        workers_min=workers.integer("min"),
        workers_max=workers.integer("max"),
        network_volume_ids=f.text_list("networkVolumes"),
        data_center_ids=f.text_list("dataCenterIds"),
        env=redacted_env(f.text_map("env", required=False)),
        created_at=f.optional_time("createdAt", required=True),
        gpu_pool_ids=gpu.text_list("pools") if gpu is not None else [],
        excluded_gpu_type_ids=(
            gpu.text_list("excludedTypes", required=False) if gpu is not None else []
        ),
        image=f.optional_text("image"),
        idle_timeout_seconds=workers.optional_integer("idleTimeout"),
        scaling_type=scaling_type,
        scaling_value=scaling_value,
    )


WORKER_COUNTS = ("running", "idle", "initializing", "throttled", "unhealthy", "total")


def parse_worker_summary(data: Any) -> WorkerSummary:
    """The `summary` of a ListEndpointWorkersResponse; counts below 0 are refused."""
    f = _Fields(data, "list of endpoint workers")
    summary = f.obj("summary")
    counts = {}
    for key in WORKER_COUNTS:
        value = summary.integer(key)
        if value < 0:
            raise _bad(summary.owner, f"{key} is {value}, below 0")
        counts[key] = value
    return WorkerSummary(**counts)


def parse_clusters(data: Any) -> list[Cluster]:
    items = _list_items(data, "clusters", "list of clusters")
    return [parse_cluster(item, f"clusters[{i}]") for i, item in enumerate(items)]


def parse_cluster(item: Any, where: str = "") -> Cluster:
    """One `Cluster`: an item of the list, or the answer to a create or an update."""
    f = _identified(item, "cluster", where)
    compute = f.obj("compute")
    return Cluster(
        id=f.text("id"),
        name=f.text("name"),
        cluster_type=f.text("type"),
        gpu_type_id=compute.text("gpuTypeId"),
        gpu_count_per_pod=compute.integer("gpuCountPerPod"),
        pod_count=compute.integer("podCount"),
        data_center_id=f.optional_text("dataCenterId"),
        template_id=f.optional_text("template"),
        created_at=f.optional_time("createdAt", required=True),
    )


def parse_gpu_types(data: Any) -> list[GpuType]:
    items = _list_items(data, "gpus", "GPU catalog")
    gpu_types = []
    for i, item in enumerate(items):
        f = _identified(item, "GPU type", f"gpus[{i}]")
        price = f.obj("price")
        max_count = f.obj("maxCount")
        gpu_types.append(
            GpuType(
                id=f.text("id"),
                name=f.text("name"),
                memory_gb=f.integer("memory"),
                secure_price_per_hr_usd=price.amount("secure"),
                community_price_per_hr_usd=price.amount("community"),
                serverless_price_per_hr_usd=price.optional_amount("serverless"),
                secure_available=f.boolean("secure"),
                community_available=f.boolean("community"),
                max_count_secure=max_count.integer("secure"),
                max_count_community=max_count.integer("community"),
                pool=f.optional_text("pool"),
            )
        )
    return gpu_types


def _billing_items(data: Any, what: str) -> list[Any]:
    response = _Fields(data, f"the {what}")
    items = response.objects("records")
    # A count that disagrees with the records means a cut or mangled answer; money must not
    # be summed from it. The metadata itself is not needed, so its absence is tolerated.
    metadata = response.optional_obj("metadata")
    if metadata is not None:
        count = metadata.optional_integer("recordCount")
        if count is not None and count != len(items):
            raise _bad(response.owner, f"says it has {count} records but carries {len(items)}")
    return items


def _bucket(f: _Fields) -> tuple[dt.datetime, dt.datetime]:
    start, end = f.time("startTime"), f.time("endTime")
    if end <= start:
        raise _bad(f.owner, "ends before it starts")
    return start, end


def parse_billing_records(
    data: Any, kind: BillingKind, id_field: str | None, expected_id: str | None
) -> list[BillingRecord]:
    """`id_field` names the record's resource id (None for ENDPOINT records). With
    `expected_id` every record must carry that id: a server that ignored the filter would
    otherwise have one resource billed for all of them."""
    items = _billing_items(data, f"{kind.value} billing records")
    records = []
    # Up to a million records arrive in a sync, with few distinct bucket times: parse each
    # time once. A record that is not plainly well-formed goes through the careful reader,
    # which names what is wrong with it.
    times: dict[str, dt.datetime] = {}
    for i, item in enumerate(items):
        record = _quick_billing_record(item, kind, id_field, expected_id, times)
        if record is None:
            record = _careful_billing_record(item, i, kind, id_field, expected_id)
        records.append(record)
    return records


_NUMBER_TYPES = (Decimal, int)


def _quick_billing_record(item, kind, id_field, expected_id, times) -> BillingRecord | None:
    if type(item) is not dict:
        return None
    resource_id = ""
    if id_field is not None:
        resource_id = item.get(id_field)
        if type(resource_id) is not str or (expected_id is not None and resource_id != expected_id):
            return None
    start_text, end_text, total = (
        item.get("startTime"),
        item.get("endTime"),
        item.get("totalAmount"),
    )
    if type(start_text) is not str or type(end_text) is not str:
        return None
    if type(total) not in _NUMBER_TYPES:
        return None
    try:
        start = times.get(start_text) or times.setdefault(start_text, parse_time(start_text))
        end = times.get(end_text) or times.setdefault(end_text, parse_time(end_text))
    except ValueError:
        return None
    if end <= start:
        return None
    components = {}
    for key, value in item.items():
        if key.endswith("Amount") and key != "totalAmount" and value is not None:
            if type(value) not in _NUMBER_TYPES:
                return None
            components[key] = Decimal(value)
    return BillingRecord(
        kind=kind,
        resource_id=resource_id,
        start=start,
        end=end,
        total_usd=Decimal(total),
        components=components,
    )


def _careful_billing_record(item, i, kind, id_field, expected_id) -> BillingRecord:
    f = _Fields(item, f"{kind.value} billing record records[{i}]")
    resource_id = ""
    if id_field is not None:
        resource_id = f.text(id_field)
        f.owner = f"{kind.value} billing record for {resource_id!r}"
        if expected_id is not None and resource_id != expected_id:
            raise _bad(f.owner, f"was returned when only {expected_id!r} was asked for")
    start, end = _bucket(f)
    return BillingRecord(
        kind=kind,
        resource_id=resource_id,
        start=start,
        end=end,
        total_usd=f.amount("totalAmount"),
        components=f.amounts_except_total(),
    )


def parse_account_billing(data: Any) -> list[AccountBillingRecord]:
    records = []
    for i, item in enumerate(_billing_items(data, "account billing records")):
        f = _Fields(item, f"account billing record records[{i}]")
        start, end = _bucket(f)
        records.append(
            AccountBillingRecord(
                start=start,
                end=end,
                total_usd=f.amount("totalAmount"),
                components=f.amounts_except_total(),
            )
        )
    return records


def parse_balance(data: Any) -> AccountBalance:
    """GraphQL `{"data": {"myself": {clientBalance, currentSpendPerHr, spendLimit}}}`."""
    if isinstance(data, dict) and data.get("errors"):
        messages = "; ".join(
            str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in data["errors"]
        )
        raise RunpodBadResponse(f"Runpod's GraphQL API refused the balance query: {messages}")
    myself = data.get("data", {}).get("myself") if isinstance(data, dict) else None
    if not isinstance(myself, dict):
        raise _bad("the balance answer", "has no data.myself object")

    def amount(name: str, required: bool = False) -> Decimal | None:
        value = myself.get(name)
        if value is None and not required:
            return None
        if not _is_number(value):
            raise _bad("the balance answer", f"has {name} {_kind_of(value)}, not a number")
        return Decimal(value)

    return AccountBalance(
        balance_usd=amount("clientBalance", required=True),
        spend_per_hr_usd=amount("currentSpendPerHr"),
        spend_limit_usd=amount("spendLimit"),
    )
