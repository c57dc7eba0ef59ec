"""What the demo API's customer endpoints have seen: the tests' view of the upstream."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Any


class Stats:
    """Counts of customer requests since start or the last reset.

    ``total`` and ``by_status`` count HTTP requests, so a batch counts once; ``per_key``
    counts ids, so a batch adds one for each id it names - that is what tells a test
    whether the pipeline asked for a key again. Requests rejected by auth count in
    ``total``/``by_status`` but not ``per_key`` (their body is never read). Connections
    broken at the wire level are counted under the fault's name instead of a status:
    ``"dropped"``, ``"stall"``, ``"bad_chunk"``, ``"truncated"`` or ``"reset"``. Answers
    of the rate limit (429) count like auth's. ``per_second`` splits ``by_status`` by the
    whole second since start or reset: what a throughput figure after warm-up needs.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total = 0
        self.per_key: Counter[str] = Counter()
        self.by_status: Counter[str] = Counter()
        self.per_second: Counter[tuple[int, str]] = Counter()
        self._started = time.monotonic()

    def record(self, status: int | str, ids: Iterable[str]) -> None:
        self.total += 1
        self.by_status[str(status)] += 1
        self.per_second[int(time.monotonic() - self._started), str(status)] += 1
        self.per_key.update(ids)

    def snapshot(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "per_key": dict(self.per_key),
            "by_status": dict(self.by_status),
            "per_second": self._per_second(),
        }

    def _per_second(self) -> dict[str, dict[str, int]]:
        seconds: dict[str, dict[str, int]] = {}
        for (second, status), count in sorted(self.per_second.items()):
            seconds.setdefault(str(second), {})[status] = count
        return seconds
