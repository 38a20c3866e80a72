"""Effective alert settings: a lab's own value, else its institution's, else the default."""

from dataclasses import dataclass
from decimal import Decimal

from labgov.alerts.models import AlertSettings, Kind
from labgov.core.errors import DomainError

# The built-in defaults, as the issue and DOMAIN.md give them.
DEFAULTS = {
    "disabled_kinds": [],
    "idle_volume_days": 7,
    "budget_thresholds": "50,80,100",
    "funding_ending_days": 30,
    "balance_days": 7,
    "unattributed_threshold_usd": Decimal("100"),
    "sync_failing_hours": 6,
    "idle_gpu_util_percent": 5,
    "idle_memory_util_percent": 5,
    "idle_grace_hours": 2,
}
FIELDS = tuple(DEFAULTS)


@dataclass(frozen=True)
class Effective:
    disabled_kinds: frozenset[str]
    idle_volume_days: int
    budget_thresholds: tuple[int, ...]
    funding_ending_days: int
    balance_days: int
    unattributed_threshold_usd: Decimal
    sync_failing_hours: int
    idle_gpu_util_percent: int
    idle_memory_util_percent: int
    idle_grace_hours: int

    def enabled(self, kind: str) -> bool:
        return kind not in self.disabled_kinds


def parse_thresholds(text: str) -> tuple[int, ...]:
    """ "50, 80,100" → (50, 80, 100). Percentages between 1 and 1000, no repeats."""
    values = []
    for part in text.replace(";", ",").split(","):
        part = part.strip().rstrip("%").strip()
        if not part:
            continue
        if not part.isdigit():
            raise DomainError(f"{part!r} is not a whole percentage", field="budget_thresholds")
        value = int(part)
        if not 1 <= value <= 1000:
            raise DomainError(f"{value}% is outside 1–1000%", field="budget_thresholds")
        values.append(value)
    if not values:
        raise DomainError("give at least one percentage", field="budget_thresholds")
    return tuple(sorted(set(values)))


def _is_set(name: str, value) -> bool:
    return value not in (None, "")


class Resolver:
    """Settings of one institution and its labs, read in one query."""

    def __init__(self, institution_id: int):
        self.institution_id = institution_id
        rows = list(AlertSettings.objects.filter(institution_id=institution_id))
        self.default_row = next((r for r in rows if r.lab_id is None), None)
        self.lab_rows = {r.lab_id: r for r in rows if r.lab_id is not None}
        self._cache: dict[int | None, Effective] = {}

    def for_lab(self, lab_id: int | None) -> Effective:
        if lab_id not in self._cache:
            self._cache[lab_id] = self._resolve(lab_id)
        return self._cache[lab_id]

    def _resolve(self, lab_id: int | None) -> Effective:
        chain = [self.lab_rows.get(lab_id), self.default_row]
        values = {}
        for name in FIELDS:
            value = DEFAULTS[name]
            for row in chain:
                if row is not None and _is_set(name, getattr(row, name)):
                    value = getattr(row, name)
                    break
            values[name] = value
        return Effective(
            disabled_kinds=frozenset(k for k in values["disabled_kinds"] if k in Kind.values),
            idle_volume_days=values["idle_volume_days"],
            budget_thresholds=parse_thresholds(values["budget_thresholds"]),
            funding_ending_days=values["funding_ending_days"],
            balance_days=values["balance_days"],
            unattributed_threshold_usd=Decimal(values["unattributed_threshold_usd"]),
            sync_failing_hours=values["sync_failing_hours"],
            idle_gpu_util_percent=values["idle_gpu_util_percent"],
            idle_memory_util_percent=values["idle_memory_util_percent"],
            idle_grace_hours=values["idle_grace_hours"],
        )
