"""Runs that fail as a whole: the dead-letter ceiling and systemic stops, on their own."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from spark_jobs.driver.run_failures import dead_letter_ceiling, nothing_enriched, systemic_failure
from spark_jobs.exit_status import ExitStatus
from spark_jobs.records.summary import JobSummary
from spark_jobs.spec.failure_options import dead_letter_limit
from spark_jobs.spec.spec_error import SpecError


@pytest.mark.parametrize(
    ("ceiling", "records", "limit"),
    [("10", 1000, 10), (10, 1000, 10), ("2%", 1000, 20), ("0.5%", 1000, 5), ("0", 9, 0)],
)
def test_a_ceiling_is_a_count_or_a_share_of_the_input(ceiling, records, limit) -> None:
    assert dead_letter_limit(ceiling, records) == limit


@pytest.mark.parametrize("ceiling", ["ten", "-1", "101%", "1.5", "5 %%"])
def test_a_bad_ceiling_names_the_option(ceiling) -> None:
    with pytest.raises(SpecError, match="--max-dead-letters"):
        dead_letter_limit(ceiling, 100)


def test_crossing_the_ceiling_fails_saying_why_and_keeps_the_counts() -> None:
    summary = JobSummary(records_in=200, enriched=180, dead_letters=20)
    assert dead_letter_ceiling(summary, "10%") is None, "equal to the ceiling is allowed"
    assert dead_letter_ceiling(summary, None) is None
    failure = dead_letter_ceiling(summary, "19")
    assert failure is not None and failure.exit_status == ExitStatus.DEAD_LETTER_CEILING
    assert "20 dead letters of 200 records, more than --max-dead-letters 19" in failure.reason
    assert failure.summary == replace(summary, failed=failure.reason)


def test_a_run_that_enriched_nothing_fails_naming_an_error_and_one_record_enriched_passes():
    error = "TransportError: GET http://api/customers/k1: ClientConnectorError: refused"
    failure = outcome(enriched=0, dead_letters=60, error=error)
    assert failure is not None and failure.exit_status == ExitStatus.DEAD_LETTER_CEILING
    assert failure.reason.startswith("nothing enriched: all 60 records are dead letters (one: ")
    assert error in failure.reason and "--retry-dead-letters" in failure.reason
    assert failure.summary is not None and failure.summary.failed == failure.reason
    assert outcome(enriched=1, dead_letters=59, error=error) is None
    assert outcome(enriched=0, dead_letters=0, error=None) is None  # an empty input
    cut = outcome(enriched=0, dead_letters=1, error="x" * 10_000)  # the API's text: cut
    assert cut is not None and len(cut.reason) < 800
    table = outcome(enriched=0, dead_letters=1, error=None, retryable=False)
    assert table is not None and "--resume never" in table.reason  # no retry for a table
    assert "resume param set to never" in table.retry


def outcome(*, enriched, dead_letters, error, retryable=True):
    summary = JobSummary(
        records_in=enriched + dead_letters, enriched=enriched, dead_letters=dead_letters
    )
    return nothing_enriched(summary, error, retryable=retryable)


def test_a_systemic_stop_of_this_run_fails_it_and_one_of_another_run_does_not() -> None:
    def part(stats):
        return SimpleNamespace(stats=stats)

    reason = "partition 1: systemic failure: 5 records in a row failed with X"
    partitions = [part({"run_id": "r2"}), part({"run_id": "r2", "systemic_failure": reason})]
    failure = systemic_failure(partitions, "r2")
    assert failure is not None and failure.exit_status == ExitStatus.SYSTEMIC_FAILURE
    assert failure.reason.startswith(reason) and "Nothing was published" in failure.reason
    assert systemic_failure(partitions, "r3") is None
