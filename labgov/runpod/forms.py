import datetime as dt

from django import forms

from labgov.core.bounds import BoundedForm
from labgov.runpod.models import DEFAULT_BASE_URL, AttributionRule, RunpodAccount


class AccountForm(BoundedForm):
    bounded_model = RunpodAccount

    name = forms.CharField(max_length=120)
    lab = forms.ModelChoiceField(
        queryset=None,
        required=False,
        empty_label="Institution-wide",
        help_text="Choose a lab when this is that lab's own Runpod team account.",
    )
    base_url = forms.CharField(
        max_length=200,
        initial=DEFAULT_BASE_URL,
        label="Base URL",
        help_text=(
            f"Runpod's API ({DEFAULT_BASE_URL}), or a server the operator allowed in"
            " LABGOV_RUNPOD_HOSTS (such as labgov's simulator). Changing it needs the keys"
            " entered again."
        ),
    )
    api_key = forms.CharField(
        label="Sync key",
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text=(
            "Used to read pods, volumes and billing. A read-only key is enough for syncing."
        ),
    )
    write_key = forms.CharField(
        label="Write key (optional)",
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text=(
            "Used only to create pods and act on them (provisioning, alert actions); it needs"
            " write access. Without one, labgov changes nothing on Runpod. Keys are stored"
            " encrypted and never shown again."
        ),
    )

    def __init__(self, *args, labs, key_required: bool, has_write_key: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["lab"].queryset = labs
        self.fields["api_key"].required = key_required
        if not key_required:
            self.fields["api_key"].help_text = "Leave empty to keep the stored sync key."
            self.fields["write_key"].help_text = "Leave empty to keep the stored write key."
        if has_write_key:
            self.fields["remove_write_key"] = forms.BooleanField(
                required=False,
                label="Remove the write key",
                help_text="Nothing is then created or changed on Runpod through this account.",
            )


class RuleForm(BoundedForm):
    bounded_model = AttributionRule

    account = forms.ModelChoiceField(
        queryset=None,
        help_text="A lab's own account; accounts shared by several labs are for institution "
        "admins.",
    )
    kind = forms.ChoiceField(choices=AttributionRule.Kind.choices)
    pattern = forms.CharField(
        max_length=300,
        required=False,
        help_text="Name prefix (vision-), NAME=value (PROJECT=eval), or a template id.",
    )
    allocation = forms.ModelChoiceField(queryset=None)
    starts_at = forms.DateTimeField(
        label="Applies from (UTC)",
        required=False,
        help_text="Empty: from now. An earlier start moves spend from then on, and must lie in "
        "a period finance has not closed.",
    )

    def __init__(self, *args, accounts, allocations, may_backdate: bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["account"].queryset = accounts
        self.fields["allocation"].queryset = allocations
        if not may_backdate:
            del self.fields["starts_at"]

    def clean_starts_at(self):
        value = self.cleaned_data.get("starts_at")
        return value.astimezone(dt.UTC) if value is not None else None


class AssignForm(forms.Form):
    allocation = forms.ModelChoiceField(queryset=None, empty_label=None)

    def __init__(self, *args, allocations, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["allocation"].queryset = allocations


class FocusSourceForm(BoundedForm):
    bounded_model = RunpodAccount

    name = forms.CharField(max_length=120, help_text="How people here call it: “AWS research”.")
    provider = forms.CharField(
        max_length=60,
        help_text="The cloud whose FOCUS export it is: AWS, Microsoft Azure, Google Cloud, Oracle…",
    )
    lab = forms.ModelChoiceField(
        queryset=None,
        required=False,
        empty_label="Institution-wide",
        help_text="Choose a lab when the cloud account is that lab's own.",
    )
    currency = forms.CharField(
        max_length=3, initial="USD", help_text="The files' BillingCurrency (ISO 4217)."
    )
    usd_per_unit = forms.DecimalField(
        required=False,
        max_digits=20,
        decimal_places=10,
        label="Exchange rate (USD per unit)",
        help_text="Needed for any currency but USD: files in it are refused without one.",
    )

    def __init__(self, *args, labs, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["lab"].queryset = labs


class FocusFileForm(forms.Form):
    file = forms.FileField(label="FOCUS file (CSV)", help_text="One billing period (a month).")
    late = forms.BooleanField(
        required=False,
        label="A correction of a closed month",
        help_text="Its differences become late-usage lines on the first open month's invoices.",
    )


class FocusFolderForm(forms.Form):
    folder = forms.CharField(
        required=False,
        max_length=500,
        label="Folder the worker reads",
        help_text="A folder under LABGOV_FOCUS_DROP_ROOT, relative to it (blank: none). Its new "
        "CSV files are imported on their own.",
    )
