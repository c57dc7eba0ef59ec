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
partition, plus the calls already in flight.

An account-level answer (``AccountError``: no credit, a spent billing limit, refused
credentials, an unknown model; ``enrichers/account_errors.py``) needs no streak: the
provider says that no call of this account can succeed, so the first one stops the
partition, whatever ``--systemic-threshold`` says (it tunes the guess about per-record
errors; an account's answer is no guess, and its records must not become dead letters).
A run of a few seconds then costs the calls in flight when the answer came, at most the
capacity. A bare 403 is no account answer (an API may refuse one record's resource):
it is an ordinary permanent error under the threshold.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from spark_jobs.asyncwait import Failure, Result

#: The kind of every account-level failure (``enrichers.errors.AccountError``'s name).
ACCOUNT_KIND = "AccountError"
#: HTTP statuses that mean the credentials are refused rather than the account spent.
AUTH_STATUSES = frozenset({401, 403})

_KIND = re.compile(r"^(?P<cls>\w+)(?:: HTTP (?P<status>\d{3})\b)?")


class SystemicFailureError(RuntimeError):
    """One permanent error for a run of records: the partition stops without dead letters."""


def failure_kind(failure: Failure) -> str | None:
    """``"ClientStatusError HTTP 400"``, ``"MissingFieldError"``, ``"AccountError"`` (one
    kind whatever its status); None for a transient failure (``outage.py``'s business) or
    an error text of no known shape."""
    match = _KIND.match(failure.error)
    if failure.transient or match is None:
        return None
    status = match["status"]
    if match["cls"] == ACCOUNT_KIND:
        return ACCOUNT_KIND
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
        held = kind == ACCOUNT_KIND or bool(self.threshold)
        if not isinstance(output, Failure) or kind is None or not held:
            self.succeeded = self.succeeded or isinstance(output, Result)
            return [*self.release(), output]
        released: list[Result | Failure] = [*self.release()] if kind != self.kind else []
        self.kind = kind
        self.suspects.append(output)
        if kind == ACCOUNT_KIND or len(self.suspects) >= self.threshold:
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

    def _reason(self, last: Failure) -> str:
        if self.kind == ACCOUNT_KIND:
            return account_reason(self.partition, last, self.auth_hint)
        return (
            f"partition {self.partition}: systemic failure: {len(self.suspects)} records in "
            f"a row failed with {self.kind}"
            f"{'' if self.succeeded else ' and none succeeded'}; a configuration or API "
            f"fault, not the records: fix it and run again; last: {last.error}"
        )


def account_reason(partition: int, failure: Failure, auth_hint: str) -> str:
    """``partition 0: account-level failure: the API answered 429 insufficient_quota: You
    exceeded ... (POST https://...); ...``: the provider's status, code and message."""
    answer = failure.error.removeprefix(f"{ACCOUNT_KIND}: ").removeprefix("HTTP ")
    match = _KIND.match(failure.error)
    status = int(match["status"]) if match is not None and match["status"] else None
    hint = (
        auth_hint
        if status in AUTH_STATUSES
        else "no call can succeed until the account is fixed (credit, billing or spend "
        "limit, model or deployment name)"
    )
    return f"partition {partition}: account-level failure: the API answered {answer}; {hint}"
