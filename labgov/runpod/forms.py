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
        help_text="Runpod's API, or a server that speaks it (such as labgov's simulator).",
    )
    api_key = forms.CharField(
        label="API key",
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text=(
            "A read-only key is enough for syncing; provisioning pods needs a key with write "
            "access. The key is stored encrypted and never shown again."
        ),
    )

    def __init__(self, *args, labs, key_required: bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["lab"].queryset = labs
        self.fields["api_key"].required = key_required
        if not key_required:
            self.fields["api_key"].help_text = "Leave empty to keep the stored key."


class RuleForm(BoundedForm):
    bounded_model = AttributionRule

    account = forms.ModelChoiceField(queryset=None)
    kind = forms.ChoiceField(choices=AttributionRule.Kind.choices)
    pattern = forms.CharField(
        max_length=300,
        required=False,
        help_text="Name prefix (vision-), NAME=value (LABGOV_ALLOCATION=12), or a template id.",
    )
    allocation = forms.ModelChoiceField(queryset=None)

    def __init__(self, *args, accounts, allocations, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["account"].queryset = accounts
        self.fields["allocation"].queryset = allocations


class AssignForm(forms.Form):
    allocation = forms.ModelChoiceField(queryset=None, empty_label=None)

    def __init__(self, *args, allocations, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["allocation"].queryset = allocations
