"""Sending again the stragglers a partition ends on: Spark's speculation, for calls.

Once a partition's input has ended, its task can only wait for the calls still out. One
answer whose body stalls then holds the task, and the executor's task slot with it,
until the read-stall deadline (``read_timeout``, 3 s by default) passes: under a rate
limit that slot's share goes unused, and in the rate-limited benchmark such tails were
2-3 s of a 40 s partition at almost no calls. Spark launches a second copy of a task far
slower than the rest of its stage (``spark.speculation``); here, once the input has
ended, an attempt that has gone silent (no header, no byte) for ``SILENCE_FACTOR`` x the
p99 of the partition's recent answer times, and at least ``MIN_SILENCE_S``, is cut and
retried at once, as the read-stall deadline would have done later.

Before the input ends nothing is cut: other records keep the slot busy, and only the
read-stall deadline applies. An attempt still receiving bytes is never cut, however long
its body takes; without ``MIN_ANSWERS`` answers to judge by, nothing is; nor right after
the event loop itself was held up, when the silence may be answers not yet read. The cut spends
the attempt like any stall, so an API that answers everyone slowly at the end still runs
out of attempts, not into a loop.
"""

from __future__ import annotations

import asyncio
from collections import deque

from spark_jobs.asyncwait import Deadline

SILENCE_FACTOR = 4.0
"""An attempt silent this many times the p99 answer time is a straggler..."""
MIN_SILENCE_S = 0.25
"""...and silent at least this long (a fast API's p99 says little about a pause)."""
MIN_ANSWERS = 20
"""Answers needed before the p99 means anything."""
ANSWER_SAMPLES = 256
"""Recent answer times kept: the p99 follows the API as it is now."""
CHECK_S = 0.05
"""How often the attempts in flight are looked at once the input has ended."""


class AttemptProgress:
    """One attempt in flight: when it last heard from the server, and its deadline."""

    __slots__ = ("cut_after", "heard_at", "timer")

    def __init__(self, timer: Deadline, heard_at: float) -> None:
        self.timer = timer
        self.heard_at = heard_at
        self.cut_after: float | None = None
        """The silence it was cut after, as a straggler; None while it is not cut."""

    def heard(self, now: float) -> None:
        """Headers or a chunk arrived: the attempt is alive (a cut not yet fired is off:
        the caller moves the deadline on)."""
        self.heard_at = now
        self.cut_after = None


class StragglerWatch:
    """The attempts in flight of one enricher, cut once its input has ended and they
    fall silent (see the module docstring)."""

    def __init__(self) -> None:
        self._attempts: dict[AttemptProgress, None] = {}
        self._answer_times: deque[float] = deque(maxlen=ANSWER_SAMPLES)
        self._watcher: asyncio.Task[None] | None = None

    def begin(self, timer: Deadline, now: float) -> AttemptProgress:
        """An attempt under ``timer`` (entered) was sent at ``now`` (the loop's clock)."""
        progress = AttemptProgress(timer, now)
        self._attempts[progress] = None
        return progress

    def end(self, progress: AttemptProgress) -> None:
        del self._attempts[progress]

    def answered(self, seconds: float) -> None:
        """A whole answer took ``seconds`` from its send."""
        self._answer_times.append(seconds)

    def input_ended(self) -> None:
        """The partition's input has ended: from now on, stragglers are cut."""
        if self._watcher is None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def aclose(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    def silence_limit(self) -> float | None:
        """How long an attempt may be silent before it is a straggler; None without
        enough answers to judge by."""
        times = self._answer_times
        if len(times) < MIN_ANSWERS:
            return None
        ordered = sorted(times)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return max(MIN_SILENCE_S, SILENCE_FACTOR * p99)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        checked = loop.time()
        while True:
            await asyncio.sleep(CHECK_S)
            now, last = loop.time(), checked
            checked = now
            if now - last > 2 * CHECK_S:
                # The loop itself was held up (a busy machine, a long callback): answers
                # may be waiting in their sockets unread. That silence is ours; look
                # again once they have been read.
                continue
            limit = self.silence_limit()
            if limit is None:
                continue
            for progress in self._attempts:
                if progress.cut_after is None and now - progress.heard_at > limit:
                    progress.cut_after = limit
                    progress.timer.move(now)  # fires within the wheel's tick
