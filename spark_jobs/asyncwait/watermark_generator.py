"""Bounded-out-of-orderness watermarks (Flink's ``BoundedOutOfOrdernessWatermarks``).

Events may arrive up to ``bound`` late; the watermark trails the highest event time seen
by that bound. It is emitted periodically (every ``every`` records) rather than per
record, because each watermark costs a queue slot and an ordering barrier downstream.
"""

from __future__ import annotations

from .elements import MIN_WATERMARK, Watermark


class BoundedOutOfOrdernessGenerator:
    def __init__(self, bound: int, every: int = 100) -> None:
        if bound < 0:
            raise ValueError(f"out-of-orderness bound must be >= 0, got {bound}")
        if every < 1:
            raise ValueError(f"watermark interval must be >= 1 record, got {every}")
        self.bound = bound
        self.every = every
        self.max_event_time = MIN_WATERMARK
        self.last_emitted = MIN_WATERMARK
        self._since_emit = 0

    @property
    def current(self) -> int:
        """The watermark as of now: max event time seen minus the bound."""
        if self.max_event_time == MIN_WATERMARK:
            return MIN_WATERMARK
        return self.max_event_time - self.bound

    def on_event(self, event_time: int) -> Watermark | None:
        """Observe one record; every ``every`` records return a watermark if it advanced."""
        self.max_event_time = max(self.max_event_time, event_time)
        self._since_emit += 1
        if self._since_emit < self.every:
            return None
        self._since_emit = 0
        return self.on_periodic_emit()

    def on_periodic_emit(self) -> Watermark | None:
        """The current watermark if it moved past the last one emitted."""
        current = self.current
        if current > self.last_emitted:
            self.last_emitted = current
            return Watermark(current)
        return None
