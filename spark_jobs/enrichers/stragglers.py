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

Only once it has been overtaken: an attempt sent after it has been answered, so the
server is answering, just not this one; its silence counts from the later of its last
sign of life and the moment that was seen. A server that pauses for everyone (a GC
pause, a CPU it shares, a restart) leaves every attempt in flight silent at once, and
cutting them all would only pay for each call twice when it comes back (a run stopped
short of its ``--max-requests`` that way, on a loaded CI machine).

Before the input ends nothing is cut: other records keep the slot busy, and only the
read-stall deadline applies. An attempt still receiving bytes is never cut, however long
its body takes; without ``MIN_ANSWERS`` answers to judge by, nothing is; nor right after
the event loop itself was held up, when the silence may be answers not yet read. The cut spends
the attempt like any stall, so an API that answers everyone slowly at the end still runs
out of attempts, not into a loop.

Opt-in (``resend_stragglers``), for idempotent methods only, as hedging is: the cut call
has usually reached the provider, which bills it, so its resend pays for the call twice,
and a POST (every model call) may act twice. Without it the sender makes no watch at all.
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

    __slots__ = ("cut_after", "heard_at", "overtaken_at", "sent", "timer")

    def __init__(self, timer: Deadline, heard_at: float, sent: int) -> None:
        self.timer = timer
        self.heard_at = heard_at
        self.sent = sent
        """Its place in the order the enricher's attempts were sent (1 for the first)."""
        self.overtaken_at: float | None = None
        """When the watch saw an attempt sent after it answered; None before."""
        self.cut_after: float | None = None
        """The silence it was cut after, as a straggler; None while it is not cut."""

    def silent_since(self) -> float | None:
        """When its silence began to count as a straggler's; None while not overtaken."""
        if self.overtaken_at is None:
            return None
        return max(self.heard_at, self.overtaken_at)

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
        self._sent = 0  # attempts begun so far
        self._latest_answered = 0  # the latest sent of the attempts answered (0: none)

    def begin(self, timer: Deadline, now: float) -> AttemptProgress:
        """An attempt under ``timer`` (entered) was sent at ``now`` (the loop's clock)."""
        self._sent += 1
        progress = AttemptProgress(timer, now, self._sent)
        self._attempts[progress] = None
        return progress

    def end(self, progress: AttemptProgress, answered: bool) -> None:
        """The attempt is over; ``answered``: with a whole reply, whatever its status."""
        del self._attempts[progress]
        if answered:
            self._latest_answered = max(self._latest_answered, progress.sent)

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
                if progress.overtaken_at is None and progress.sent < self._latest_answered:
                    progress.overtaken_at = now
                since = progress.silent_since()
                if progress.cut_after is None and since is not None and now - since > limit:
                    progress.cut_after = limit
                    progress.timer.move(now)  # fires within the wheel's tick
