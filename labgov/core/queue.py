"""Queue a Celery task, by its dotted name, for when the current transaction commits.

Services queue their follow-up work through this rather than importing their app's `tasks`
module, which imports the services: tasks call services, never the other way round."""

from django.db import transaction
from django.utils.module_loading import import_string


def task_enqueue_on_commit(task: str, *args) -> None:
    """`robust`: a broker that is down is logged by Django, and never undoes the commit."""
    transaction.on_commit(lambda: import_string(task).delay(*args), robust=True)
