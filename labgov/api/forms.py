from django import forms

from labgov.api.models import ApiToken
from labgov.api.services import MAX_DAYS
from labgov.core.bounds import BoundedForm


class TokenForm(BoundedForm):
    bounded_model = ApiToken

    name = forms.CharField(max_length=100, help_text="What uses it, e.g. the training launcher.")
    scope = forms.ChoiceField(
        choices=ApiToken.Scope.choices,
        help_text="Read is enough for dashboards and checks; acting (approving, assigning, "
        "syncing) needs read and write.",
    )
    days = forms.IntegerField(
        label="Expires in (days)", min_value=1, max_value=MAX_DAYS, initial=90
    )
