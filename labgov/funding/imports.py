"""CSV import of grants: all rows or none.

Columns (header row required, order free): lab, name, award_number, start_date, end_date,
amount_usd; optional: kind, sponsor, cost_center, indirect_cost_rate_percent.
The award number is the key: a row whose award number exists updates that grant.
"""

import csv
import datetime as dt
import io
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from django.db import transaction

from labgov.accounts import access
from labgov.accounts.models import Institution, Lab
from labgov.core.bounds import check_values
from labgov.core.errors import DomainError
from labgov.funding.models import FundingSource
from labgov.funding.services import (
    funding_source_create,
    funding_source_update,
    validate_funding_values,
)

REQUIRED_COLUMNS = ("lab", "name", "award_number", "start_date", "end_date", "amount_usd")
OPTIONAL_COLUMNS = ("kind", "sponsor", "cost_center", "indirect_cost_rate_percent")
MAX_BYTES = 5 * 1024 * 1024
MAX_ROWS = 10_000


@dataclass
class RowError:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


@dataclass
class ImportResult:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    errors: list[RowError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class _Row:
    line: int
    lab: Lab
    values: dict


def _parse_date(text: str, column: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise DomainError(f"{column} {text!r} is not a date (use YYYY-MM-DD)") from None


def _parse_decimal(text: str, column: str) -> Decimal:
    cleaned = text.replace(",", "").replace("$", "").strip()
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        raise DomainError(f"{column} {text!r} is not a number") from None
    if not value.is_finite():
        raise DomainError(f"{column} {text!r} is not a number")
    return value


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DomainError("The file is not UTF-8 text; save it as CSV UTF-8.") from None


def _parse_row(raw: dict, line: int, labs: dict[str, Lab]) -> _Row:
    cells = {k: (v or "").strip() for k, v in raw.items() if k is not None}
    if None in raw:
        raise DomainError("has more cells than the header has columns")
    for column in REQUIRED_COLUMNS:
        if not cells.get(column):
            raise DomainError(f"{column} is empty")
    lab = labs.get(cells["lab"].lower())
    if lab is None:
        raise DomainError(f"no lab {cells['lab']!r} in this institution")
    kind = cells.get("kind") or FundingSource.Kind.GRANT
    rate_text = cells.get("indirect_cost_rate_percent", "")
    values = {
        "name": cells["name"],
        "award_number": cells["award_number"],
        "kind": kind,
        "sponsor": cells.get("sponsor", ""),
        "cost_center": cells.get("cost_center", ""),
        "start_date": _parse_date(cells["start_date"], "start_date"),
        "end_date": _parse_date(cells["end_date"], "end_date"),
        "amount_usd": _parse_decimal(cells["amount_usd"], "amount_usd"),
        "indirect_cost_rate_percent": (
            _parse_decimal(rate_text, "indirect_cost_rate_percent") if rate_text else None
        ),
    }
    check_values(FundingSource, values)
    validate_funding_values(
        name=values["name"],
        start_date=values["start_date"],
        end_date=values["end_date"],
        amount_usd=values["amount_usd"],
        indirect_cost_rate_percent=values["indirect_cost_rate_percent"],
        kind=kind,
        status=FundingSource.Status.ACTIVE,
    )
    return _Row(line=line, lab=lab, values=values)


def grants_import_csv(*, actor, institution: Institution, data: bytes) -> ImportResult:
    """Validate every row, then import all of them in one transaction, or none.

    Finance and institution admins only: an import creates and changes amounts, so a lab
    admin importing would mint their own budget (they propose instead)."""
    result = ImportResult()
    if actor is not None and not access.can_import_grants(actor, institution.pk):
        result.errors.append(RowError(0, "Only finance or an institution admin imports grants."))
        return result
    if len(data) > MAX_BYTES:
        result.errors.append(RowError(0, "The file is larger than 5 MB."))
        return result
    try:
        text = _decode(data)
    except DomainError as exc:
        result.errors.append(RowError(0, exc.message))
        return result
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = [h.strip() for h in (reader.fieldnames or [])]
    reader.fieldnames = header
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        result.errors.append(RowError(1, f"the header lacks column(s): {', '.join(missing)}"))
        return result
    unknown = [c for c in header if c not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    if unknown:
        result.errors.append(RowError(1, f"unknown column(s): {', '.join(unknown)}"))
        return result

    labs = {}
    for lab in Lab.objects.filter(institution=institution):
        labs[lab.slug.lower()] = lab
        labs[lab.name.lower()] = lab
    rows: list[_Row] = []
    seen_awards: dict[str, int] = {}
    try:
        for raw in reader:
            line = reader.line_num
            if not any((v or "").strip() for v in raw.values() if isinstance(v, str)):
                continue  # blank line
            if len(rows) + len(result.errors) >= MAX_ROWS:
                result.errors.append(RowError(line, f"more than {MAX_ROWS} rows"))
                break
            try:
                row = _parse_row(raw, line, labs)
            except DomainError as exc:
                result.errors.append(RowError(line, exc.message))
                continue
            award = row.values["award_number"]
            if award in seen_awards:
                result.errors.append(
                    RowError(line, f"award number {award} is also on line {seen_awards[award]}")
                )
                continue
            seen_awards[award] = line
            rows.append(row)
    except csv.Error as exc:
        result.errors.append(RowError(reader.line_num, f"not valid CSV ({exc})"))
    if not rows and not result.errors:
        result.errors.append(RowError(0, "The file has no rows to import."))
    if result.errors:
        return result

    existing = {
        fs.award_number: fs
        for fs in FundingSource.objects.filter(
            institution=institution, award_number__in=list(seen_awards)
        )
    }
    try:
        with transaction.atomic():
            for row in rows:
                _apply_row(actor, row, existing.get(row.values["award_number"]), result)
            if result.errors:
                raise _Rollback
    except _Rollback:
        result.created = result.updated = result.unchanged = 0
    return result


class _Rollback(Exception):
    pass


def _apply_row(actor, row: _Row, current: FundingSource | None, result: ImportResult) -> None:
    try:
        with transaction.atomic():
            if current is None:
                funding_source_create(actor=actor, lab=row.lab, **row.values)
                result.created += 1
                return
            changes = {
                name: value for name, value in row.values.items() if getattr(current, name) != value
            }
            if current.lab_id != row.lab.pk:
                changes["lab"] = row.lab
            if not changes:
                result.unchanged += 1
                return
            funding_source_update(actor=actor, funding_source=current, **changes)
            result.updated += 1
    except DomainError as exc:
        result.errors.append(RowError(row.line, exc.message))
