import datetime as dt

from labgov.utilization.models import Sample
from labgov.utilization.recording import hour_of, hours_rebuild
from tests.alerts.conftest import account, clock  # noqa: F401 - fixtures shared with alerts

FIVE_MINUTES = dt.timedelta(minutes=5)


def samples(
    pod, start: dt.datetime, end: dt.datetime, util: int, mem: int | None = None, *, busy=None
):
    """A sample every five minutes in [start, end), every GPU at `util` % (memory `mem` %),
    with the hourly aggregates they make."""
    gpus = pod.gpu_count or 1
    mem = util if mem is None else mem
    busy = gpus if busy is None else busy  # GPUs at `util`; the others at 0
    rows, t = [], start
    while t < end:
        rows.append(
            Sample(
                resource=pod,
                at=t,
                gpus=gpus,
                util_sum=util * busy,
                util_max=util if busy else 0,
                mem_sum=mem * busy,
                mem_max=mem if busy else 0,
                busy_gpus=busy if util >= 10 else 0,
            )
        )
        t += FIVE_MINUTES
    Sample.objects.bulk_create(rows, ignore_conflicts=True)
    hour = hour_of(start)
    while hour < end:
        hours_rebuild(resource_ids=[pod.pk], hour=hour)
        hour += dt.timedelta(hours=1)
    return rows
