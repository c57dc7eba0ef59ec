"""The demo model endpoint's command line: listen port, provider profile and its knobs.

``--profile`` picks how the endpoint limits and answers (``provider_profiles.py``); the
fixed-window profile keeps ``--window``, every other limit is per ``--minute-s`` (60: a
provider's minute; 6 makes a benchmark ten times shorter).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from demo.batch_jobs import BatchKnobs
from demo.batch_scheduler import BatchServing
from demo.model_limits import ModelLimits
from demo.provider_profiles import (
    ACCOUNTS,
    DEFAULT_MAX_TOKENS,
    PROFILES,
    AnthropicProfile,
    AzureProfile,
    Faults,
    FixedWindowProfile,
    OpenAIProfile,
    ProviderProfile,
    SelfHostedProfile,
)


@dataclass(frozen=True)
class ModelApiOptions:
    """What ``python -m demo.model_api`` serves."""

    port: int
    profile: ProviderProfile
    malformed_every: int
    latency_s: float
    batch_knobs: BatchKnobs


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m demo.model_api",
        description="Demo model endpoint: deterministic answers, limits as a provider counts.",
    )
    parser.add_argument("--port", type=int, default=8090, help="0: any free port (8090)")
    parser.add_argument("--profile", choices=PROFILES, default="fixed-window")
    parser.add_argument("--malformed-every", type=int, default=0, help="every Nth prompt (0)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per answer (0)")
    limits = parser.add_argument_group("limits", "none unless given")
    limits.add_argument("--requests", type=int, help="requests per window or minute")
    limits.add_argument("--tokens", type=int, help="tokens per window or minute (azure: TPM)")
    limits.add_argument("--input-tokens", type=int, help="anthropic: input tokens per minute")
    limits.add_argument("--output-tokens", type=int, help="anthropic: output tokens per minute")
    limits.add_argument("--minute-s", type=float, default=60.0, help="a minute's seconds (60)")
    limits.add_argument("--default-max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help="openai, azure: charged without max_tokens (%(default)s)")  # fmt: skip
    limits.add_argument("--retry-after", action="store_true", help="openai: Retry-After on 429")
    limits.add_argument("--exact-remaining", action="store_true",
                        help="anthropic: token remaining not rounded to thousands")  # fmt: skip
    fixed = parser.add_argument_group("fixed-window")
    fixed.add_argument("--window", type=float, default=60.0, help="window seconds (60)")
    fixed.add_argument("--nonsense-headers", action="store_true", help="-1 in every header")
    fixed.add_argument(
        "--windows-from-first-call", action="store_true", help="the first call opens a window"
    )
    account = parser.add_argument_group("account and faults")
    account.add_argument("--account", choices=ACCOUNTS, default="ok")
    account.add_argument("--server-errors", type=float, default=0.0, help="share answered 500")
    account.add_argument("--overloaded", type=float, default=0.0,
                         help="share answered 503 (anthropic: 529)")  # fmt: skip
    account.add_argument("--fault-seed", type=int, default=0, help="the faults' seed (0)")
    hosted = parser.add_argument_group("self-hosted")
    hosted.add_argument("--batch", type=int, default=8, help="requests decoding at once (8)")
    hosted.add_argument("--queue", type=int, help="requests waiting before 503 (no bound)")
    hosted.add_argument("--base-latency", type=float, default=0.05, help="prefill s (0.05)")
    hosted.add_argument("--decode-step", type=float, default=0.005, help="s a token (0.005)")
    hosted.add_argument("--batch-slowdown", type=float, default=0.05,
                        help="a step's growth per request in the batch (0.05)")  # fmt: skip
    batches = parser.add_argument_group("batch APIs", "OpenAI's and Anthropic's (batch_jobs.py)")
    batches.add_argument("--day-s", type=float, default=4.0, help="a batch's 24 h window (4)")
    batches.add_argument("--process-s", type=float, default=0.4,
                         help="seconds a batch takes to run all its requests (0.4)")  # fmt: skip
    batches.add_argument("--fail-every", type=int, default=0,
                         help="every Nth custom_id errors (0: none)")  # fmt: skip
    batches.add_argument("--batch-max-requests", type=int, help="a smaller request limit")
    return parser


def parse(argv: list[str] | None = None) -> ModelApiOptions:
    args = parser().parse_args(argv)
    knobs = BatchKnobs(
        day_s=args.day_s,
        process_s=args.process_s,
        fail_every=args.fail_every,
        max_requests=args.batch_max_requests,
    )
    return ModelApiOptions(args.port, _profile(args), args.malformed_every, args.latency, knobs)


def _profile(args: argparse.Namespace) -> ProviderProfile:
    faults = Faults(args.server_errors, args.overloaded, args.fault_seed)
    common = {"minute_s": args.minute_s, "account": args.account, "faults": faults}
    if args.profile == "openai":
        return OpenAIProfile(
            args.requests, args.tokens, default_max_tokens=args.default_max_tokens,
            retry_after=args.retry_after, **common,
        )  # fmt: skip
    if args.profile == "azure":
        given = {"tokens": args.tokens} if args.tokens is not None else {}  # else its default
        return AzureProfile(
            requests=args.requests, default_max_tokens=args.default_max_tokens, **given, **common
        )
    if args.profile == "anthropic":
        return AnthropicProfile(
            args.requests, args.input_tokens, args.output_tokens,
            round_remaining=not args.exact_remaining, **common,
        )  # fmt: skip
    if args.profile == "self-hosted":
        serving = BatchServing(
            args.batch, args.queue, args.base_latency, args.decode_step, args.batch_slowdown
        )
        return SelfHostedProfile(serving)
    limits = ModelLimits(
        args.requests, args.tokens, args.window, args.nonsense_headers, args.windows_from_first_call
    )
    return FixedWindowProfile(limits)
