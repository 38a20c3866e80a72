import logging

from celery import shared_task
from django.db import transaction

log = logging.getLogger(__name__)


@shared_task(acks_late=True)
def evaluate_institution(institution_id: int) -> dict:
    """Evaluate one institution's alerts (after each of its accounts' syncs)."""
    from labgov.alerts.evaluation import alerts_evaluate

    return alerts_evaluate(institution_id=institution_id).as_dict()


@shared_task(acks_late=True)
def evaluate_all() -> dict:
    """The daily evaluation: time-based conditions (idle days, end dates, snoozes running
    out) change even when nothing is synced."""
    from labgov.alerts.evaluation import alerts_evaluate_all

    return alerts_evaluate_all()


def evaluation_after_sync(*, run) -> None:
    """After-sync step (settings.LABGOV_AFTER_SYNC): alerts are evaluated after every sync,
    succeeded or failed (a failing sync is itself an alert), in a task of their own, so a slow
    evaluation never holds up the next sync."""
    institution_id = run.account.institution_id
    try:
        transaction.on_commit(lambda: evaluate_institution.delay(institution_id), robust=True)
    except Exception:  # the broker being down must not turn a good sync into a failure
        log.exception("could not queue the alert evaluation of institution %s", institution_id)
