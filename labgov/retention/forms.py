from django import forms

from labgov.core.bounds import BoundedForm
from labgov.retention.models import Hold, RetentionCase, RetentionPolicy, State


class PolicyForm(BoundedForm):
    bounded_model = RetentionPolicy

    is_active = forms.BooleanField(
        label="Turned on (cases open and people are warned)", required=False
    )
    funding_grace_days = forms.IntegerField(
        label="Days of grace after a funding source ends", min_value=0, max_value=3650
    )
    membership_grace_days = forms.IntegerField(
        label="Days of grace after the owner's membership ends", min_value=0, max_value=3650
    )
    idle_grace_days = forms.IntegerField(
        label="Days a volume may sit idle before it is due", min_value=1, max_value=3650
    )
    include_stopped_pod_disks = forms.BooleanField(
        label="Stopped pods' volume disks count", required=False
    )
    warning_days = forms.CharField(
        label="Warn owners and lab admins this many days ahead",
        max_length=60,
        help_text="e.g. 30, 7, 1",
    )
    approvers_required = forms.TypedChoiceField(
        label="Approvers a deletion needs (never the requester)",
        choices=[(1, "One"), (2, "Two")],
        coerce=int,
    )

    @staticmethod
    def initial_from(policy: RetentionPolicy) -> dict:
        return {
            "is_active": policy.is_active,
            "funding_grace_days": policy.funding_grace_days,
            "membership_grace_days": policy.membership_grace_days,
            "idle_grace_days": policy.idle_grace_days,
            "include_stopped_pod_disks": policy.include_stopped_pod_disks,
            "warning_days": policy.warning_days,
            "approvers_required": policy.approvers_required,
        }


class KeepForm(BoundedForm):
    bounded_model = RetentionCase
    bounded_columns = {"reason": "kept_reason"}

    reason = forms.CharField(max_length=300)
    review_date = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}))


class HoldForm(BoundedForm):
    bounded_model = Hold

    kind = forms.ChoiceField(choices=Hold.Kind.choices)
    reason = forms.CharField(max_length=300)
    until = forms.DateField(
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="Last day held; empty: until lifted.",
    )
    payer = forms.ModelChoiceField(queryset=None, label="Who pays for the held storage")

    def __init__(self, *args, allocations, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["payer"].queryset = allocations


class MoveForm(BoundedForm):
    allocation = forms.ModelChoiceField(queryset=None, label="Pay from")
    starts_on = forms.DateField(label="From", widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, *args, allocations, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["allocation"].queryset = allocations


class NoteForm(BoundedForm):
    bounded_model = RetentionCase

    note = forms.CharField(max_length=300, required=False)


class CaseFilterForm(forms.Form):
    state = forms.ChoiceField(
        choices=[("active", "Active"), ("", "All"), *State.choices], required=False
    )
