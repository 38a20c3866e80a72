"""What a value may be so that its column holds it: one source of limits for forms, imports
and services, derived from the model fields, so a number too large or a string too long is a
form error or a DomainError, never a database error (a 500).

- Integers: the range of the column on PostgreSQL (the narrowest database labgov runs on;
  SQLite stores any 64-bit integer, so a bound that holds there would break the other).
- Decimals: what max_digits/decimal_places hold, and never more than MAX_AMOUNT, so that sums
  of many typed amounts still fit the derived money columns (20 digits, 10 of them decimals:
  less than 10^10) and the annotations over them.
- Strings: max_length; and no NUL character anywhere (PostgreSQL text cannot hold one).
"""

from decimal import Decimal, InvalidOperation

from django import forms
from django.core import validators
from django.core.exceptions import FieldDoesNotExist
from django.db import models
from django.db.backends.base.operations import BaseDatabaseOperations

from labgov.core.errors import DomainError

# A billion (less a cent): the most any typed amount, rate or count with decimals may be.
MAX_AMOUNT = Decimal("999999999.99")
INTEGER_RANGES = BaseDatabaseOperations.integer_field_ranges  # PostgreSQL's


def integer_range(model_field: models.Field) -> tuple[int, int]:
    return INTEGER_RANGES.get(model_field.get_internal_type(), INTEGER_RANGES["IntegerField"])


def decimal_max(model_field: models.DecimalField) -> Decimal:
    whole = model_field.max_digits - model_field.decimal_places
    column = Decimal(10) ** whole - Decimal(10) ** -model_field.decimal_places
    return min(column, MAX_AMOUNT)


def bound_form_field(form_field: forms.Field, model_field: models.Field) -> None:
    """Narrow a form field to what `model_field` holds (never widen what it already has)."""
    attrs = form_field.widget.attrs
    if isinstance(form_field, forms.IntegerField):  # DecimalField is one too
        if isinstance(model_field, models.DecimalField):
            high = decimal_max(model_field)
            if isinstance(form_field, forms.DecimalField):
                form_field.validators.append(
                    validators.DecimalValidator(model_field.max_digits, model_field.decimal_places)
                )
                if form_field.decimal_places is None:
                    form_field.decimal_places = model_field.decimal_places
            else:
                high = int(high)
            low = -high
        elif isinstance(model_field, models.IntegerField):
            low, high = integer_range(model_field)
            if isinstance(form_field, forms.DecimalField):
                low, high = max(low, -MAX_AMOUNT), min(high, MAX_AMOUNT)
        else:
            return
        if form_field.max_value is None or form_field.max_value > high:
            form_field.max_value = high
            form_field.validators.append(validators.MaxValueValidator(high))
            attrs["max"] = str(high)
        if form_field.min_value is None or form_field.min_value < low:
            form_field.min_value = low
            form_field.validators.append(validators.MinValueValidator(low))
            attrs["min"] = str(low)
    elif isinstance(form_field, forms.CharField) and getattr(model_field, "max_length", None):
        length = model_field.max_length
        if form_field.max_length is None or form_field.max_length > length:
            form_field.max_length = length
            form_field.validators.append(validators.MaxLengthValidator(length))
            attrs["maxlength"] = str(length)


class BoundedForm(forms.Form):
    """A form whose fields take the limits of the model columns they are saved to: a field
    named like a field of `bounded_model` (or mapped in `bounded_columns`) gets its range or
    length. Any other number is kept within MAX_AMOUNT and the integer column's range."""

    bounded_model: type[models.Model] | None = None
    bounded_columns: dict[str, str] = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        model = self.bounded_model
        for name, form_field in self.fields.items():
            column = self.bounded_columns.get(name, name)
            try:
                model_field = model._meta.get_field(column) if model else None
            except FieldDoesNotExist:
                model_field = None
            if model_field is None:
                model_field = _default_column(form_field)
            if model_field is not None:
                bound_form_field(form_field, model_field)


def _default_column(form_field: forms.Field) -> models.Field | None:
    if isinstance(form_field, forms.DecimalField):
        return models.DecimalField(max_digits=20, decimal_places=form_field.decimal_places or 10)
    if isinstance(form_field, forms.IntegerField):
        return models.IntegerField()
    return None


def check_values(model: type[models.Model], values: dict, *, labels: dict | None = None) -> None:
    """Raise DomainError for the first value its column of `model` cannot hold: for paths that
    bypass forms (imports, services called by tasks)."""
    labels = labels or {}
    for name, value in values.items():
        try:
            model_field = model._meta.get_field(name)
        except FieldDoesNotExist:  # not a column: not this function's concern
            continue
        label = labels.get(name, name)
        if isinstance(value, str):
            if "\x00" in value:
                raise DomainError(f"{label} contains a NUL character.", field=name)
            length = getattr(model_field, "max_length", None)
            if length and len(value) > length:
                raise DomainError(f"{label} is longer than {length} characters.", field=name)
        elif isinstance(value, Decimal) and isinstance(model_field, models.DecimalField):
            high = decimal_max(model_field)
            if not value.is_finite() or abs(value) > high:
                raise DomainError(f"{label} must be at most {high:,}.", field=name)
            try:
                value.quantize(Decimal(1).scaleb(-model_field.decimal_places))
            except InvalidOperation:
                raise DomainError(f"{label} is not a valid amount.", field=name) from None
        elif isinstance(value, int) and isinstance(model_field, models.IntegerField):
            low, high = integer_range(model_field)
            if not low <= value <= high:
                raise DomainError(f"{label} must be between {low} and {high}.", field=name)
