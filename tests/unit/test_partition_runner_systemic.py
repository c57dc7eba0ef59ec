"""The partition runner's systemic-failure detector, on its own."""

from __future__ import annotations

from spark_jobs.asyncwait import Failure, Result
from spark_jobs.partition_runner.systemic import (
    SystemicDetector,
    credentials_hint,
    failure_kind,
)

HINT = credentials_hint({"secret_headers": {"X-Api-Key": "GEO_KEY"}})


def status(n: int, code: int) -> Failure:
    return Failure(n, f"ClientStatusError: HTTP {code} from POST http://api/x: 'no'", attempts=1)


def missing(n: int) -> Failure:
    return Failure(n, "MissingFieldError: body_template names 'stret', not in record", 1)


def test_the_kind_is_the_class_and_status_and_transient_failures_have_none() -> None:
    assert failure_kind(status(0, 403)) == "ClientStatusError HTTP 403"
    assert failure_kind(account(0)) == "AccountError", "one kind whatever its status"
    assert failure_kind(missing(0)) == "MissingFieldError"
    assert failure_kind(Failure(0, "ServerError: HTTP 503 from GET", 5, transient=True)) is None


def account(n: int, status: int = 429, code: str = "insufficient_quota") -> Failure:
    text = f"AccountError: HTTP {status} {code}: You exceeded your current quota (POST http://a/v1)"
    return Failure(n, text, attempts=1)


def test_the_first_account_level_failure_stops_naming_the_providers_answer() -> None:
    detector = SystemicDetector(threshold=20, partition=3, auth_hint=HINT)
    assert detector.take(Result(0, {})) == [Result(0, {})]
    assert detector.take(account(1)) == [], "held back: no dead letter"
    assert detector.stop == (
        "partition 3: account-level failure: the API answered 429 insufficient_quota: You "
        "exceeded your current quota (POST http://a/v1); no call can succeed until the "
        "account is fixed (credit, billing or spend limit, model or deployment name)"
    )
    assert detector.requeued() == [{"record": 1, "attempts": 1, "error": account(1).error}]
    entries = [{"record": 2, "attempts": 1, "error": account(2, 401, "invalid_api_key").error}]
    entries.append({"record": 4, "attempts": 1, "error": status(4, 400).error})
    assert detector.retry_queued([*detector.requeued(), *entries]) == [
        {"record": 1, "attempts": 0},
        {"record": 2, "attempts": 0},  # any account-level failure is called again
        entries[1],
    ]


def test_a_refused_key_stops_at_once_naming_the_secret_header_not_its_value() -> None:
    detector = SystemicDetector(threshold=20, partition=0, auth_hint=HINT)
    error = "AccountError: HTTP 401: the credentials were refused (body not shown) (GET http://a)"
    detector.take(Failure(0, error, 1))
    assert detector.stop is not None and "the API answered 401: the credentials" in detector.stop
    assert "check the API key / secret header X-Api-Key (from $GEO_KEY)" in detector.stop


def test_account_level_failures_stop_even_with_the_threshold_off() -> None:
    detector = SystemicDetector(threshold=0, partition=0, auth_hint=HINT)
    assert detector.take(status(0, 400)) == [status(0, 400)]
    assert detector.take(account(1)) == [] and detector.stop is not None


def test_bare_403s_are_an_ordinary_streak() -> None:
    detector = SystemicDetector(threshold=8, partition=0, auth_hint=HINT)
    for n in range(7):
        detector.take(status(n, 403))
        assert detector.stop is None
    detector.take(status(7, 403))
    assert detector.stop is not None and "8 records in a row" in detector.stop
    assert "none succeeded" in detector.stop


def test_the_same_permanent_error_for_a_run_of_records_stops_with_a_generic_hint() -> None:
    detector = SystemicDetector(threshold=4, partition=0, auth_hint=HINT)
    for n in range(4):
        assert detector.take(missing(n)) == []
    assert detector.stop is not None and "MissingFieldError" in detector.stop
    assert "fix it and run again" in detector.stop and "API key" not in detector.stop


def test_errors_that_vary_by_record_are_dead_letters_in_order() -> None:
    detector = SystemicDetector(threshold=3, partition=0, auth_hint=HINT)
    emitted = []
    stream = [status(0, 404), status(1, 404), Result(2, {}), status(3, 400), status(4, 404)]
    stream += [status(5, 400), status(6, 400), Result(7, {})]
    for output in stream:
        emitted += detector.take(output)
        assert detector.stop is None
    assert emitted == stream, "a success or another kind breaks the streak: all emitted"


def test_a_transient_failure_breaks_the_streak() -> None:
    detector = SystemicDetector(threshold=2, partition=0, auth_hint=HINT)
    detector.take(missing(0))
    timeout = Failure(1, "TimeoutError", 5, transient=True)
    assert detector.take(timeout) == [missing(0), timeout]
    detector.take(missing(2))
    assert detector.stop is None


def test_threshold_zero_never_holds_anything_back() -> None:
    detector = SystemicDetector(threshold=0, partition=0, auth_hint=HINT)
    assert [detector.take(status(n, 403)) for n in range(9)] == [[status(n, 403)] for n in range(9)]
    assert detector.stop is None


def test_after_a_stop_queued_failures_of_its_kind_are_called_again() -> None:
    detector = SystemicDetector(threshold=1, partition=0, auth_hint=HINT)
    detector.take(status(0, 403))
    entries = [
        {"record": 1, "attempts": 1, "error": status(1, 403).error},
        {"record": 2, "attempts": 1, "error": status(2, 404).error},
        {"record": 3, "attempts": 1, "value": {"score": 1}},
        {"record": 4, "attempts": 2},
        {"watermark": 10},
    ]
    assert detector.retry_queued(entries) == [{"record": 1, "attempts": 0}, *entries[1:]]


def test_the_credentials_hint_names_sources_never_values() -> None:
    assert "bearer token (from $API_TOKEN)" in credentials_hint({"token_env": "API_TOKEN"})
    assert "no credentials are configured" in credentials_hint({})
