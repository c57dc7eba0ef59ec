"""Runs that fail as a whole: the dead-letter ceiling and systemic stops, on their own."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from spark_jobs.driver.run_failures import dead_letter_ceiling, systemic_failure
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


def test_a_systemic_stop_of_this_run_fails_it_and_one_of_another_run_does_not() -> None:
    def part(stats):
        return SimpleNamespace(stats=stats)

    reason = "partition 1: systemic failure: 5 records in a row failed with X"
    partitions = [part({"run_id": "r2"}), part({"run_id": "r2", "systemic_failure": reason})]
    failure = systemic_failure(partitions, "r2")
    assert failure is not None and failure.exit_status == ExitStatus.SYSTEMIC_FAILURE
    assert failure.reason.startswith(reason) and "Nothing was published" in failure.reason
    assert systemic_failure(partitions, "r3") is None
