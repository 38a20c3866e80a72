from celery import shared_task

from labgov.runpod.models import BillingSource, RunpodAccount, SyncRun


@shared_task(acks_late=True)
def sync_account(
    account_id: int, trigger: str = SyncRun.Trigger.SCHEDULE, actor_id: int | None = None
) -> int:
    """Sync one account; returns the SyncRun id. Failures are recorded in the SyncRun (the next
    scheduled run is the retry), so the task itself only fails on bugs."""
    from labgov.accounts.models import User
    from labgov.runpod.sync import account_sync

    actor = User.objects.filter(pk=actor_id).first() if actor_id else None
    return account_sync(account_id=account_id, trigger=trigger, actor=actor).pk


@shared_task
def sync_all_accounts() -> int:
    ids = list(
        RunpodAccount.objects.filter(
            is_active=True, billing_source=BillingSource.RUNPOD_API
        ).values_list("pk", flat=True)
    )
    for account_id in ids:
        sync_account.delay(account_id)
    return len(ids)


@shared_task
def billing_partitions_ahead() -> int:
    """Create this month's and the coming months' billing partitions (PostgreSQL), so that a
    sync rarely has to make one (labgov.runpod.partitions)."""
    from django.utils import timezone

    from labgov.runpod.partitions import ensure_ahead

    return len(ensure_ahead(timezone.now()))


@shared_task
def focus_folders_import() -> int:
    """Import the new files of every FOCUS source's folder; returns how many were read."""
    from labgov.runpod.focus_folders import folders_import

    return folders_import()
