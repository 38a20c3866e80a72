import logging

from celery import shared_task

log = logging.getLogger(__name__)


@shared_task(acks_late=True)
def poll_all() -> dict:
    """Every LABGOV_UTILIZATION_POLL_MINUTES: sample running pods' utilization (no billing),
    then apply the labs' auto-stop policies to what the samples show."""
    from labgov.accounts.models import Institution
    from labgov.idle.policy import autostop_run
    from labgov.utilization.poll import utilization_poll_all

    counts = utilization_poll_all()
    for institution_id in Institution.objects.values_list("pk", flat=True):
        try:
            for key, value in autostop_run(institution_id=institution_id).items():
                counts[key] = counts.get(key, 0) + value
        except Exception:
            log.exception("auto-stop failed for institution %s", institution_id)
    return counts
