"""bench/cpu_all.py counts the CPU of a process its parent left behind (as Chromium's renderers
are left when Playwright closes the browser), which getrusage alone does not."""

import re
import subprocess
import sys
from pathlib import Path

CPU_ALL = Path(__file__).parents[2] / "bench" / "cpu_all.py"
# A parent that starts a child spinning for 0.3 CPU-s and exits without waiting for it.
ORPHAN = """import subprocess, sys
subprocess.Popen([sys.executable, "-c", '''import time
start = time.process_time()
while time.process_time() - start < 0.3:
    pass'''])"""


def test_an_orphans_cpu_is_counted():
    run = subprocess.run(
        [sys.executable, CPU_ALL, sys.executable, "-c", ORPHAN],
        capture_output=True,
        text=True,
        check=True,
    )
    used = float(re.search(r"cpu_all: ([\d.]+) CPU-s", run.stderr).group(1))
    assert used >= 0.3, run.stderr
