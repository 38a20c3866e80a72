from django import forms

from labgov.core.bounds import BoundedForm
from labgov.notifications.kinds import Severity, all_kinds
from labgov.notifications.models import EmailChoice


class MutedKindsForm(forms.Form):
    delivery = forms.ChoiceField(
        label="Email me my notifications",
        choices=EmailChoice.Delivery.choices,
        initial=EmailChoice.Delivery.DIGEST,
        widget=forms.RadioSelect,
    )
    muted = forms.MultipleChoiceField(
        label="Do not email me about",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Muted kinds still show under Notifications; they are never emailed.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["muted"].choices = [
            (k.key, f"{k.label} ({Severity(k.default_severity).label.lower()})")
            for k in all_kinds()
        ]


class WebhookForm(BoundedForm):
    url = forms.CharField(
        label="Webhook URL",
        required=False,
        max_length=2000,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="A Slack (or compatible) incoming-webhook URL, https://…",
    )
    is_active = forms.BooleanField(label="Active", required=False, initial=True)
    min_severity = forms.ChoiceField(
        label="Post notifications of at least",
        choices=Severity.choices,
        initial=Severity.WARNING,
    )

    def __init__(self, *args, url_required: bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["url"].required = url_required
        if not url_required:
            self.fields["url"].help_text = "Leave empty to keep the stored URL."
