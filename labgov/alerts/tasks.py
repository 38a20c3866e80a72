from celery import shared_task


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
