from celery import shared_task

from labgov.exports.services import export_job_run, export_jobs_expire


@shared_task(ignore_result=True)
def run_export_job(job_id: int) -> None:
    export_job_run(job_id)


@shared_task(ignore_result=True)
def expire_exports() -> None:
    export_jobs_expire()
