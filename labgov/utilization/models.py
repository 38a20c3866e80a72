"""GPU utilization of running pods, as Runpod reports it (`Pod.runtime`).

Two tables, both keyed by (resource, time) with no other index, so they cost one B-tree each:
raw samples, one per poll per running GPU pod, kept for LABGOV_UTILIZATION_RAW_DAYS; and hourly
aggregates, kept as long as billing. Readings are whole percents summed over the GPUs that
reported, so a mean is exact integer arithmetic (sum / readings) and never a float.
"""

from django.db import models


class Sample(models.Model):
    """One reading of one running pod: its GPUs' utilization and memory utilization, summed
    over the GPUs Runpod reported (`gpus`, which may be fewer than the pod has)."""

    pk = models.CompositePrimaryKey("resource", "at")
    resource = models.ForeignKey(
        "runpod.Resource",
        # Removing a mistaken connection removes its resources and, with them, their samples
        # (one DELETE by resource, no rows fetched).
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    at = models.DateTimeField()
    gpus = models.PositiveSmallIntegerField()  # GPUs that reported a utilization
    util_sum = models.PositiveSmallIntegerField()
    util_max = models.PositiveSmallIntegerField()
    mem_sum = models.PositiveSmallIntegerField()
    mem_max = models.PositiveSmallIntegerField()
    busy_gpus = models.PositiveSmallIntegerField()

    def __str__(self) -> str:
        return f"{self.resource_id} {self.at:%Y-%m-%d %H:%M} {self.util_mean:.0f}%"

    @property
    def util_mean(self) -> float:
        return self.util_sum / self.gpus if self.gpus else 0.0

    @property
    def mem_mean(self) -> float:
        return self.mem_sum / self.gpus if self.gpus else 0.0


class Hour(models.Model):
    """The samples of one pod in one UTC hour [hour, hour + 1 h)."""

    pk = models.CompositePrimaryKey("resource", "hour")
    resource = models.ForeignKey(
        "runpod.Resource",
        # Removing a mistaken connection removes its resources and, with them, their samples
        # (one DELETE by resource, no rows fetched).
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    hour = models.DateTimeField()
    samples = models.PositiveIntegerField()
    readings = models.PositiveIntegerField()  # GPU readings: the sum of the samples' `gpus`
    util_sum = models.PositiveIntegerField()
    util_max = models.PositiveSmallIntegerField()
    mem_sum = models.PositiveIntegerField()
    mem_max = models.PositiveSmallIntegerField()
    busy_gpus_sum = models.PositiveIntegerField()
    busy_gpus_max = models.PositiveSmallIntegerField()

    def __str__(self) -> str:
        return f"{self.resource_id} {self.hour:%Y-%m-%d %H}h"


class WorkerReading(models.Model):
    """One reading of a serverless endpoint's workers (Runpod's worker summary), taken by the
    sync for each endpoint that keeps always-on workers (`workers_min` > 0): how many ran a
    job and how many waited idle, billing all the same."""

    pk = models.CompositePrimaryKey("resource", "at")
    resource = models.ForeignKey(
        "runpod.Resource",
        # As samples: removing a mistaken connection removes its endpoints' readings.
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    at = models.DateTimeField()
    workers_min = models.PositiveSmallIntegerField()
    running = models.PositiveSmallIntegerField()
    idle = models.PositiveSmallIntegerField()
    total = models.PositiveSmallIntegerField()

    def __str__(self) -> str:
        return f"{self.resource_id} {self.at:%Y-%m-%d %H:%M} {self.running}/{self.total} running"
