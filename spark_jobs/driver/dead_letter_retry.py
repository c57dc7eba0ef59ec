"""``--retry-dead-letters [CLASSES]``: enrich again only the dead letters of a run.

The *base* is the namespace's last result: the published output, or the result a
dead-letter ceiling rejected (kept beside the output as ``<output>.rejected``, never
published). The retry's input is the base's dead letters of the chosen error classes
(all by default), as the input columns they keep; it runs like any run, in a namespace of
its own (task id + ``.dead-letters``), so a crashed retry resumes and never touches the
original run's snapshots. Its output is the base's ``data/`` plus the newly enriched
rows, and the base's dead letters not chosen plus those that failed again, published in
one step: every record exactly once. Afterwards the original namespace is marked complete
with the merged summary, so a plain rerun of the job does not overwrite the retry.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from spark_jobs.defaults import DEAD_LETTER_RETRY_SUFFIX
from spark_jobs.driver.current_result import (
    NoDataError,
    PublishedResult,
    ResultPathError,
    read_result,
)
from spark_jobs.driver.input_reader import with_helper_columns
from spark_jobs.driver.publish import rejected_for
from spark_jobs.records.completion import CompletionRecord
from spark_jobs.records.summary import JobSummary
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.option_values import parse_error_classes
from spark_jobs.spec.spec_error import SpecError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ALL = "all"


def retry_namespace(key: NamespaceKey) -> NamespaceKey:
    return NamespaceKey(key.dag_id, key.task_id + DEAD_LETTER_RETRY_SUFFIX, key.interval_start)


def original_namespace(key: NamespaceKey) -> NamespaceKey:
    return NamespaceKey(
        key.dag_id, key.task_id.removesuffix(DEAD_LETTER_RETRY_SUFFIX), key.interval_start
    )


@dataclass
class DeadLetterRetry:
    """The base a retry starts from, and the rows it retries."""

    base: PublishedResult
    """The published output's result, or the rejected one's."""
    classes: list[str] | None
    frame: DataFrame
    """The chosen dead letters as input rows (with the runner's helper columns)."""

    @classmethod
    def open(cls, spark: SparkSession, spec: JobSpec) -> DeadLetterRetry:
        base = _base(spec.output)
        classes = parse_error_classes(spec.retry_dead_letters or ALL)
        try:
            dead = spark.read.parquet(base.dead_letters)
        except NoDataError as error:  # a run stopped by its budget: resume it instead
            raise SpecError(f"--retry-dead-letters: {error}") from None
        frame = dead.filter(_chosen(classes)).drop("error", "attempts")
        return cls(base, classes, with_helper_columns(frame, spec))

    def merge_into(self, spark: SparkSession, staging: str) -> None:
        """Add the base's data and its dead letters not retried to the staged output."""
        out = staging.rstrip("/")
        data = spark.read.parquet(self.base.data)
        data.write.mode("append").parquet(f"{out}/data")
        dead = spark.read.parquet(self.base.dead_letters)
        dead.filter(~_chosen(self.classes)).write.mode("append").parquet(f"{out}/dead_letters")

    def summary(self, retried: JobSummary) -> JobSummary:
        """The merged summary: the whole output's counts, and the retry's own."""
        base = JobSummary.from_json(self.base.summary, f"{self.base.location}: summary")
        summary = replace(
            retried,
            records_in=base.records_in,
            enriched=base.enriched + retried.enriched,
            dead_letters=base.dead_letters - retried.records_in + retried.dead_letters,
            dead_letter_retry={
                "classes": self.classes or ALL,
                "retried": retried.records_in,
                "enriched": retried.enriched,
                "dead_letters": retried.dead_letters,
                "base_run_id": base.run_id or None,
            },
        )
        if summary.records_in != summary.records_done:
            raise RuntimeError(f"records_in != enriched + dead_letters in {summary.to_json()}")
        return summary

    def close(self, store: SnapshotStore, key: NamespaceKey, completion: CompletionRecord) -> None:
        """After publishing (which removed a rejected base: its records are in the output
        now), the original namespace is complete with the merged result."""
        store.mark_completed(original_namespace(key), completion)


def original_fingerprint(store: SnapshotStore, key: NamespaceKey) -> str | None:
    """The fingerprint of the run whose dead letters are retried."""
    original = original_namespace(key)
    record = store.read_completed(original) or store.read_job_record(original)
    return record.fingerprint if record is not None else None


def _base(output: str) -> PublishedResult:
    """A rejected result when there is one (newer than any published output: a run that
    publishes removes it), else the published output. One whose summary names a folder
    outside the output is refused before anything is read: the retry publishes its rows."""
    for candidate in (rejected_for(output), output):
        try:
            return read_result(candidate)
        except FileNotFoundError:
            continue
        except ResultPathError as error:
            raise SpecError(f"--retry-dead-letters: {error}") from None
    raise SpecError(
        f"--retry-dead-letters: no result to retry under {output} (neither a published "
        f"output nor one rejected by --max-dead-letters)"
    )


def _chosen(classes: list[str] | None) -> Any:
    from pyspark.sql import functions as F

    if classes is None:
        return F.lit(True)
    return F.regexp_extract(F.col("error"), r"^(\w+)", 1).isin(classes)
