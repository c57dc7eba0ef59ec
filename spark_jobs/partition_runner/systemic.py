"""Systemic failure: the same permanent error, record after record, is the job's fault.

A wrong API key answers 401 to every record; a typo in a body placeholder fails every
record with the same ``MissingFieldError``. Dead-lettering them would turn a run that
enriched nothing into a "success" whose records are never called again. So, as
``outage.py`` does for transient failures, a streak of permanent failures of one kind
(exception class and HTTP status) is held back: a success or a failure of another kind
releases it as dead letters (the error varies by record: those records are bad), while
a streak reaching the threshold stops the partition, and its records are called again
when the run resumes after the cause is fixed.

The threshold is small (``--systemic-threshold``, 20 by default): a real per-record error
rarely repeats 20 times in a row with no success between (404s or 400s among successes
keep breaking the streak), and a bad configuration costs at most that many calls per
partition, plus the calls already in flight. A 401/403 before the partition's first
success stops sooner (``defaults.AUTH_FAILURE_THRESHOLD``): a key that works would have
let one record through, and a wrong key should fail a run within seconds of its first
calls.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from spark_jobs.asyncwait import Failure, Result
from spark_jobs.defaults import AUTH_FAILURE_THRESHOLD

#: HTTP statuses that mean the credentials are refused rather than the record bad.
AUTH_STATUSES = frozenset({401, 403})

_KIND = re.compile(r"^(?P<cls>\w+)(?:: HTTP (?P<status>\d{3})\b)?")


class SystemicFailureError(RuntimeError):
    """One permanent error for a run of records: the partition stops without dead letters."""


def failure_kind(failure: Failure) -> str | None:
    """``"ClientStatusError HTTP 401"``, ``"MissingFieldError"``; None for a transient
    failure (``outage.py``'s business) or an error text of no known shape."""
    match = _KIND.match(failure.error)
    if failure.transient or match is None:
        return None
    status = match["status"]
    return f"{match['cls']} HTTP {status}" if status else match["cls"]


def credentials_hint(http: Mapping[str, Any]) -> str:
    """Where the job takes its credentials from (header and variable names, never values)."""
    sources = [
        f"secret header {h} (from ${v})" for h, v in (http.get("secret_headers") or {}).items()
    ]
    if http.get("token_env"):
        sources.append(f"bearer token (from ${http['token_env']})")
    if http.get("token_file"):
        sources.append(f"bearer token (from file {http['token_file']})")
    where = ", ".join(sources) or "no credentials are configured"
    return f"the API refused the credentials: check the API key / {where}"


class SystemicDetector:
    """Holds back the current streak of same-kind permanent failures (``threshold`` 0:
    never). ``stop`` is set, with its reason, once a streak proves a systemic failure."""

    def __init__(self, threshold: int, partition: int, auth_hint: str) -> None:
        self.threshold = threshold
        self.partition = partition
        self.auth_hint = auth_hint
        self.suspects: list[Failure] = []
        self.kind: str | None = None
        self.succeeded = False
        self.stop: str | None = None

    def __len__(self) -> int:
        return len(self.suspects)

    def take(self, output: Result | Failure) -> list[Result | Failure]:
        """The outputs to emit now, in order: none while ``output`` extends the streak."""
        kind = failure_kind(output) if isinstance(output, Failure) else None
        if not isinstance(output, Failure) or kind is None or not self.threshold:
            self.succeeded = self.succeeded or isinstance(output, Result)
            return [*self.release(), output]
        released: list[Result | Failure] = [*self.release()] if kind != self.kind else []
        self.kind = kind
        self.suspects.append(output)
        if len(self.suspects) >= self._limit():
            self.stop = self._reason(output)
        return released

    def release(self) -> list[Failure]:
        """The streak, given up as dead letters (broken, or the input ended)."""
        released, self.suspects, self.kind = self.suspects, [], None
        return released

    def requeued(self) -> list[dict[str, Any]]:
        """The suspects as snapshot entries, still failed: a run resumed after another
        stop (a spent budget) emits them again without a call, through this detector.
        After a systemic stop :meth:`retry_queued` turns them into records to call again."""
        return [
            {"record": s.record, "attempts": s.attempts, "error": s.error} for s in self.suspects
        ]

    def retry_queued(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """After a stop, queued failures of the streak's kind are called again too."""
        return [
            {"record": e["record"], "attempts": 0} if self._same_kind(e) else e for e in entries
        ]

    def _same_kind(self, entry: dict[str, Any]) -> bool:
        if "error" not in entry:
            return False
        failure = Failure(entry["record"], entry["error"], 0, entry.get("transient", False))
        return failure_kind(failure) == self.kind

    def _limit(self) -> int:
        if self._auth and not self.succeeded:
            return min(self.threshold, AUTH_FAILURE_THRESHOLD)
        return self.threshold

    @property
    def _auth(self) -> bool:
        return any(self.kind == f"ClientStatusError HTTP {s}" for s in AUTH_STATUSES)

    def _reason(self, last: Failure) -> str:
        hint = (
            self.auth_hint
            if self._auth
            else "a configuration or API fault, not the records: fix it and run again"
        )
        return (
            f"partition {self.partition}: systemic failure: {len(self.suspects)} records in "
            f"a row failed with {self.kind}"
            f"{'' if self.succeeded else ' and none succeeded'}; {hint}; last: {last.error}"
        )
