"""Fault and latency knobs for the demo enrichment API.

The demo API exists to show that the enrichment pipeline survives a misbehaving
upstream, so the misbehaviour has to be controllable and reproducible:

* every knob defaults to "off", so a bare server is a healthy, fast API;
* random faults are drawn from a generator seeded by ``(seed, request key, attempt
  number for that key)`` instead of one shared stream, so the nth call for a given key
  meets the same fate however a concurrent client interleaves its requests;
* outage windows are deterministic (request counts or seconds), for tests that must
  observe an outage begin and end.

This module knows nothing about HTTP; ``demo.api`` turns a :class:`Fate` into a response.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

LATENCY_DISTRIBUTIONS = ("fixed", "uniform", "lognormal")

# Knobs a running server may change through ``POST /faults``. The token variable is
# left out on purpose: auth is fixed for the life of the process.
RUNTIME_KNOBS = frozenset(
    {
        "latency_ms",
        "latency_dist",
        "error_rate",
        "unavailable_rate",
        "rate_429",
        "retry_after_s",
        "outage_after_requests",
        "outage_requests",
        "outage_start_s",
        "outage_duration_s",
        "drop_rate",
        "slow_body_rate",
        "slow_body_s",
        "stall_rate",
        "bad_chunk_rate",
        "truncated_rate",
        "reset_rate",
        "bad_request_rate",
        "cut_json_rate",
        "fault_attempts",
        "seed",
    }
)

# The random outcomes share one uniform draw, each taking its own slice of [0, 1), so
# "error_rate=0.1" means exactly 10% of requests are answered 500 whatever the other
# rates are. Their sum therefore has to stay within 1. Permanent faults come first: a
# record drawn into one of them meets it on every call, whatever ``fault_attempts`` says.
_PERMANENT_OUTCOMES = (("bad_request_rate", "BAD_REQUEST"), ("cut_json_rate", "CUT_JSON"))
_TRANSIENT_OUTCOMES = (
    ("drop_rate", "DROP"),
    ("rate_429", "THROTTLE"),
    ("error_rate", "ERROR"),
    ("unavailable_rate", "OUTAGE"),
    ("slow_body_rate", "SLOW_BODY"),
    ("stall_rate", "STALL"),
    ("bad_chunk_rate", "BAD_CHUNK"),
    ("truncated_rate", "TRUNCATED"),
    ("reset_rate", "RESET"),
)
_RANDOM_OUTCOME_RATES = tuple(name for name, _ in (*_PERMANENT_OUTCOMES, *_TRANSIENT_OUTCOMES))

# sigma of the lognormal latency; with 1.0 the p99 is about 10x the median.
_LOGNORMAL_SIGMA = 1.0


def stable_seed(*parts: str) -> int:
    """Seed for ``random.Random`` that is identical in every process.

    Python's ``hash()`` of a str is salted per process, so it cannot make the same id
    produce the same data on two servers or two runs.
    """
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class DemoConfig:
    """The demo API's knobs. All default to off: no latency, no faults, no auth.

    Rates are fractions of customer requests in [0, 1]. Outage windows count from the
    start of the current fault epoch (server start, or the last change via /faults).
    """

    latency_ms: float = 0.0
    """Added delay per request: the exact value, the mean (uniform) or median (lognormal)."""
    latency_dist: str = "fixed"
    error_rate: float = 0.0
    unavailable_rate: float = 0.0
    """Fraction answered 503 without Retry-After: a brief overload, not an outage window."""
    rate_429: float = 0.0
    retry_after_s: int = 1
    """Value of the Retry-After header on 429s (RFC 9110 allows whole seconds only)."""
    outage_after_requests: int | None = None
    """Requests ``N .. N + outage_requests - 1`` (0-based) of the epoch get 503."""
    outage_requests: int = 0
    outage_start_s: float | None = None
    """Requests arriving in ``[start, start + outage_duration_s)`` seconds get 503."""
    outage_duration_s: float = 0.0
    drop_rate: float = 0.0
    """Fraction of requests whose connection is closed without any response."""
    slow_body_rate: float = 0.0
    slow_body_s: float = 0.0
    """How long a slow response spends trickling its body after sending the headers."""
    stall_rate: float = 0.0
    """Fraction answered with headers, then silence on an open connection."""
    bad_chunk_rate: float = 0.0
    """Fraction answered with chunked headers, then bytes that are no chunk; left open."""
    truncated_rate: float = 0.0
    """Fraction whose body stops half-way short of its Content-Length; then closed."""
    reset_rate: float = 0.0
    """Fraction whose connection is reset (TCP RST) before any byte is sent."""
    bad_request_rate: float = 0.0
    """Fraction of records answered 400 on every call (can never succeed)."""
    cut_json_rate: float = 0.0
    """Fraction of records answered 200 with cut-off JSON on every call (never succeeds)."""
    fault_attempts: int = 0
    """0: transient faults are drawn afresh for every call. N > 0: they are drawn once per
    record and hit its first N calls only, then it succeeds (a realistic flaky API)."""
    seed: int = 0
    token_env: str | None = None
    """Name of the environment variable holding the expected bearer token, if any."""

    def __post_init__(self) -> None:
        _check_number(self, "latency_ms", float)
        _check_number(self, "retry_after_s", int)
        _check_number(self, "outage_requests", int)
        _check_number(self, "fault_attempts", int)
        _check_number(self, "outage_duration_s", float)
        _check_number(self, "slow_body_s", float)
        _check_number(self, "outage_after_requests", int, optional=True)
        _check_number(self, "outage_start_s", float, optional=True)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if self.latency_dist not in LATENCY_DISTRIBUTIONS:
            raise ValueError(
                f"latency_dist must be one of {', '.join(LATENCY_DISTRIBUTIONS)}, "
                f"got {self.latency_dist!r}"
            )
        for name in _RANDOM_OUTCOME_RATES:
            _check_number(self, name, float)
            if getattr(self, name) > 1:
                raise ValueError(f"{name} must be a fraction in [0, 1], got {getattr(self, name)}")
        total = sum(getattr(self, name) for name in _RANDOM_OUTCOME_RATES)
        if total > 1:
            raise ValueError(
                f"{' + '.join(_RANDOM_OUTCOME_RATES)} must not exceed 1, got {total:g}"
            )

    def with_overrides(self, overrides: Mapping[str, Any]) -> DemoConfig:
        """A copy with some runtime knobs changed; raises ValueError for bad names or values."""
        unknown = sorted(set(overrides) - RUNTIME_KNOBS)
        if unknown:
            raise ValueError(
                f"unknown or fixed knobs: {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(RUNTIME_KNOBS))}"
            )
        return dataclasses.replace(self, **overrides)

    def knobs(self) -> dict[str, Any]:
        """The runtime knobs as a JSON-ready dict (what /faults reports and the start log shows)."""
        return {name: getattr(self, name) for name in sorted(RUNTIME_KNOBS)}


def _check_number(config: DemoConfig, name: str, kind: type, *, optional: bool = False) -> None:
    """Reject wrong types and negatives early: knobs arrive as untrusted JSON via /faults."""
    value = getattr(config, name)
    if value is None and optional:
        return
    accepted = (int, float) if kind is float else (int,)
    if isinstance(value, bool) or not isinstance(value, accepted) or value < 0:
        expected = "number" if kind is float else "integer"
        raise ValueError(f"{name} must be a non-negative {expected}, got {value!r}")


class Outcome(Enum):
    """What the server does with a request, in the order the checks are applied."""

    OUTAGE = "outage"  # 503
    BAD_REQUEST = "bad_request"  # 400, on every call of the record
    CUT_JSON = "cut_json"  # 200 with a complete body of cut-off JSON, on every call
    DROP = "dropped"  # close the connection, send nothing (an empty reply)
    THROTTLE = "throttle"  # 429 + Retry-After
    ERROR = "error"  # 500
    SLOW_BODY = "slow_body"  # normal answer, body trickled out
    STALL = "stall"  # headers, then silence; the connection stays open
    BAD_CHUNK = "bad_chunk"  # chunked headers, then garbage; the connection stays open
    TRUNCATED = "truncated"  # half the body of the Content-Length, then closed
    RESET = "reset"  # TCP reset, nothing sent
    OK = "ok"

    @property
    def permanent(self) -> bool:
        """Whether every call of the record meets this fault."""
        return self in (Outcome.BAD_REQUEST, Outcome.CUT_JSON)


@dataclass(frozen=True)
class Fate:
    """The decision for one request: how long to wait first, then what to do."""

    outcome: Outcome
    latency_s: float


class FaultInjector:
    """Decides each request's fate for one fault epoch.

    An epoch starts when the server starts and again whenever the knobs change, so a
    test that sets ``{"outage_after_requests": 0, "outage_requests": 3}`` at runtime
    gets exactly the next three requests refused, and the seeded draws restart.
    """

    def __init__(self, config: DemoConfig) -> None:
        self.config = config
        self._started = time.monotonic()
        self._requests = 0
        self._attempts: defaultdict[str, int] = defaultdict(int)

    def decide(self, key: str) -> Fate:
        """Fate of the next request for ``key`` (the same key and attempt, the same fate)."""
        config = self.config
        index = self._requests
        self._requests += 1
        attempt = self._attempts[key]
        self._attempts[key] += 1
        rng = random.Random(stable_seed(str(config.seed), key, str(attempt)))
        # The outcome takes the first draw, so latency settings never shift it.
        draw = rng.random()
        latency_s = self._latency_s(rng)
        if self._in_outage(index):
            return Fate(Outcome.OUTAGE, latency_s)
        return Fate(planned_outcome(config, key, attempt, draw), latency_s)

    def _latency_s(self, rng: random.Random) -> float:
        base_s = self.config.latency_ms / 1000
        if base_s == 0:
            return 0.0
        if self.config.latency_dist == "uniform":
            return rng.uniform(0, 2 * base_s)
        if self.config.latency_dist == "lognormal":
            return rng.lognormvariate(math.log(base_s), _LOGNORMAL_SIGMA)
        return base_s

    def _in_outage(self, index: int) -> bool:
        config = self.config
        if config.outage_after_requests is not None and (
            config.outage_after_requests
            <= index
            < config.outage_after_requests + config.outage_requests
        ):
            return True
        if config.outage_start_s is not None:
            elapsed = time.monotonic() - self._started - config.outage_start_s
            return 0 <= elapsed < config.outage_duration_s
        return False


def planned_outcome(
    config: DemoConfig, key: str, attempt: int, draw: float | None = None
) -> Outcome:
    """The fault (or OK) the ``attempt``-th call (0-based) for ``key`` meets, outages aside.

    Tests use it to know in advance which records fail and how. ``draw`` is the call's
    own draw (``decide`` passes it); by default it is derived as ``decide`` derives it.
    """
    key_draw = random.Random(stable_seed(str(config.seed), key, "record")).random()
    if config.fault_attempts:
        if attempt >= config.fault_attempts:
            draw = None  # past its faulty calls only a permanent fault remains
        else:
            draw = key_draw
    elif draw is None:
        draw = random.Random(stable_seed(str(config.seed), key, str(attempt))).random()
    threshold = 0.0
    for name, outcome_name in _PERMANENT_OUTCOMES:
        threshold += getattr(config, name)
        if key_draw < threshold:
            return Outcome[outcome_name]
    if draw is None:
        return Outcome.OK
    for name, outcome_name in _TRANSIENT_OUTCOMES:
        threshold += getattr(config, name)
        if threshold > draw >= threshold - getattr(config, name):
            return Outcome[outcome_name]
    return Outcome.OK
