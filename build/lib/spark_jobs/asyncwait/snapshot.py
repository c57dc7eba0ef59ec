"""The operator's snapshot: what is still queued, as plain data, and how far the source was read.

Beyond Flink (which keeps only the inputs, calls again on restore and resets retry
counts), a snapshot entry keeps the outcome of a completed-but-not-emitted record, so
restore emits it without a call, and the attempts used, so the retry budget continues.
Emitted outputs are never in a snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .elements import Failure, Result, Watermark
from .queue_entry import QueueEntry, RecordEntry, WatermarkEntry


@dataclass(frozen=True)
class OperatorSnapshot:
    """``entries`` in queue order; ``consumed`` = source elements pulled since the start of
    the stream (across restores), i.e. the offset at which the source resumes."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    consumed: int = 0

    @classmethod
    def empty(cls) -> OperatorSnapshot:
        return cls()

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable whenever the records and values are."""
        return {"entries": list(self.entries), "consumed": self.consumed}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OperatorSnapshot:
        entries = data.get("entries", [])
        consumed = data.get("consumed", 0)
        if not isinstance(entries, list) or not isinstance(consumed, int) or consumed < 0:
            raise ValueError("operator snapshot needs a list 'entries' and an int 'consumed' >= 0")
        for position, entry in enumerate(entries):
            if not isinstance(entry, dict) or not ("watermark" in entry or "record" in entry):
                raise ValueError(f"snapshot entry {position} is neither a record nor a watermark")
        return cls(entries=entries, consumed=consumed)


def encode_entry(entry: QueueEntry) -> dict[str, Any]:
    if isinstance(entry, WatermarkEntry):
        return {"watermark": entry.watermark.timestamp}
    encoded: dict[str, Any] = {"record": entry.record, "attempts": entry.attempts}
    if isinstance(entry.outcome, Result):
        encoded["value"] = entry.outcome.value
    elif isinstance(entry.outcome, Failure):
        encoded["error"] = entry.outcome.error
        if entry.outcome.transient:
            encoded["transient"] = True
    return encoded


def decode_entry(encoded: dict[str, Any]) -> QueueEntry:
    if "watermark" in encoded:
        return WatermarkEntry(Watermark(encoded["watermark"]))
    record, attempts = encoded["record"], int(encoded.get("attempts", 0))
    entry = RecordEntry(record, attempts=attempts)
    if "value" in encoded:
        entry.outcome = Result(record, encoded["value"], attempts)
    elif "error" in encoded:
        entry.outcome = Failure(record, encoded["error"], attempts, encoded.get("transient", False))
    return entry
