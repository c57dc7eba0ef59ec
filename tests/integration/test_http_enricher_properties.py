"""Property: whatever sequence of faults a real server throws at a record, the client
spends at most ``max_attempts`` attempts on it (a throttled call spends none), retries
exactly the transient faults, and ends with the right outcome. Hypothesis picks the
fault sequences; the server is a real aiohttp server on loopback answering each key's
n-th call with its n-th scripted fault (the same wire faults the demo API sends).
``HTTP_PROPERTY_EXAMPLES`` sets the run size."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from demo.wire_faults import WIRE_FAULTS
from spark_jobs.asyncwait import AsyncWaitOperator, Failure, Result
from spark_jobs.enrichers import HttpEnricher, HttpEnricherConfig, default_retry_strategy

from .http_support import serve

TRANSIENT_STATUSES = {"500": 500, "503": 503, "429": 429, "408": 408}
WIRE = {outcome.value: outcome for outcome in WIRE_FAULTS}
PERMANENT = {"400", "cut_json"}
THROTTLED = {"429", "503"}  # both sent with Retry-After
FAULTS = sorted([*TRANSIENT_STATUSES, *WIRE, *PERMANENT])
EXAMPLES = int(os.environ.get("HTTP_PROPERTY_EXAMPLES", "60"))


def expected(script: list[str], max_attempts: int) -> tuple[str, int, int]:
    """(outcome kind, calls made, attempts spent) for one key's script; calls past it
    succeed. A throttled answer (429, or 503 with Retry-After) spends no attempt."""
    calls = spent = 0
    while True:
        action = script[calls] if calls < len(script) else "ok"
        calls += 1
        if action in THROTTLED:
            continue
        spent += 1
        if action == "ok":
            return "result", calls, spent
        if action in PERMANENT:
            return "permanent", calls, spent
        if spent >= max_attempts:
            return "transient", calls, spent


async def scripted_run(scripts: dict[str, list[str]], max_attempts: int) -> tuple[list, Counter]:
    calls: Counter[str] = Counter()

    async def handler(request: web.Request) -> web.StreamResponse:
        key = request.match_info["tail"]
        script = scripts[key]
        action = script[calls[key]] if calls[key] < len(script) else "ok"
        calls[key] += 1
        healthy = web.json_response({"name": key})
        if action in WIRE:
            return await WIRE_FAULTS[WIRE[action]](request, healthy)
        if action in TRANSIENT_STATUSES:
            return web.json_response(
                {}, status=TRANSIENT_STATUSES[action], headers={"Retry-After": "0"}
            )
        if action == "400":
            return web.json_response({"error": "bad"}, status=400)
        if action == "cut_json":
            return web.Response(body=b'{"name": "' + key.encode(), content_type="application/json")
        return healthy

    async with serve(handler) as base_url:
        config = HttpEnricherConfig(
            url_template=base_url + "/{id}", response_fields={"name": "$.name"}, read_timeout=0.2
        )
        retry = default_retry_strategy(max_attempts, initial_delay=0.002, max_delay=0.01)
        async with HttpEnricher(config) as enrich:
            operator = AsyncWaitOperator(
                enrich, mode="unordered", capacity=8, timeout=60, retry=retry
            )
            outputs = [o async for o in operator.run({"id": key} for key in scripts)][:-1]
    return outputs, calls


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    scripts=st.dictionaries(
        st.from_regex(r"k[0-9]{1,3}", fullmatch=True),
        st.lists(st.sampled_from([*FAULTS, "ok"]), max_size=6),
        min_size=1,
        max_size=6,
    ),
    max_attempts=st.integers(1, 5),
)
def test_attempts_never_exceed_max_attempts_and_outcomes_follow_the_faults(scripts, max_attempts):
    outputs, calls = asyncio.run(scripted_run(scripts, max_attempts))
    assert sorted(o.record["id"] for o in outputs) == sorted(scripts)
    for output in outputs:
        key = output.record["id"]
        kind, made, attempts = expected(scripts[key], max_attempts)
        assert calls[key] == made and attempts <= max_attempts, (key, scripts[key])
        assert output.attempts == attempts
        if kind == "result":
            assert output == Result({"id": key}, {"name": key}, attempts)
        else:
            assert isinstance(output, Failure), (key, scripts[key], output)
            assert output.transient == (kind == "transient" and max_attempts > 1), output
