from django import forms

from labgov.accounts.models import Institution, Lab, Role
from labgov.accounts.services import UNKNOWN_PERSON, users_of_institution
from labgov.core.bounds import BoundedForm

_DATE = forms.DateInput(attrs={"type": "date"})


class LabForm(BoundedForm):
    bounded_model = Lab

    name = forms.CharField(max_length=200)
    kind = forms.ChoiceField(choices=Lab.Kind.choices)
    department = forms.CharField(max_length=200, required=False)


class MembershipForm(BoundedForm):
    username = forms.CharField(max_length=150, help_text="The person's labgov username.")
    role = forms.ChoiceField(choices=())
    end_date = forms.DateField(
        required=False,
        widget=_DATE,
        help_text="Optional last day of access (a course ends, a student graduates).",
    )

    def __init__(self, *args, roles, institution, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["role"].choices = [(r.value, r.label) for r in roles]
        self.institution = institution

    def clean_username(self):
        username = self.cleaned_data["username"].strip()
        user = (
            users_of_institution(self.institution)
            .filter(username__iexact=username)
            .order_by("pk")
            .first()
        )
        if user is None:
            raise forms.ValidationError(UNKNOWN_PERSON)
        return user


LAB_ROLES_FOR_LAB_ADMIN = (Role.MEMBER,)
LAB_ROLES_FOR_INSTITUTION_ADMIN = (Role.LAB_ADMIN, Role.MEMBER)
INSTITUTION_ROLE_CHOICES = (Role.INSTITUTION_ADMIN, Role.FINANCE)


class AutoApproveCeilingForm(BoundedForm):
    bounded_model = Institution
    bounded_columns = {"amount_usd": "auto_approve_ceiling_usd"}

    amount_usd = forms.DecimalField(
        label="Auto-approval ceiling (USD)",
        min_value=0,
        max_digits=14,
        decimal_places=2,
        help_text="No lab's policy may approve requests on submission at or above this amount.",
    )


class TimeZoneForm(BoundedForm):
    bounded_model = Institution

    time_zone = forms.CharField(
        label="Time zone (IANA name)",
        help_text="Billing periods are calendar months in this zone, e.g. America/New_York.",
    )
