"""The light utilization poll: list the pods of an account and sample the running ones. It
fetches no billing and writes nothing but samples, so it can run every few minutes beside the
billing sync (LABGOV_UTILIZATION_POLL_MINUTES)."""

import datetime as dt
import logging

from django.utils import timezone

from labgov.core import dataversion
from labgov.runpod.errors import RunpodError
from labgov.runpod.models import RunpodAccount
from labgov.utilization.recording import samples_record

log = logging.getLogger(__name__)


@dataversion.scoped(lambda *, account, **_: [account.institution_id])
def utilization_poll(*, account: RunpodAccount, client_factory, now: dt.datetime | None = None):
    now = now or timezone.now()
    with client_factory(account) as client:
        pods = client.list_pods(include_cluster_pods=True)
    return samples_record(account=account, pods=pods, now=now)


def utilization_poll_all(*, client_factory=None, now: dt.datetime | None = None) -> dict:
    """Poll every active account; one account's failure is logged and the others go on (the
    next pass is the retry)."""
    from labgov.runpod.services import client_for_account

    factory = client_factory or client_for_account
    counts = {"accounts": 0, "failed": 0, "samples": 0}
    for account in RunpodAccount.objects.filter(is_active=True):
        counts["accounts"] += 1
        try:
            counts["samples"] += utilization_poll(account=account, client_factory=factory, now=now)[
                "utilization_samples"
            ]
        except RunpodError as exc:
            counts["failed"] += 1
            log.warning("utilization poll of account %s failed: %s", account.pk, exc)
    return counts
