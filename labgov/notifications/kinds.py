"""The kinds of notification, with the labels people see (mute settings, digest headings).

Each app registers its own kinds once, from its AppConfig.ready():

    from labgov.notifications.kinds import Severity, register
    register("provisioning.fail", "A request could not be created", Severity.CRITICAL)

The alerts app registers one kind per rule the same way, as `alert.<rule>`. A kind that was
never registered still works (its key is its label, its severity "info"); registering it is
what lets people mute it by name.
"""

from dataclasses import dataclass

from django.db import models


class Severity(models.TextChoices):
    INFO = "info", "Info"
    WARNING = "warning", "Warning"
    CRITICAL = "critical", "Critical"


SEVERITY_RANK = {Severity.INFO.value: 0, Severity.WARNING.value: 1, Severity.CRITICAL.value: 2}


def severity_at_least(severity: str, minimum: str) -> bool:
    return SEVERITY_RANK[severity] >= SEVERITY_RANK[minimum]


@dataclass(frozen=True)
class Kind:
    key: str
    label: str
    default_severity: str


_registry: dict[str, Kind] = {}


def register(kind: str, label: str, default_severity: str = Severity.INFO) -> Kind:
    """Register (or re-register, e.g. when tests reload an app) a kind of notification."""
    if default_severity not in SEVERITY_RANK:
        raise ValueError(f"Unknown severity {default_severity!r} for notification kind {kind!r}")
    if not kind or len(kind) > 60:
        raise ValueError(f"A notification kind is 1 to 60 characters, not {kind!r}")
    entry = Kind(key=kind, label=label, default_severity=str(default_severity))
    _registry[kind] = entry
    return entry


def all_kinds() -> list[Kind]:
    return sorted(_registry.values(), key=lambda k: k.key)


def get_kind(kind: str) -> Kind:
    """The registered kind, or a stand-in for one nobody registered."""
    return _registry.get(kind) or Kind(key=kind, label=kind, default_severity=Severity.INFO)


def label_for(kind: str) -> str:
    return get_kind(kind).label
