from decimal import Decimal

from django import forms

from labgov.alerts.config import Effective
from labgov.alerts.models import Alert, AlertSettings, Kind, Severity
from labgov.core.bounds import BoundedForm
from labgov.runpod.models import RunpodAccount


class AlertSettingsForm(BoundedForm):
    bounded_model = AlertSettings

    enabled_kinds = forms.MultipleChoiceField(
        label="Alerts switched on",
        choices=Kind.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )
    idle_volume_days = forms.IntegerField(
        label="Network volume unused for (days)", min_value=1, max_value=365
    )
    budget_thresholds = forms.CharField(
        label="Budget thresholds (%)",
        max_length=100,
        help_text="Committed + spent as a share of a funding source or allocation, "
        "e.g. 50, 80, 100.",
    )
    funding_ending_days = forms.IntegerField(
        label="Warn this many days before funding ends", min_value=0, max_value=365
    )
    balance_days = forms.IntegerField(
        label="Warn when the Runpod balance lasts fewer days than", min_value=1, max_value=90
    )
    unattributed_threshold_usd = forms.DecimalField(
        label="Unattributed spend over 30 days above (USD)",
        min_value=Decimal(0),
        max_digits=12,
        decimal_places=2,
    )
    sync_failing_hours = forms.IntegerField(
        label="Sync failing for more than (hours)", min_value=1, max_value=168
    )
    idle_gpu_util_percent = forms.IntegerField(
        label="Pod running idle: mean GPU utilization below (%)", min_value=1, max_value=100
    )
    idle_memory_util_percent = forms.IntegerField(
        label="Pod running idle: and mean GPU memory utilization below (%)",
        min_value=1,
        max_value=100,
    )
    idle_grace_hours = forms.IntegerField(
        label="Pod running idle: for longer than (hours)", min_value=1, max_value=168
    )

    @staticmethod
    def initial_from(effective: Effective) -> dict:
        return {
            "enabled_kinds": [k for k in Kind.values if effective.enabled(k)],
            "idle_volume_days": effective.idle_volume_days,
            "budget_thresholds": ", ".join(str(t) for t in effective.budget_thresholds),
            "funding_ending_days": effective.funding_ending_days,
            "balance_days": effective.balance_days,
            "unattributed_threshold_usd": effective.unattributed_threshold_usd,
            "sync_failing_hours": effective.sync_failing_hours,
            "idle_gpu_util_percent": effective.idle_gpu_util_percent,
            "idle_memory_util_percent": effective.idle_memory_util_percent,
            "idle_grace_hours": effective.idle_grace_hours,
        }


STATE_FILTERS = [
    ("active", "Needing attention or acknowledged"),
    (Alert.State.OPEN, "Open"),
    (Alert.State.ACKNOWLEDGED, "Acknowledged"),
    (Alert.State.SNOOZED, "Snoozed"),
    (Alert.State.RESOLVED, "Resolved"),
    ("all", "All"),
]


class AlertFilterForm(BoundedForm):
    state = forms.ChoiceField(choices=STATE_FILTERS, required=False)
    kind = forms.ChoiceField(choices=[("", "Any kind"), *Kind.choices], required=False)
    severity = forms.ChoiceField(choices=[("", "Any severity"), *Severity.choices], required=False)
    lab = forms.TypedChoiceField(coerce=int, required=False, empty_value=None)

    def __init__(self, *args, labs=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["lab"].choices = [("", "Any lab"), *labs]
        # The filters stand without visible labels; a screen reader still names each one.
        for name, field in self.fields.items():
            field.widget.attrs.setdefault("aria-label", name.capitalize())


class SnoozeForm(BoundedForm):
    until = forms.DateField(
        label="Snooze until",
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="The alert comes back at 00:00 UTC that day if its condition still holds.",
    )


class ResolveForm(BoundedForm):
    bounded_model = Alert
    bounded_columns = {"note": "resolution"}

    note = forms.CharField(label="What was done", max_length=500, required=False)


class BalanceForm(BoundedForm):
    bounded_model = RunpodAccount
    bounded_columns = {"balance_usd": "manual_balance_usd"}

    balance_usd = forms.DecimalField(
        label="Balance (USD)",
        min_value=Decimal(0),
        max_digits=14,
        decimal_places=2,
        required=False,
        help_text="As shown in Runpod's console; leave empty to clear it.",
    )
