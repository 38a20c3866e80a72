import logging

from celery import shared_task
from django.db import transaction

log = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True, max_retries=6)
def delete_case(self, case_id: int) -> str:
    """Carry out an approved deletion; a transient Runpod failure retries with backoff (the
    retry reads the resource again first, so a delete that happened is recorded, not
    repeated)."""
    from labgov.retention.deletion import case_delete_carry_out
    from labgov.runpod.errors import RunpodError

    try:
        return case_delete_carry_out(case_id=case_id)
    except RunpodError as exc:
        if not exc.transient:
            raise
        raise self.retry(exc=exc, countdown=min(3600, 60 * 2**self.request.retries)) from exc


@shared_task(acks_late=True)
def evaluate_institution(institution_id: int) -> dict:
    from labgov.retention.evaluation import retention_evaluate

    return retention_evaluate(institution_id=institution_id).as_dict()


@shared_task(acks_late=True)
def evaluate_all() -> dict:
    """The daily evaluation: due dates, warnings, review dates and holds run out with time."""
    from labgov.retention.evaluation import retention_evaluate_all

    return retention_evaluate_all()


def evaluation_after_sync(*, run) -> None:
    """After-sync step (settings.LABGOV_AFTER_SYNC): a sync may bring new volumes, stops and
    re-attributions, so retention is evaluated in a task of its own."""
    institution_id = run.account.institution_id
    try:
        transaction.on_commit(lambda: evaluate_institution.delay(institution_id), robust=True)
    except Exception:  # the broker being down must not turn a good sync into a failure
        log.exception("could not queue the retention evaluation of institution %s", institution_id)
