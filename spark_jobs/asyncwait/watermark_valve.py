"""Combining watermarks and stream status of several input channels (Flink's
``StatusWatermarkValve``).

The output watermark is the minimum over channels that are active and aligned. An idle
channel is excluded, so a partition with no data does not hold event time back. A channel
that becomes active again rejoins the minimum (realigns) at once when its watermark is not
behind the last output, and the minimum is worked out again then (after ACTIVE, if the
output was idle); otherwise it realigns once a later watermark catches up, so the output
never goes backwards. When every channel is idle the output goes idle too, after flushing
to the maximum watermark of all channels, whichever channel went idle last and whether
it was aligned. A watermark equal to the last output is never emitted twice.

The realignment rules follow FLINK-40475: before it, a last-idle channel that was not
aligned skipped the flush, and a channel realigned on becoming active did not work out
the minimum again, so the output could stay behind until more data came.
"""

from __future__ import annotations

from dataclasses import dataclass

from .elements import MIN_WATERMARK, Watermark, WatermarkStatus


@dataclass
class _Channel:
    watermark: int = MIN_WATERMARK
    status: WatermarkStatus = WatermarkStatus.ACTIVE
    aligned: bool = True


class WatermarkValve:
    """Feed it per-channel watermarks and statuses; it returns what to emit downstream."""

    def __init__(self, channels: int) -> None:
        if channels < 1:
            raise ValueError(f"a valve needs at least one channel, got {channels}")
        self._channels = [_Channel() for _ in range(channels)]
        self.last_output_watermark = MIN_WATERMARK
        self.last_output_status = WatermarkStatus.ACTIVE

    def input_watermark(self, watermark: Watermark, channel: int) -> list[Watermark]:
        state = self._channel(channel)
        if self.last_output_status is WatermarkStatus.IDLE or state.status is WatermarkStatus.IDLE:
            return []  # an idle channel's watermarks are ignored until it is active again
        if watermark.timestamp > state.watermark:
            state.watermark = watermark.timestamp
            if not state.aligned and state.watermark >= self.last_output_watermark:
                state.aligned = True
        return self._new_min_over_aligned()

    def input_status(
        self, status: WatermarkStatus, channel: int
    ) -> list[Watermark | WatermarkStatus]:
        state = self._channel(channel)
        out: list[Watermark | WatermarkStatus] = []
        if status is WatermarkStatus.IDLE and state.status is WatermarkStatus.ACTIVE:
            state.status = WatermarkStatus.IDLE
            state.aligned = False
            if not any(c.status is WatermarkStatus.ACTIVE for c in self._channels):
                out += self._max_over_all()  # nothing will advance: flush
                self.last_output_status = WatermarkStatus.IDLE
                out.append(WatermarkStatus.IDLE)
            elif state.watermark == self.last_output_watermark:
                out += self._new_min_over_aligned()  # it may have been holding the output
        elif status is WatermarkStatus.ACTIVE and state.status is WatermarkStatus.IDLE:
            state.status = WatermarkStatus.ACTIVE
            if self.last_output_status is WatermarkStatus.IDLE:
                self.last_output_status = WatermarkStatus.ACTIVE
                out.append(WatermarkStatus.ACTIVE)
            if state.watermark >= self.last_output_watermark:
                state.aligned = True
                out += self._new_min_over_aligned()
        return out

    def _channel(self, channel: int) -> _Channel:
        if not 0 <= channel < len(self._channels):
            raise IndexError(f"channel {channel} out of range 0..{len(self._channels) - 1}")
        return self._channels[channel]

    def _new_min_over_aligned(self) -> list[Watermark]:
        aligned = [c.watermark for c in self._channels if c.aligned]
        if aligned and min(aligned) > self.last_output_watermark:
            self.last_output_watermark = min(aligned)
            return [Watermark(self.last_output_watermark)]
        return []

    def _max_over_all(self) -> list[Watermark]:
        highest = max(c.watermark for c in self._channels)
        if highest > self.last_output_watermark:
            self.last_output_watermark = highest
            return [Watermark(highest)]
        return []
