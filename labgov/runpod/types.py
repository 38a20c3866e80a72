"""What labgov reads from the Runpod REST API v2, as typed values.

The client (`client.py`) turns JSON into these; the sync (`sync.py`) reads only these. Amounts
are Decimal, parsed from the JSON text (never through float); times are UTC-aware.
"""

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum


class PodStatus(StrEnum):
    PROVISIONING = "PROVISIONING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    EXITED = "EXITED"  # stopped
    ERROR = "ERROR"
    TERMINATED = "TERMINATED"


class BillingKind(StrEnum):
    """One per billing endpoint. ENDPOINT records (/v2/billing/endpoints) carry no resource id."""

    POD = "pod"
    NETWORK_VOLUME = "network_volume"
    SERVERLESS = "serverless"
    CLUSTER = "cluster"
    ENDPOINT = "endpoint"


@dataclass(frozen=True, slots=True)
class GpuUtilization:
    """One GPU of a running pod, in percent (0-100); None where Runpod left a field out."""

    util: int | None
    memory_util: int | None


@dataclass(frozen=True, slots=True)
class PodRuntime:
    """Live utilization of a running pod (`Pod.runtime`; null when it is not RUNNING).

    Every field is optional in the contract: Runpod may send `{}`, or fewer GPUs than the pod
    has (those it left out are unknown, not idle)."""

    uptime_s: int | None
    gpus: tuple[GpuUtilization, ...]
    cpu_util: int | None
    memory_util: int | None


@dataclass(frozen=True, slots=True)
class Pod:
    id: str
    name: str
    status: str  # a PodStatus value; unknown future values are kept as sent
    cost_per_hr_usd: Decimal  # 0 when EXITED or TERMINATED
    image: str
    env: dict[str, str]
    container_disk_gb: int
    volume_disk_gb: int  # mounts.persistent.size, 0 when absent
    network_volume_id: str | None  # mounts.network[0].volumeId
    gpu_type_id: str | None
    gpu_count: int  # 0 for CPU pods
    cloud: str | None  # SECURE / COMMUNITY
    data_center_id: str | None
    template_id: str | None
    cluster_id: str | None
    created_at: dt.datetime | None
    started_at: dt.datetime | None
    runtime: PodRuntime | None = None


@dataclass(frozen=True, slots=True)
class NetworkVolume:
    id: str
    name: str
    size_gb: int
    data_center_id: str
    volume_type: str  # STANDARD / HIGH_PERFORMANCE


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: str
    name: str
    template_id: str | None
    # The v2 contract selects an endpoint's GPUs by serverless pool minus excluded types and
    # carries no list of types, so the client leaves gpu_type_ids empty. Resolve pools to
    # types through GpuType.pool.
    gpu_type_ids: list[str]
    gpu_count: int  # per worker; 0 for CPU endpoints
    workers_min: int
    workers_max: int
    network_volume_ids: list[str]
    data_center_ids: list[str]
    env: dict[str, str]
    created_at: dt.datetime | None
    gpu_pool_ids: list[str] = field(default_factory=list)
    excluded_gpu_type_ids: list[str] = field(default_factory=list)
    image: str | None = None
    idle_timeout_seconds: int | None = None
    scaling_type: str | None = None  # QUEUE_DELAY or REQUEST_COUNT
    scaling_value: Decimal | None = None  # its queueDelay or requestCount


@dataclass(frozen=True, slots=True)
class WorkerSummary:
    """An endpoint's workers now, by status (GET /v2/serverless/{id}/workers `summary`):
    `running` ones process a job, `idle` ones are ready and wait for one (and bill)."""

    running: int
    idle: int
    initializing: int
    throttled: int
    unhealthy: int
    total: int


@dataclass(frozen=True, slots=True)
class Cluster:
    id: str
    name: str
    cluster_type: str
    gpu_type_id: str
    gpu_count_per_pod: int
    pod_count: int
    data_center_id: str | None
    template_id: str | None
    created_at: dt.datetime | None


@dataclass(frozen=True, slots=True)
class GpuType:
    id: str
    name: str
    memory_gb: int
    secure_price_per_hr_usd: Decimal
    community_price_per_hr_usd: Decimal
    serverless_price_per_hr_usd: Decimal | None
    secure_available: bool
    community_available: bool
    max_count_secure: int
    max_count_community: int
    pool: str | None = None  # serverless pool id (Endpoint.gpu_pool_ids), None if in none


@dataclass(frozen=True, slots=True)
class BillingRecord:
    """One half-open [start, end) bucket of one resource's spend.

    `components` holds the record's breakdown by its API names (gpuAmount, diskAmount,
    standardAmount, ...). `resource_id` is "" for ENDPOINT records.
    """

    kind: BillingKind
    resource_id: str
    start: dt.datetime
    end: dt.datetime
    total_usd: Decimal
    components: dict[str, Decimal] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AccountBillingRecord:
    """One bucket of the whole account's spend (GET /v2/billing), split by product."""

    start: dt.datetime
    end: dt.datetime
    total_usd: Decimal
    components: dict[str, Decimal] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AccountBalance:
    """The account's credit, from GraphQL `myself` (deprecated, the only place Runpod shows
    it). Fields Runpod leaves out are None."""

    balance_usd: Decimal
    spend_per_hr_usd: Decimal | None
    spend_limit_usd: Decimal | None
