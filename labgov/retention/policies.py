"""Effective retention policies: a lab's own replaces its institution's default whole; with
neither, the built-in defaults, turned off."""

from labgov.retention.models import RetentionPolicy


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
