from celery import shared_task


@shared_task(acks_late=True)
def generate_due_drafts() -> int:
    """Hourly: on the first day of a month (each institution's own calendar), once its hour
    LABGOV_INVOICE_DRAFTS_HOUR has come, generate the previous month's drafts and tell
    finance (once per institution and month)."""
    from labgov.invoicing.services import drafts_generate_due

    return len(drafts_generate_due())
