"""Two ways to page a list.

Small lists (labs, funding sources, requests, alerts, …) use page numbers with a capped size.
Records that grow without end (spend rollups, ledger entries) use a keyset cursor: the cursor
holds the ordering values of the last row returned, and the next page is the rows after it.
Rows inserted while a client pages never shift what it has yet to read, so none is skipped
or read twice, and a page costs the same at row 10 as at row 10 million.
"""

import base64
import binascii
import datetime as dt
import json

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Q
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination, PageNumberPagination
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param


class PagePagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 100

    def get_paginated_response(self, data):
        return Response(
            {
                "count": self.page.paginator.count,
                "next": self.get_next_link(),
                "previous": self.get_previous_link(),
                "results": data,
            }
        )


MAX_ID = 2**63 - 1


def _encode(value) -> str:
    return value.isoformat() if isinstance(value, dt.date) else str(value)


def _decode(model, name: str, text):
    """A cursor value back to its column's type; anything else is not a cursor of ours."""
    if not isinstance(text, str) or len(text) > 40:
        raise ValueError("bad cursor value")
    value = model._meta.get_field(name).to_python(text)
    if isinstance(value, int) and not 0 <= value <= MAX_ID:
        raise ValueError("bad cursor value")
    return value


class KeysetPagination(BasePagination):
    """Keyset pagination over `orderings[choice]`: tuples of non-null fields ending with a
    unique one (the primary key). The client picks one with `ordering`."""

    page_size = 100
    max_page_size = 100
    orderings: dict[str, tuple[str, ...]] = {}
    default_ordering = ""
    cursor_query_param = "cursor"
    page_size_query_param = "page_size"

    def _fields(self, request):
        choice = request.query_params.get("ordering") or self.default_ordering
        if choice not in self.orderings:
            raise ValidationError({"ordering": [f"Choose one of {', '.join(self.orderings)}."]})
        return choice, self.orderings[choice]

    def _size(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        try:
            size = int(raw)
        except ValueError:
            raise ValidationError({"page_size": ["A whole number, 1 to 100."]}) from None
        if not 1 <= size <= self.max_page_size:
            raise ValidationError({"page_size": ["A whole number, 1 to 100."]})
        return size

    def _after(self, fields, values) -> Q:
        """Rows strictly after `values` in the order of `fields` (row-value comparison)."""
        q = Q()
        for i, field in enumerate(fields):
            name = field.lstrip("-")
            op = "lt" if field.startswith("-") else "gt"
            step = Q(**{f"{name}__{op}": values[i]})
            for prior, value in zip(fields[:i], values[:i], strict=True):
                step &= Q(**{prior.lstrip("-"): value})
            q |= step
        # The first field bounds the scan, so an index on it is used as a range.
        first = fields[0].lstrip("-")
        bound = Q(**{f"{first}__{'lte' if fields[0].startswith('-') else 'gte'}": values[0]})
        return bound & q

    def _read_cursor(self, request, choice, fields, model):
        raw = request.query_params.get(self.cursor_query_param)
        if not raw:
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(raw.encode() + b"=" * (-len(raw) % 4)))
            if data.get("o") != choice or len(data.get("v", [])) != len(fields):
                raise ValueError("cursor for another ordering")
            return [
                _decode(model, f.lstrip("-"), v) for f, v in zip(fields, data["v"], strict=True)
            ]
        except (
            ValueError,
            TypeError,
            AttributeError,
            binascii.Error,
            UnicodeDecodeError,
            DjangoValidationError,
        ):
            raise ValidationError(
                {"cursor": ["Not a cursor of this list: use the `next` link as given."]}
            ) from None

    def paginate_queryset(self, queryset, request, view=None):
        choice, fields = self._fields(request)
        size = self._size(request)
        values = self._read_cursor(request, choice, fields, queryset.model)
        if values is not None:
            queryset = queryset.filter(self._after(fields, values))
        rows = list(queryset.order_by(*fields)[: size + 1])
        self.has_next = len(rows) > size
        rows = rows[:size]
        self.request = request
        self.next_values = None
        if self.has_next and rows:
            last = rows[-1]
            self.next_values = [_encode(getattr(last, f.lstrip("-"))) for f in fields]
        self.choice = choice
        return rows

    def get_next_link(self):
        if self.next_values is None:
            return None
        token = json.dumps({"o": self.choice, "v": self.next_values}, separators=(",", ":"))
        cursor = base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")
        url = self.request.build_absolute_uri()
        return replace_query_param(url, self.cursor_query_param, cursor)

    def get_paginated_response(self, data):
        return Response({"next": self.get_next_link(), "results": data})

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "required": ["next", "results"],
            "properties": {
                "next": {
                    "type": ["string", "null"],
                    "format": "uri",
                    "description": "The next page, or null at the end. Rows added while "
                    "you page never shift it.",
                },
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view):
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "Where to continue: take it from the previous page's `next`.",
                "schema": {"type": "string", "maxLength": 500},
            },
            {
                "name": self.page_size_query_param,
                "required": False,
                "in": "query",
                "description": "Rows per page, 1 to 100 (default 100).",
                "schema": {"type": "integer", "minimum": 1, "maximum": self.max_page_size},
            },
            {
                "name": "ordering",
                "required": False,
                "in": "query",
                "description": "Order of the rows (indexed columns only).",
                "schema": {"type": "string", "enum": list(self.orderings)},
            },
        ]


class SpendPagination(KeysetPagination):
    orderings = {"day": ("day", "id"), "-day": ("-day", "-id")}
    default_ordering = "day"


class MonthlySpendPagination(KeysetPagination):
    orderings = {"month": ("month", "id"), "-month": ("-month", "-id")}
    default_ordering = "month"


class LedgerPagination(KeysetPagination):
    orderings = {"-id": ("-id",), "id": ("id",)}
    default_ordering = "-id"


__all__ = ["KeysetPagination", "PagePagination", "remove_query_param"]
