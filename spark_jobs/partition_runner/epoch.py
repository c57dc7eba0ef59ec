"""The epoch buffer: outputs since the last committed snapshot.

Output rows gather until a batch is full (or a cut is due); each batch goes to Spark and,
split into results and dead letters, into the epoch that the next cut commits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.asyncwait import Failure, Result
from spark_jobs.partition_runner.row_enrichment import HELPER_COLUMNS

ERROR_COLUMN = "_error"
ATTEMPTS_COLUMN = "_attempts"
OUTPUT_BATCH_ROWS = 2_000


@dataclass
class Epoch:
    """Outputs emitted since the last committed snapshot, split by kind."""

    results: list[pa.RecordBatch] = field(default_factory=list)
    dead_letters: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0  # counted as batches come: asked after every output

    def add(self, batch: pa.RecordBatch) -> None:
        """Keep ``batch``'s rows, split into results and dead letters."""
        failed = batch.column(ERROR_COLUMN).is_valid()
        self.results.append(batch.filter(pc.invert(failed)))
        self.dead_letters.append(batch.filter(failed))
        self.rows += batch.num_rows


def output_row(
    row: dict[str, Any], output: Result | Failure, fields: Iterable[str]
) -> dict[str, Any]:
    """The input ``row`` turned into its output: enrichment ``fields`` (or ``_error``)."""
    for helper in HELPER_COLUMNS:
        row.pop(helper, None)
    if isinstance(output, Failure):
        row.update(dict.fromkeys(fields))
        row[ERROR_COLUMN] = output.error
    else:
        row.update(output.value)
        row[ERROR_COLUMN] = None
    row[ATTEMPTS_COLUMN] = output.attempts
    return row


class EpochBuffer:
    """Output rows not yet in a batch, and the batches of the current epoch."""

    def __init__(self, schema: pa.Schema, enrichment_fields: list[str]) -> None:
        self.schema = schema
        self.enrichment_fields = enrichment_fields
        self.rows: list[dict[str, Any]] = []
        self.epoch = Epoch()

    def add(self, row: dict[str, Any], output: Result | Failure) -> None:
        self.rows.append(output_row(row, output, self.enrichment_fields))

    @property
    def batch_full(self) -> bool:
        return len(self.rows) >= OUTPUT_BATCH_ROWS

    def flush(self) -> pa.RecordBatch:
        """The waiting rows as one batch for Spark, kept in the epoch by kind."""
        batch = pa.RecordBatch.from_pylist(self.rows, schema=self.schema)
        self.rows = []
        self.epoch.add(batch)
        return batch

    def take_epoch(self) -> Epoch:
        """The epoch for a cut; the next one starts empty."""
        epoch, self.epoch = self.epoch, Epoch()
        return epoch
