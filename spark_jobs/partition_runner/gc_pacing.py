"""Fewer garbage collections while a partition runs: a fifth of the worker's CPU was them.

CPython starts a young-generation collection every 700 container allocations (and an
older one every 10 of those). A record in flight allocates a few hundred (its task,
coroutine frames, futures, request and response objects, its row and output dicts) and
lives for milliseconds, so at thousands of records a second a collection ran every few
records: each one walks the records in flight, promotes them, and the promoted ones
later cost full collections over everything the worker has imported (pyarrow, pyspark,
aiohttp). ``profile_job`` (30 000 records, 2 ms API, capacity 64) measured 0.089-0.101
CPU s per 1 000 records with the default thresholds and 0.074-0.077 with 10 000: the
collections were 15-20 % of the Python worker's time. Cycles are still collected; a
young generation of 10 000 objects is a few MB.

The thresholds are the process's, so they are restored when the last partition running
in the process ends (Spark reuses its Python workers for other tasks; tests run several
runners in one process); a process that already collects less often is left as it is.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Container allocations between two young-generation collections while a partition runs.
YOUNG_THRESHOLD = 10_000

_lock = threading.Lock()
_running = 0  # blocks inside paced_collections(), in any thread
_before: tuple[int, int, int] = gc.get_threshold()  # the thresholds the first one found


@contextmanager
def paced_collections(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Collect the young generation every ``young`` allocations (never more often than
    the process already does) while any such block runs; the older generations keep
    their ratios to it. Blocks may overlap: the last to end restores the thresholds."""
    global _running, _before
    with _lock:
        if _running == 0:
            _before = gc.get_threshold()
            gc.set_threshold(max(young, _before[0]), *_before[1:])
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1
            if _running == 0:
                gc.set_threshold(*_before)
