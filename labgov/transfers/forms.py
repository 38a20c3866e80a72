from decimal import Decimal

from django import forms

from labgov.core.bounds import BoundedForm
from labgov.transfers.models import CostTransfer

MAX_SHARE_ROWS = 6


class TransferForm(BoundedForm):
    bounded_model = CostTransfer

    from_allocation = forms.ModelChoiceField(queryset=None, label="Move spend from")
    to_allocation = forms.ModelChoiceField(queryset=None, label="To")
    account = forms.ModelChoiceField(
        queryset=None, label="Runpod account", help_text="The account whose spend moves."
    )
    month = forms.ChoiceField(label="Month", help_text="Only months finance has not closed.")
    resource_runpod_id = forms.CharField(
        label="Resource (optional)",
        required=False,
        max_length=100,
        help_text="The Runpod id of one pod or volume, to move only its spend.",
    )
    amount_usd = forms.DecimalField(
        label="Amount (USD)", decimal_places=10, min_value=Decimal("0.0000000001")
    )
    justification = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=1000)

    def __init__(self, *args, allocations, accounts, months, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["from_allocation"].queryset = allocations
        self.fields["to_allocation"].queryset = allocations
        self.fields["account"].queryset = accounts
        self.fields["month"].choices = [(m.strftime("%Y-%m"), f"{m:%B %Y}") for m in months]
        self.months = {m.strftime("%Y-%m"): m for m in months}

    def clean_month(self):
        return self.months[self.cleaned_data["month"]]


class DecisionForm(forms.Form):
    note = forms.CharField(max_length=1000, required=False)


class SplitForm(BoundedForm):
    """Up to MAX_SHARE_ROWS (allocation, percent) rows and the day the shares start."""

    starts_on = forms.DateField(
        label="From (UTC day)",
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="Billing from 00:00 UTC that day on is paid in these shares.",
    )

    def __init__(self, *args, allocations, **kwargs):
        super().__init__(*args, **kwargs)
        for i in range(1, MAX_SHARE_ROWS + 1):
            self.fields[f"allocation_{i}"] = forms.ModelChoiceField(
                queryset=allocations,
                required=False,
                label=f"Allocation {i}",
                widget=forms.Select(attrs={"aria-label": f"Allocation {i}"}),
            )
            self.fields[f"share_{i}"] = forms.DecimalField(
                label=f"Share {i} (%)",
                required=False,
                max_digits=5,
                decimal_places=2,
                min_value=Decimal("0.01"),
                max_value=Decimal(100),
                widget=forms.NumberInput(attrs={"aria-label": f"Share {i} (%)", "step": "0.01"}),
            )

    def rows(self):
        return [(self[f"allocation_{i}"], self[f"share_{i}"]) for i in range(1, MAX_SHARE_ROWS + 1)]

    def clean(self):
        cleaned = super().clean()
        shares = []
        for i in range(1, MAX_SHARE_ROWS + 1):
            allocation = cleaned.get(f"allocation_{i}")
            share = cleaned.get(f"share_{i}")
            if f"allocation_{i}" in self.errors or f"share_{i}" in self.errors:
                continue
            if allocation is not None and share is None:
                self.add_error(f"share_{i}", "Give this allocation's share.")
            elif allocation is None and share is not None:
                self.add_error(f"allocation_{i}", "Choose the allocation for this share.")
            elif allocation is not None:
                shares.append((allocation, share))
        if not shares and not self.errors:
            self.add_error(None, "Name at least one allocation and its share.")
        total = sum((share for _, share in shares), Decimal(0))
        if shares and total != 100:
            self.add_error(None, f"The shares add up to {total}%, not exactly 100%.")
        cleaned["shares"] = shares
        return cleaned
