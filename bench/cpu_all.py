"""The CPU seconds a command and every process it starts used, orphans included:
`python bench/cpu_all.py pytest tests/core/test_a11y_browser.py`.

getrusage(RUSAGE_CHILDREN) and `/usr/bin/time` count only descendants their parents waited
for. Chromium's zygote and renderers outlive the browser process Playwright closes: they are
handed to init, and their CPU is counted nowhere (the a11y module: 101 CPU-s by
/usr/bin/time, 248 here). This process makes itself the subreaper of its descendants
(prctl PR_SET_CHILD_SUBREAPER), so the orphans are handed to it, and it waits for them all."""

import ctypes
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def main(command: list[str]) -> int:
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    started = time.monotonic()
    returncode = subprocess.call(command)
    while True:  # the orphans handed to this process
        try:
            os.wait()
        except ChildProcessError:
            break
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"cpu_all: {used.ru_utime + used.ru_stime:.1f} CPU-s ({used.ru_utime:.1f} user, "
        f"{used.ru_stime:.1f} system) in {time.monotonic() - started:.1f} s, load {load}",
        file=sys.stderr,
    )
    return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
