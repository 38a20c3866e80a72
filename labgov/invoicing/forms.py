from django import forms

from labgov.core.bounds import BoundedForm
from labgov.invoicing.models import InvoiceLine


class ReasonForm(BoundedForm):
    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


class CloseForm(BoundedForm):
    acceptance_reason = forms.CharField(
        label="Reason for accepting what does not reconcile",
        max_length=2000,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Needed only when the period does not reconcile to the cent.",
    )


class LineForm(BoundedForm):
    kind = forms.ChoiceField(
        choices=[(k.value, k.label) for k in InvoiceLine.ENTERED_KINDS], label="Line"
    )
    amount_usd = forms.DecimalField(
        label="Amount (USD)",
        max_digits=12,
        decimal_places=2,
        help_text="A credit is a positive amount taken off; an adjustment may be either sign.",
    )
    reason = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
