"""Run a command while busy loops keep every core loaded, as CI and users' machines are.

``make test-under-load`` runs its ``LOADED_TESTS`` (the scheduler's, the rate-limited
job's) this way ``RUNS`` times: a test that waits for the state a user would see passes;
one that waits for luck does not, and a rate controller that works only on an idle
machine shows it.
"""

from __future__ import annotations

import os
import subprocess
import sys


def run_loaded(command: list[str]) -> int:
    """``command``'s exit status, run beside one busy loop per core (stopped after)."""
    loops = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        return subprocess.call(command)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


if __name__ == "__main__":
    sys.exit(run_loaded(sys.argv[1:]))
