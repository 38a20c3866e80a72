from django import forms

from labgov.accounts.models import Membership, Role, User
from labgov.core.bounds import BoundedForm
from labgov.funding.models import Allocation, FundingSource
from labgov.funding.services import allocation_value_problems, funding_value_problems

_DATE = forms.DateInput(attrs={"type": "date"})


class FundingSourceForm(BoundedForm):
    bounded_model = FundingSource

    lab = forms.ModelChoiceField(queryset=None)
    kind = forms.ChoiceField(choices=FundingSource.Kind.choices)
    name = forms.CharField(max_length=200)
    sponsor = forms.CharField(max_length=200, required=False)
    award_number = forms.CharField(max_length=100, required=False)
    cost_center = forms.CharField(
        max_length=200, required=False, label="Cost center / chart-of-accounts string"
    )
    start_date = forms.DateField(widget=_DATE)
    end_date = forms.DateField(widget=_DATE, help_text="The last day of the funding period.")
    amount_usd = forms.DecimalField(label="Amount (USD)", max_digits=14)
    indirect_cost_rate_percent = forms.DecimalField(
        label="Indirect-cost rate (%)", required=False, max_digits=5
    )
    status = forms.ChoiceField(choices=FundingSource.Status.choices)

    def __init__(self, *args, labs, **kwargs):
        super().__init__(*args, **kwargs)
        if labs is None:  # a change to an existing source keeps its lab
            del self.fields["lab"]
        else:
            self.fields["lab"].queryset = labs

    def clean(self):
        # Every rule the values break at once (the service checks them again, first first).
        data = super().clean()
        names = ("name", "start_date", "end_date", "amount_usd", "indirect_cost_rate_percent")
        for field, message in funding_value_problems(**{n: data.get(n) for n in names}):
            if field not in self.errors:
                self.add_error(field, message)
        return data


class AllocationForm(BoundedForm):
    bounded_model = Allocation

    user = forms.ModelChoiceField(queryset=None, required=False, label="Person")
    project_name = forms.CharField(
        max_length=200, required=False, help_text="A named project, instead of or besides a person."
    )
    cap_usd = forms.DecimalField(label="Cap (USD)", max_digits=14)
    start_date = forms.DateField(widget=_DATE)
    end_date = forms.DateField(widget=_DATE, help_text="The last day of the allocation.")

    def __init__(self, *args, funding_source: FundingSource, actor=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.funding_source = funding_source
        member_ids = (
            Membership.objects.active()
            .filter(lab_id=funding_source.lab_id, role__in=[Role.MEMBER, Role.LAB_ADMIN])
            .values("user_id")
        )
        people = User.objects.filter(pk__in=member_ids)
        if actor is not None:
            # Nobody allocates to themselves (funding/services.py says why).
            people = people.exclude(pk=actor.pk)
        self.fields["user"].queryset = people.order_by("last_name", "username")

    def clean(self):
        # Every rule the values break at once (the service checks them again, first first).
        data = super().clean()
        names = ("user", "project_name", "cap_usd", "start_date", "end_date")
        values = {n: data.get(n) for n in names}
        for field, message in allocation_value_problems(
            funding_source=self.funding_source, **values
        ):
            if field not in self.errors:
                self.add_error(field, message)
        return data


class GrantImportForm(forms.Form):
    institution = forms.ModelChoiceField(queryset=None)
    file = forms.FileField(label="CSV file")

    def __init__(self, *args, institutions, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["institution"].queryset = institutions
        only = list(institutions[:2])
        if len(only) == 1:
            self.fields["institution"].initial = only[0].pk
            self.fields["institution"].widget = forms.HiddenInput()


class FundingProposalForm(FundingSourceForm):
    """What a lab admin proposes: a new funding source (with its lab) or a change to one (no
    lab), with the same fields and limits as the source itself, and why."""

    reason = forms.CharField(
        max_length=1000,
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Why: the award letter, the budget line, what changed.",
    )

    def __init__(self, *args, labs=None, **kwargs):
        super().__init__(*args, labs=labs, **kwargs)

    def values(self) -> dict:
        skip = {"lab", "reason"}
        return {k: v for k, v in self.cleaned_data.items() if k not in skip}


class ProposalDecisionForm(BoundedForm):
    note = forms.CharField(max_length=1000, required=False)
