"""The partition's input as the operator sees it: row indexes and watermarks.

Rows wait in :class:`InputRows` under their index while their record is in the operator,
so snapshots hold only indexes (see the package docstring).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

import pyarrow as pa

from spark_jobs.asyncwait import BoundedOutOfOrdernessGenerator, OperatorSnapshot, Watermark
from spark_jobs.partition_runner.row_enrichment import EVENT_MS
from spark_jobs.spec.job_spec import JobSpec

Row = dict[str, Any]
IndexedRow = tuple[int, Row]
Element = IndexedRow | Watermark


def indexed_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[IndexedRow]:
    """(index, row) over the partition's input, one Arrow batch in memory at a time."""
    index = 0
    for batch in batches:
        for row in batch.to_pylist():
            yield index, row
            index += 1


def watermark_generator(spec: JobSpec) -> BoundedOutOfOrdernessGenerator | None:
    """The job's watermarks: with an event-time column, one every ``watermark_every`` rows."""
    if not spec.event_time_column:
        return None
    return BoundedOutOfOrdernessGenerator(
        int(spec.max_out_of_orderness * 1000), every=spec.watermark_every
    )


def with_watermarks(
    rows: Iterator[IndexedRow], generator: BoundedOutOfOrdernessGenerator | None
) -> Iterator[Element]:
    """Rows, with the watermarks ``generator`` makes of their event times (``EVENT_MS``).

    Deterministic in the rows, so a resumed run rebuilds the same element sequence and
    the operator's offset means the same position in it.
    """
    if generator is None:
        yield from rows
        return
    for element in rows:
        # Read before yielding: once emitted, the row dict becomes the output row and
        # loses its helper columns, which would make the sequence depend on timing.
        event_ms = element[1].get(EVENT_MS)
        yield element
        if event_ms is not None:
            watermark = generator.on_event(event_ms)
            if watermark is not None:
                yield watermark


class InputRows:
    """The rows of the records in the operator, by index, until their output takes them."""

    def __init__(self) -> None:
        self._rows: dict[int, Row] = {}

    def __getitem__(self, index: int) -> Row:
        return self._rows[index]

    def __len__(self) -> int:
        return len(self._rows)

    def pop(self, index: int) -> Row:
        return self._rows.pop(index)

    def skip(self, elements: Iterator[Element], restored: OperatorSnapshot) -> None:
        """Advance the input to the snapshot's offset, keeping the rows still pending."""
        wanted = {e["record"] for e in restored.entries if "record" in e}
        for element in islice(elements, restored.consumed):
            if type(element) is tuple and element[0] in wanted:
                self._rows[element[0]] = element[1]

    def admit(
        self, elements: Iterator[Element], stop: Callable[[], bool], ended: Callable[[], None]
    ) -> Iterator[Any]:
        """The operator's source: row indexes and watermarks, until ``stop()`` says so;
        ``ended()`` is called when they have all been read.

        Once the request budget is spent it ends early: the operator then drains the calls
        already sent, and the input offset marks where the next run goes on.
        """
        for element in elements:
            if stop():
                return
            if type(element) is tuple:
                self._rows[element[0]] = element[1]
                yield element[0]
            else:
                yield element
        ended()
