"""Inserting many plain rows of a model: COPY on PostgreSQL, bulk_create elsewhere.

bulk_create makes a model instance of each row and prepares each value through its field:
about 60 µs a row of a daily rollup (9 columns), most of a rollup rebuild's Python time. The
rows here are tuples of values already in their columns' types (ints, dates, text, Decimal),
which psycopg's COPY writes as they are: no instance, no SQL text holding the values. What
the table gives a column the rows leave out (its id) it gives as an INSERT would.

No signals are sent (bulk_create sends none either); the write is announced to the page
cache's data version (core/dataversion.py) as its execute wrapper, which does not see a
COPY, would count an INSERT of the same table.
"""

from collections.abc import Iterable

from django.db import connections

from labgov.core import dataversion


def insert_rows(model, fields: list[str], rows: Iterable[tuple], *, using: str = "default") -> int:
    """Insert `rows`, each a tuple of values of `fields` (model field names) in that order, in
    the caller's transaction. Returns how many."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        objects = [model(**dict(zip(fields, row, strict=True))) for row in rows]
        model.objects.using(using).bulk_create(objects, batch_size=1000)
        return len(objects)
    opts = model._meta
    quote = connection.ops.quote_name
    columns = ", ".join(quote(opts.get_field(name).column) for name in fields)
    # The table's and columns' names are the model's own; the values go through COPY.
    statement = f"COPY {quote(opts.db_table)} ({columns}) FROM STDIN"
    count = 0
    # Django's errors, as an INSERT's would be: psycopg's cursor raises its own.
    with (
        connection.wrap_database_errors,
        connection.cursor() as cursor,
        cursor.cursor.copy(statement) as copy,
    ):
        for row in rows:
            if len(row) != len(fields):
                raise ValueError(f"{len(row)} values for {len(fields)} fields")
            copy.write_row(row)
            count += 1
    if count:
        dataversion.wrote(using, statement)
    return count
