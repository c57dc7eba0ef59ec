"""The demo API's command line: listen address and the fault knobs.

Every knob defaults to off and can also be changed at runtime with ``POST /faults``.
"""

from __future__ import annotations

import argparse

from demo.faults import LATENCY_DISTRIBUTIONS, DemoConfig
from demo.rate_limit import RATE_LIMIT_HEADERS


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m demo.api",
        description="Demo enrichment API with injectable latency and faults. "
        "All knobs default to off; rates are fractions in [0, 1].",
    )
    parser.add_argument("--host", default="127.0.0.1", help="default: %(default)s")
    parser.add_argument("--port", type=int, default=8080, help="default: %(default)s")
    limit = parser.add_argument_group("rate limit", "fixed for the life of the process")
    limit.add_argument(
        "--rate-limit",
        type=float,
        metavar="R",
        help="at most R requests per second over the whole server, 429 with Retry-After: 1 "
        "beyond (default: no limit)",
    )
    limit.add_argument(
        "--rate-limit-headers",
        choices=RATE_LIMIT_HEADERS,
        default="none",
        help="announce the quota left on every answer (default: %(default)s)",
    )
    # SUPPRESS: an absent flag leaves the field out, so DemoConfig's defaults apply.
    knobs = parser.add_argument_group("knobs", "also changeable at runtime via POST /faults")
    knob = dict(default=argparse.SUPPRESS)
    knobs.add_argument("--latency-ms", type=float, help="added latency per request", **knob)
    knobs.add_argument(
        "--latency-dist",
        choices=LATENCY_DISTRIBUTIONS,
        help="fixed: exactly latency-ms; uniform: mean latency-ms; lognormal: median latency-ms",
        **knob,
    )
    knobs.add_argument("--error-rate", type=float, help="fraction answered 500", **knob)
    knobs.add_argument(
        "--unavailable-rate", type=float, help="fraction answered 503 (no Retry-After)", **knob
    )
    knobs.add_argument("--rate-429", type=float, help="fraction answered 429", **knob)
    knobs.add_argument("--retry-after-s", type=int, help="Retry-After on 429s (1)", **knob)
    knobs.add_argument(
        "--outage-after-requests",
        type=int,
        metavar="N",
        help="503 from request N (0-based)",
        **knob,
    )
    knobs.add_argument(
        "--outage-requests", type=int, metavar="M", help="... for M requests", **knob
    )
    knobs.add_argument(
        "--outage-start-s", type=float, metavar="A", help="503 from A seconds after start", **knob
    )
    knobs.add_argument(
        "--outage-duration-s", type=float, metavar="D", help="... for D seconds", **knob
    )
    knobs.add_argument(
        "--drop-rate", type=float, help="fraction whose connection is closed unanswered", **knob
    )
    knobs.add_argument(
        "--slow-body-rate", type=float, help="fraction whose body is sent slowly", **knob
    )
    knobs.add_argument("--slow-body-s", type=float, help="seconds to send a slow body", **knob)
    for name, help_text in (
        ("stall-rate", "fraction answered with headers, then silence (connection left open)"),
        ("bad-chunk-rate", "fraction answered with a malformed chunked body (left open)"),
        ("truncated-rate", "fraction whose body stops short of its Content-Length"),
        ("reset-rate", "fraction whose connection is reset (TCP RST)"),
        ("bad-request-rate", "fraction of records answered 400 on every call"),
        ("cut-json-rate", "fraction of records answered 200 with cut-off JSON on every call"),
    ):
        knobs.add_argument(f"--{name}", type=float, help=help_text, **knob)
    knobs.add_argument(
        "--fault-attempts",
        type=int,
        metavar="N",
        help="0 (default): faults drawn per call; N: drawn per record, hitting its first N "
        "calls, then it succeeds",
        **knob,
    )
    knobs.add_argument("--seed", type=int, help="seed for the random faults (0)", **knob)
    knobs.add_argument(
        "--token-env",
        metavar="NAME",
        help="require 'Authorization: Bearer <token>', the token read from env var NAME",
        **knob,
    )
    return parser


def describe_knobs(config: DemoConfig) -> str:
    """The knobs that differ from the defaults, for the one log line per change."""
    defaults = DemoConfig()
    active = [
        f"{name}={value}"
        for name, value in config.knobs().items()
        if value != getattr(defaults, name)
    ]
    if config.token_env is not None:
        active.append(f"auth=bearer token from ${config.token_env}")
    return " ".join(active) or "all knobs off"
