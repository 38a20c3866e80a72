from django import forms

from labgov.accounts.models import Lab, Role, User
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

    def __init__(self, *args, roles, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["role"].choices = [(r.value, r.label) for r in roles]

    def clean_username(self):
        username = self.cleaned_data["username"].strip()
        user = User.objects.filter(username__iexact=username, is_active=True).first()
        if user is None:
            raise forms.ValidationError(f"No active user {username!r}.")
        return user


LAB_ROLES_FOR_LAB_ADMIN = (Role.MEMBER,)
LAB_ROLES_FOR_INSTITUTION_ADMIN = (Role.LAB_ADMIN, Role.MEMBER)
INSTITUTION_ROLE_CHOICES = (Role.INSTITUTION_ADMIN, Role.FINANCE)
