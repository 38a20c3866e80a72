from django import forms

from labgov.accounts.models import Membership, Role, User
from labgov.core.bounds import BoundedForm
from labgov.funding.models import Allocation, FundingSource

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
        self.fields["lab"].queryset = labs


class AllocationForm(BoundedForm):
    bounded_model = Allocation

    user = forms.ModelChoiceField(queryset=None, required=False, label="Person")
    project_name = forms.CharField(
        max_length=200, required=False, help_text="A named project, instead of or besides a person."
    )
    cap_usd = forms.DecimalField(label="Cap (USD)", max_digits=14)
    start_date = forms.DateField(widget=_DATE)
    end_date = forms.DateField(widget=_DATE, help_text="The last day of the allocation.")

    def __init__(self, *args, funding_source: FundingSource, **kwargs):
        super().__init__(*args, **kwargs)
        member_ids = (
            Membership.objects.active()
            .filter(lab_id=funding_source.lab_id, role__in=[Role.MEMBER, Role.LAB_ADMIN])
            .values("user_id")
        )
        self.fields["user"].queryset = User.objects.filter(pk__in=member_ids).order_by(
            "last_name", "username"
        )


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
