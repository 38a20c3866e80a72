"""An empty simulator with pods made for the idle tests, and their rows in labgov, so a test
can move both clocks together and poll utilization the way the schedule does."""

import datetime as dt
from decimal import Decimal as D

import time_machine

from labgov.idle.policy import autostop_run
from labgov.utilization.poll import utilization_poll
from tests.factories import ResourceFactory, RunpodAccountFactory

H100 = "NVIDIA H100 80GB HBM3"


def sim_pod(sim, account, allocation, name: str, *, gpus=8, mounts=None, idle_from=None):
    """A running pod on the simulator (its GPUs idle from `idle_from`), and labgov's row of
    it, paid by `allocation`, as a sync would have left it."""
    body = {"name": name, "image": "img", "gpu": {"id": H100, "count": gpus}, "cloud": "SECURE"}
    if mounts:
        body["mounts"] = mounts
    pod = sim.state.create_pod(body)
    sim.advance(seconds=61)
    listed = sim.state.get_pod(pod["id"])
    if idle_from is not None:
        sim.state.set_utilization(pod["id"], "idle_from", idle_from)
    persistent = (mounts or {}).get("persistent") or {}
    network = (mounts or {}).get("network") or [{}]
    return ResourceFactory(
        account=account,
        kind="pod",
        runpod_id=pod["id"],
        name=name,
        status="RUNNING",
        gpu_type_id=H100,
        gpu_count=gpus,
        cost_per_hr_usd=D(str(listed["cost"])),
        volume_disk_gb=persistent.get("size", 0),
        network_volume_id=network[0].get("volumeId", ""),
        container_disk_gb=50,
        current_allocation=allocation,
        details={"started_at": listed["startedAt"].replace("Z", "+00:00")},
    )


def sim_connection(world, sim):
    return RunpodAccountFactory(institution=world.institution, base_url=sim.base_url)


class _Borrowed:
    def __init__(self, client):
        self.client = client

    def __enter__(self):
        return self.client

    def __exit__(self, *exc):
        return False


class Clocks:
    """labgov's clock (time-machine) and the simulator's, moved together; every step polls
    utilization and applies the auto-stop policies, as the five-minute schedule would."""

    def __init__(self, sim, account, factory, start: dt.datetime, *, travel=True):
        self.sim, self.account = sim, account
        # One client for every step: building one costs an SSL context (~0.1 s).
        self.client = factory(account)
        self.factory = lambda _account: _Borrowed(self.client)
        self.now = start
        # Without travel (a browser test: Playwright needs the real clock) labgov's clock is
        # left alone and every step passes its time explicitly.
        self._travel = time_machine.travel(start, tick=False) if travel else None
        self._traveller = self._travel.start() if travel else None
        sim.set_now(start)

    def stop(self):
        self.client.close()
        if self._travel is not None:
            self._travel.stop()

    def step_to(self, until: dt.datetime, every=dt.timedelta(minutes=15)) -> dict:
        counts: dict = {}
        while self.now < until:
            self.now = min(self.now + every, until)
            self.sim.set_now(self.now)
            if self._traveller is not None:
                self._traveller.move_to(self.now)
            utilization_poll(account=self.account, client_factory=self.factory, now=self.now)
            result = autostop_run(
                institution_id=self.account.institution_id,
                now=self.now,
                client_factory=self.factory,
            )
            for key, value in result.items():
                counts[key] = counts.get(key, 0) + value
        return counts
