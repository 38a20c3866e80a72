"""What the benchmarks read of their processes: CPU seconds from /proc (PostgreSQL, the
simulator and the servers run on this machine), and stopping a server's process group."""

import os
import signal
import subprocess
from pathlib import Path


def _stat_fields(path) -> list[str] | None:
    """A /proc/<pid>/stat's fields from the state on (proc(5), field 3); None when gone."""
    try:
        return Path(path).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user and system) a process has used, 0 when it is gone."""
    fields = None if pid is None else _stat_fields(f"/proc/{pid}/stat")
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_group_cpu(group: int) -> float:
    """CPU seconds used so far by the live processes of a process group: a server's master
    and workers, which live through a wrk run."""
    ticks = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(Path(entry.path, "stat"))
            if fields is not None and int(fields[2]) == group:
                ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to a server started in a session of its own, SIGKILL if it lingers."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)


def machine_cpu() -> tuple[float, float]:
    """(busy, idle) core-seconds of the whole machine so far, from /proc/stat (iowait counts
    as idle): the difference over a run tells how much of the cores it left unused."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, idle, iowait, irq, softirq = (int(f) for f in fields[:7])
    hz = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / hz, (idle + iowait) / hz


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def rss_mb() -> float:
    """This process's resident memory now, in MB."""
    return _status_kb("VmRSS") / 1024


def peak_reset() -> None:
    """Start this process's resident peak (VmHWM) again from now (proc(5): clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_mb() -> float:
    """This process's resident peak since it started or since peak_reset, in MB."""
    return _status_kb("VmHWM") / 1024
