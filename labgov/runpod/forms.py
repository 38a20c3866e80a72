from django import forms

from labgov.runpod.models import DEFAULT_BASE_URL, AttributionRule


class AccountForm(forms.Form):
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


class RuleForm(forms.Form):
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
