import os

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "labgov.settings")

app = Celery("labgov")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Each task's writes are its own for the page cache's data versions (labgov/core/dataversion.py):
# it starts with no scope even when run eagerly inside a web request, and declares the
# institutions it writes for itself.
_unscoped: dict[str, list] = {}  # by task id: an eager retry runs again under the same id


@task_prerun.connect(dispatch_uid="labgov-task-data-version-scope")
def _task_starts_unscoped(task_id=None, **kwargs) -> None:
    from labgov.core import dataversion

    _unscoped.setdefault(task_id, []).append(dataversion.begin_unscoped())


@task_postrun.connect(dispatch_uid="labgov-task-data-version-scope-end")
def _task_ends(task_id=None, **kwargs) -> None:
    from labgov.core import dataversion

    tokens = _unscoped.get(task_id)
    if tokens:
        dataversion.end_unscoped(tokens.pop())
    if not tokens:
        _unscoped.pop(task_id, None)
