from celery import shared_task


@shared_task(acks_late=True)
def provision_request(request_id: int) -> str:
    """Create an approved request's resources on Runpod. Runpod failures are recorded on the
    request (a person retries it), so the task itself only fails on bugs."""
    from labgov.provisioning.services import provisioning_run

    return provisioning_run(request_id=request_id).state


@shared_task
def expire_requests() -> int:
    from labgov.provisioning.services import requests_expire

    return requests_expire()


@shared_task
def resume_provisioning() -> int:
    from labgov.provisioning.services import provisioning_resume

    return provisioning_resume()
