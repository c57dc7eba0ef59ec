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

The thresholds are the process's, so they are restored when the partition ends (Spark
reuses its Python workers for other tasks); a process that switched the collector off
keeps it off.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Container allocations between two young-generation collections while a partition runs.
YOUNG_THRESHOLD = 10_000


@contextmanager
def paced_collections(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Collect the young generation every ``young`` allocations (never more often than
    the process already does) inside the block; the older generations keep their
    ratios to it."""
    thresholds = gc.get_threshold()
    gc.set_threshold(max(young, thresholds[0]), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
