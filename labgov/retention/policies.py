"""Effective retention policies: a lab's own replaces its institution's default whole; with
neither, the built-in defaults, turned off."""

from labgov.core.errors import DomainError
from labgov.retention.models import RetentionPolicy


def parse_warning_days(text: str) -> tuple[int, ...]:
    """ "30, 7,1" → (30, 7, 1): whole days between 0 and 365, largest first, no repeats."""
    values = set()
    for part in (text or "").replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit():
            raise DomainError(f"{part!r} is not a whole number of days", field="warning_days")
        value = int(part)
        if value > 365:
            raise DomainError(f"{value} days is more than a year ahead", field="warning_days")
        values.add(value)
    if not values:
        raise DomainError("give at least one warning step", field="warning_days")
    return tuple(sorted(values, reverse=True))


class Resolver:
    """The policies of one institution and its labs, read in one query."""

    def __init__(self, institution_id: int):
        rows = list(RetentionPolicy.objects.filter(institution_id=institution_id))
        self.institution_id = institution_id
        self.default_row = next((r for r in rows if r.lab_id is None), None)
        self.lab_rows = {r.lab_id: r for r in rows if r.lab_id is not None}

    def for_lab(self, lab_id: int | None) -> RetentionPolicy:
        row = self.lab_rows.get(lab_id) if lab_id is not None else None
        return row or self.default_row or RetentionPolicy(institution_id=self.institution_id)

    def own(self, lab_id: int | None) -> RetentionPolicy | None:
        return self.lab_rows.get(lab_id) if lab_id is not None else self.default_row
