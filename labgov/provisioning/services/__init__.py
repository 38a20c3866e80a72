"""Writes of the provisioning app. Import from here."""

from labgov.provisioning.services.commitments import commitments_reconcile
from labgov.provisioning.services.policies import policy_save
from labgov.provisioning.services.provision import (
    provisioning_resume,
    provisioning_retry,
    provisioning_run,
    request_mark_provisioned,
)
from labgov.provisioning.services.requests import (
    RequestBlocked,
    assess,
    request_approve,
    request_cancel,
    request_deny,
    request_save,
    request_submit,
    requests_expire,
)

__all__ = [
    "RequestBlocked",
    "assess",
    "commitments_reconcile",
    "policy_save",
    "provisioning_resume",
    "provisioning_retry",
    "provisioning_run",
    "request_approve",
    "request_cancel",
    "request_deny",
    "request_mark_provisioned",
    "request_save",
    "request_submit",
    "requests_expire",
]
