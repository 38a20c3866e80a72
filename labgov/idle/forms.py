from django import forms

from labgov.core.bounds import BoundedForm
from labgov.idle.models import AutoStopMark, AutoStopPolicy


class PolicyForm(BoundedForm):
    bounded_model = AutoStopPolicy

    enabled = forms.BooleanField(label="Stop idle pods automatically", required=False)
    idle_hours = forms.IntegerField(
        label="Stop after this many idle hours", min_value=1, max_value=168
    )
    warn_minutes = forms.IntegerField(
        label="Warn the owner this many minutes ahead", min_value=5, max_value=24 * 60
    )
    keep_hours = forms.IntegerField(
        label="“Keep running” keeps it for (hours)", min_value=1, max_value=72
    )
    scale_idle_endpoints = forms.BooleanField(
        label="Also scale serverless endpoints whose always-on workers serve nothing to 0 "
        "always-on workers (never deleted)",
        required=False,
    )


class EndpointWorkersForm(BoundedForm):
    workers_min = forms.IntegerField(label="Always-on workers (workers.min)", min_value=0)
    idle_timeout_seconds = forms.IntegerField(
        label="Idle timeout (seconds before an idle worker scales down)",
        min_value=1,
        max_value=3600,
        required=False,
    )

    def __init__(self, *args, workers_max: int | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.workers_max = workers_max

    def clean_workers_min(self):
        value = self.cleaned_data["workers_min"]
        if self.workers_max is not None and value > self.workers_max:
            raise forms.ValidationError(
                f"The minimum of workers ({value}) cannot be above the endpoint's maximum "
                f"({self.workers_max}): workers.max is at least workers.min."
            )
        return value


class NeverStopForm(BoundedForm):
    bounded_model = AutoStopMark

    pod = forms.TypedChoiceField(label="Pod", coerce=int)
    reason = forms.CharField(label="Why it must never be stopped automatically", max_length=300)
    until = forms.DateField(label="Until", widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, *args, pods=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pod"].choices = [(p.pk, p.label) for p in pods]


class KeepForm(BoundedForm):
    hours = forms.IntegerField(min_value=1, max_value=72, required=False)


class AllowStopForm(BoundedForm):
    allowed = forms.BooleanField(required=False)
