"""What each partition attempt paid: one small record per attempt, for honest cost reports.

A manifest's counters describe the chain of attempts that led to it, counted up to each
one's last cut. Calls outside that chain were paid for all the same: an attempt killed
after its last cut, one killed before its first, a speculative twin whose manifests lost
to the other's, a zombie run's attempts before it was fenced off. Each attempt therefore
keeps its *own* counters in a file only it writes, rewritten at its start and at every
cut (a constant-size delta, whatever the number of cuts)::

    <namespace>/attempts/part-00003-<attempt>-<token8>.json

The token keeps apart attempts whose Spark ids repeat in another run. Summing the files
counts every attempt once, never twice, however its cuts were superseded; an attempt whose
last record is not ``final`` ended after it (killed, lost, fenced), so the sum is a lower
bound by at most what such attempts called since their last cut. One file per attempt,
read in one listing: the cost grows with retries, never with cuts.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fsspec import AbstractFileSystem

from .documents import ManifestError, parse_stored_json
from .paths import basename, encode_component, partition_dir_name
from .storage import list_entries, write_atomically

logger = logging.getLogger(__name__)

ATTEMPTS_DIR = "attempts"
#: An attempt record is a few hundred bytes: larger ones count as unreadable, unread.
MAX_RECORD_BYTES = 64 * 2**10
_NAME = re.compile(r"part-\d{5,}-(?:[A-Za-z0-9_.-]|%3A|%2B)+-[0-9a-f]{8}\.json")


@dataclass(frozen=True)
class AttemptCounts:
    """One attempt's own counters (``requests_made`` and calls saved), as of its last
    record; ``final`` when no call followed it (the attempt ended as it meant to)."""

    partition: int
    attempt: str
    run_id: str
    counters: Mapping[str, int] = field(default_factory=dict)
    final: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "counters", dict(self.counters))
        if not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in self.counters.items()
        ):
            raise ValueError(f"counters must map names to ints >= 0: {self.counters!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "attempt": self.attempt,
            "run_id": self.run_id,
            "counters": dict(self.counters),
            "final": self.final,
        }

    @classmethod
    def from_json(cls, document: Any) -> AttemptCounts:
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        return cls(
            partition=int(document["partition"]),
            attempt=str(document["attempt"]),
            run_id=str(document["run_id"]),
            counters=document["counters"],
            final=document["final"] is True,
        )


@dataclass(frozen=True)
class LedgerReading:
    """Every attempt record of a namespace, and how many files could not be read (each
    of those hides an attempt's calls, so the totals are lower bounds)."""

    records: tuple[AttemptCounts, ...]
    unreadable: int = 0


class AttemptLedger:
    """The attempt records of one namespace (``<namespace>/attempts/``)."""

    def __init__(self, fs: AbstractFileSystem, namespace_path: str) -> None:
        self._fs = fs
        self._directory = f"{namespace_path}/{ATTEMPTS_DIR}"

    def recorder(self, partition: int, attempt: str, run_id: str) -> AttemptRecorder:
        """The writer of one attempt's record: a file name no other attempt uses."""
        name = (
            f"{partition_dir_name(partition)}-{encode_component('attempt', attempt)}"
            f"-{uuid.uuid4().hex[:8]}.json"
        )
        return AttemptRecorder(self, name, partition, attempt, run_id)

    def write(self, name: str, counts: AttemptCounts) -> None:
        data = json.dumps(counts.to_json(), sort_keys=True).encode()
        write_atomically(self._fs, self._directory, name, data)

    def read(self) -> LedgerReading:
        """All records, in one listing and one batched read."""
        entries = [
            entry
            for entry in list_entries(self._fs, self._directory)
            if entry.get("type") == "file" and _NAME.fullmatch(basename(entry["name"]))
        ]
        paths = [e["name"] for e in entries if _small(e.get("size"))]
        for skipped in {e["name"] for e in entries} - set(paths):
            logger.warning("attempt record %s: over %d bytes, not read", skipped, MAX_RECORD_BYTES)
        contents = self._fs.cat(paths, on_error="return") if paths else {}
        records, unreadable = [], len(entries) - len(paths)
        for path, content in sorted(contents.items()):
            try:
                if isinstance(content, BaseException):
                    raise content
                records.append(AttemptCounts.from_json(parse_stored_json(content, path)))
            except (OSError, ManifestError, ValueError, KeyError, TypeError) as error:
                logger.warning("unreadable attempt record %s: %s", path, error)
                unreadable += 1
        return LedgerReading(tuple(records), unreadable)


@dataclass(frozen=True)
class AttemptRecorder:
    """Rewrites one attempt's record; only this attempt ever writes its file."""

    ledger: AttemptLedger
    name: str
    partition: int
    attempt: str
    run_id: str

    def write(self, counters: Mapping[str, int], *, final: bool) -> None:
        counts = AttemptCounts(self.partition, self.attempt, self.run_id, counters, final)
        self.ledger.write(self.name, counts)


def _small(size: object) -> bool:
    return isinstance(size, int) and size <= MAX_RECORD_BYTES
