from celery import shared_task


@shared_task(acks_late=True)
def prune_samples() -> int:
    """Daily: raw samples past LABGOV_UTILIZATION_RAW_DAYS go; hourly aggregates stay."""
    from django.utils import timezone

    from labgov.utilization.recording import samples_prune

    return samples_prune(now=timezone.now())
