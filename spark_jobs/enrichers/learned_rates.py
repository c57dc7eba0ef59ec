"""What the last partition in this Python worker learned of an API's rate limit.

Spark reuses a Python worker for the tasks of one executor core one after another
(``spark.python.worker.reuse``, on by default), so the partition that starts in a worker
is usually the successor of one that has just found its share of the same limit. Slow
start from ``START_RATE`` would find it again, but it overshoots on the way, and the 429s
of that overshoot pause every partition sharing the limit for the server's
``Retry-After`` (a whole second of the limit at ``Retry-After: 1``). Starting at the share
the predecessor held costs nothing of the kind; the probe and ``STALE_HINT`` still find a
larger one if a neighbour has finished meanwhile.

A predecessor that never met the limit (a short partition, an API without one) ended
still in slow start; the rate it was accepted at is then no share but a floor, and its
successor goes on with slow start from there instead of from ``START_RATE``: otherwise
every partition of a fast API would spend its first seconds at a fraction of it (a
partition of 2 000 calls at 50 ms, capacity 100, ran at a third of raw aiohttp's rate).

Process memory only: no coordinator and nothing written. A rate older than
:data:`MAX_AGE_S` is forgotten (the neighbours it was shared with are gone by then).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import HttpEnricherConfig

MAX_AGE_S = 60.0
"""A learned rate is used by partitions starting within this long after it was learned."""


@dataclass(frozen=True)
class LearnedRate:
    """Requests/s a partition's calls were accepted at; ``limited``: a share of a limit
    it met (its last cut), else a rate it reached in slow start with no limit met."""

    rate: float
    limited: bool


_learned: dict[str, tuple[LearnedRate, float]] = {}  # key -> (the rate learned, when)


def key_for(config: HttpEnricherConfig) -> str:
    """What an API's rate limit is likely counted against: the URL template up to its
    path, and where the credential comes from (names, never a value)."""
    url = config.batch.url_template if config.batch is not None else config.url_template
    origin = "/".join((url or "").split("/", 3)[:3])
    credential = [config.token_env, config.token_file, *sorted(config.secret_headers.items())]
    return f"{origin} {credential!r}"


def remember(key: str, learned: LearnedRate, clock: Callable[[], float] = time.monotonic) -> None:
    """The rate a partition's requests to ``key`` were last accepted at, as it ends."""
    if learned.rate > 0:
        _learned[key] = (learned, clock())


def recall(key: str, clock: Callable[[], float] = time.monotonic) -> LearnedRate | None:
    """The rate remembered for ``key`` if it is recent enough to still be a fair share."""
    entry = _learned.get(key)
    if entry is None:
        return None
    learned, when = entry
    if clock() - when > MAX_AGE_S:
        del _learned[key]
        return None
    return learned
