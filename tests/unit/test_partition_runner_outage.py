"""The partition runner's outage detector and budget stop, on their own."""

from __future__ import annotations

import pytest

from spark_jobs.asyncwait import Failure, Result
from spark_jobs.enrichers import BudgetExhausted
from spark_jobs.partition_runner.budget import BudgetStop
from spark_jobs.partition_runner.outage import ApiOutageError, OutageDetector, retry_transient


def transient(n: int) -> Failure:
    return Failure(n, "ServerError: HTTP 503", attempts=3, transient=True)


def test_a_streak_of_transient_failures_is_held_until_a_success_breaks_it() -> None:
    detector = OutageDetector(threshold=3, partition=0)
    assert detector.take(transient(0)) == []
    assert detector.take(transient(1)) == []
    assert len(detector) == 2
    success = Result(2, {"score": 1})
    assert detector.take(success) == [transient(0), transient(1), success]
    assert len(detector) == 0


def test_a_permanent_failure_breaks_the_streak_too() -> None:
    detector = OutageDetector(threshold=3, partition=0)
    detector.take(transient(0))
    bad = Failure(1, "ValueError: no score", attempts=1)
    assert detector.take(bad) == [transient(0), bad]


def test_the_streak_reaching_the_threshold_is_an_outage_naming_the_partition() -> None:
    detector = OutageDetector(threshold=2, partition=7)
    detector.take(transient(0))
    with pytest.raises(ApiOutageError, match=r"partition 7: .* 2 records in a row .* HTTP 503"):
        detector.take(transient(1))
    assert detector.requeued() == [{"record": 0, "attempts": 0}, {"record": 1, "attempts": 0}]


def test_threshold_zero_never_holds_anything_back() -> None:
    detector = OutageDetector(threshold=0, partition=0)
    assert [detector.take(transient(n)) for n in range(3)] == [[transient(n)] for n in range(3)]


def test_release_gives_up_the_streak_as_outputs() -> None:
    detector = OutageDetector(threshold=5, partition=0)
    detector.take(transient(0))
    assert detector.release() == [transient(0)]
    assert detector.release() == [] and detector.requeued() == []


def test_after_an_outage_queued_transient_failures_are_called_again() -> None:
    entries = [
        {"record": 1, "attempts": 3, "error": "ServerError: 503", "transient": True},
        {"record": 2, "attempts": 1, "error": "ValueError: bad"},
        {"record": 3, "attempts": 1, "value": {"score": 1}},
        {"watermark": 10},
    ]
    assert retry_transient(entries) == [{"record": 1, "attempts": 0}, *entries[1:]]


async def test_the_budget_stop_notes_refused_calls_and_holds_only_their_outcomes() -> None:
    stop = BudgetStop()

    async def call(index: int) -> int:
        if index >= 2:
            raise BudgetExhausted("the run's request budget is spent")
        return index

    guarded = stop.guard(call)
    assert await guarded(1) == 1 and not stop.spent
    with pytest.raises(BudgetExhausted):
        await guarded(2)
    assert stop.spent
    refused = Failure(2, "BudgetExhausted: spent", attempts=1)
    assert stop.hold(refused) is True
    assert stop.hold(Failure(1, "ValueError: bad", attempts=1)) is False
    assert stop.hold(Result(3, 3)) is False
    # The refused call was never sent: it gives its attempt back.
    assert stop.requeued() == [{"record": 2, "attempts": 0}]
