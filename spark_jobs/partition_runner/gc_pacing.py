"""Fewer garbage collections while a partition runs, when asked (``--gc-young-threshold``).

CPython starts a young-generation collection every 700 container allocations (and an
older one every 10 of those). A record in flight allocates a few hundred (its task,
coroutine frames, futures, request and response objects, its row and output dicts) and
lives for milliseconds, so at thousands of records a second a collection runs every few
records: each one walks the records in flight, promotes them, and the promoted ones
later cost full collections over everything the worker has imported (pyarrow, pyspark,
aiohttp). Where the worker's CPU is what limits a partition (an API answering in a few
milliseconds), a young threshold of 10 000 took about a fifth less CPU per record
(docs/performance.md, "Where a record's time goes"); where the API's latency limits it,
as it does for most APIs and every model endpoint, it bought nothing measurable. The
thresholds are the whole process's, so the job leaves them alone unless the option asks:
then they are raised while a partition runs and restored when the last partition running
in the process ends (Spark reuses its Python workers for other tasks; tests run several
runners in one process); a process that already collects less often is left as it is.
Cycles are still collected; a young generation of 10 000 objects is a few MB.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_running = 0  # blocks inside paced_collections(), in any thread
_before: tuple[int, int, int] = gc.get_threshold()  # the thresholds the first one found


@contextmanager
def paced_collections(young: int | None) -> Iterator[None]:
    """Collect the young generation every ``young`` allocations (never more often than
    the process already does) while any such block runs; the older generations keep
    their ratios to it. Blocks may overlap: the last to end restores the thresholds.
    ``young`` None (the default option): the process's thresholds are left alone."""
    global _running, _before
    if young is None:
        yield
        return
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
