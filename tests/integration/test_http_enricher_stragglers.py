"""Stragglers at the end of a partition's input (``enrichers/stragglers.py``), against a
real loopback server: with ``resend_stragglers``, once the input has ended a silent attempt
that later ones overtook is sent again long before its read-stall deadline; before that,
for a body that keeps arriving, and while the server answers no one, nothing is cut.
Without it (the default) the same silent attempt is waited for and paid once."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from demo.wire_faults import stall
from spark_jobs.asyncwait import AsyncWaitOperator, Result
from spark_jobs.enrichers import HttpEnricher, HttpEnricherConfig, default_retry_strategy
from spark_jobs.enrichers.sender import RequestSender
from spark_jobs.enrichers.stragglers import MIN_ANSWERS, MIN_SILENCE_S

from .http_support import serve

PATIENT = {"read_timeout": 60.0, "first_byte_timeout": 60.0, "total_timeout": 60.0}
"""Deadlines no test waits out: only the straggler watch can cut an attempt early."""
QUICK = [{"id": f"k{i}"} for i in range(2 * MIN_ANSWERS)]
LATER = [{"id": f"later{i}"} for i in range(3)]
"""Sent after the slow record, and answered: they overtake it."""


def stalling_once(
    calls: Counter[str],
    slow: str,
    again: asyncio.Event | None = None,
    stalled: asyncio.Event | None = None,
) -> Callable[..., Any]:
    """Answers every key at once, but ``slow``'s first call: headers, then silence.
    ``stalled`` is set when that first call arrives, ``again`` when a second one does."""

    async def handler(request: web.Request) -> web.StreamResponse:
        key = request.path.rsplit("/", 1)[1]
        calls[key] += 1
        response = web.json_response({"name": key})
        if key == slow and calls[key] == 1:
            if stalled is not None:
                stalled.set()
            return await stall(request, response)
        if key == slow and again is not None:
            again.set()
        return response

    return handler


async def enrich_all(enrich: HttpEnricher, source: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
    operator = AsyncWaitOperator(
        enrich, capacity=100, timeout=50, retry=default_retry_strategy(max_attempts=3)
    )
    outputs = [o async for o in operator.run(source)][:-1]
    return {o.record["id"]: o for o in outputs}


def config(base_url: str, **overrides: Any) -> HttpEnricherConfig:
    settings = {
        "url_template": base_url + "/customers/{id}",
        "response_fields": {"name": "$.name"},
        "resend_stragglers": True,
    }
    return HttpEnricherConfig(**{**settings, **PATIENT, **overrides})


async def test_once_the_input_has_ended_an_overtaken_silent_attempt_is_sent_again():
    calls: Counter[str] = Counter()
    stalled = asyncio.Event()
    async with serve(stalling_once(calls, "slow", stalled=stalled)) as base_url:
        async with HttpEnricher(config(base_url)) as enrich:

            async def source() -> AsyncIterator[dict[str, Any]]:
                for record in [*QUICK, {"id": "slow"}]:
                    yield record
                await stalled.wait()  # so the later records are sent after it
                for record in LATER:
                    yield record
                enrich.input_ended()  # as the partition runner does

            # Only the cut ends it: the stalled attempt's own deadlines are a minute away.
            outputs = await asyncio.wait_for(enrich_all(enrich, source()), 45)
            stats = enrich.stats
    slow = outputs["slow"]
    assert isinstance(slow, Result) and slow.value == {"name": "slow"} and slow.attempts == 2
    assert calls["slow"] == 2 and stats.stragglers_resent == 1
    assert all(isinstance(outputs[r["id"]], Result) for r in QUICK + LATER)
    assert all(calls[r["id"]] == 1 for r in QUICK + LATER)


async def test_a_server_that_answers_no_one_for_a_while_has_no_stragglers():
    """Every attempt in flight silent at once (the server paused, as a GC pause or a
    starved CPU pauses it) for several times the silence limit: none was overtaken, so
    none is sent again, and each key is paid for once when the server comes back."""
    calls: Counter[str] = Counter()
    paused = [{"id": f"paused{i}"} for i in range(10)]
    all_quick_arrived, resume = asyncio.Event(), asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        key = request.path.rsplit("/", 1)[1]
        calls[key] += 1
        if sum(calls[r["id"]] for r in QUICK) == len(QUICK):
            all_quick_arrived.set()
        if key.startswith("paused"):
            await resume.wait()
        return web.json_response({"name": key})

    async with serve(handler) as base_url:
        async with HttpEnricher(config(base_url)) as enrich:

            async def source() -> AsyncIterator[dict[str, Any]]:
                for record in QUICK:
                    yield record
                await all_quick_arrived.wait()  # the paused ones are the latest sent
                for record in paused:
                    yield record
                enrich.input_ended()
                # A pause the old rule cut at a quarter of (the limit is MIN_SILENCE_S
                # for answers this quick); a slower machine only makes it longer.
                await asyncio.sleep(4 * MIN_SILENCE_S)
                resume.set()

            outputs = await asyncio.wait_for(enrich_all(enrich, source()), 45)
            stats = enrich.stats
    assert all(isinstance(outputs[r["id"]], Result) for r in QUICK + paused)
    assert stats.stragglers_resent == 0
    assert all(calls[r["id"]] == 1 for r in QUICK + paused), calls


async def test_before_the_input_ends_only_the_read_stall_deadline_cuts():
    """Other records still to come keep the partition busy: the stalled attempt runs to
    its read_timeout, and then the input ends."""
    calls: Counter[str] = Counter()
    retried = asyncio.Event()
    async with serve(stalling_once(calls, "slow", retried)) as base_url:
        async with HttpEnricher(config(base_url, read_timeout=1.0)) as enrich:

            async def source() -> AsyncIterator[dict[str, Any]]:
                for record in [*QUICK, {"id": "slow"}]:
                    yield record
                await retried.wait()  # the read_timeout cut the stalled attempt
                enrich.input_ended()

            outputs = await asyncio.wait_for(enrich_all(enrich, source()), 45)
            stats = enrich.stats
    assert isinstance(outputs["slow"], Result) and outputs["slow"].attempts == 2
    assert calls["slow"] == 2 and stats.stragglers_resent == 0


async def test_a_body_that_keeps_arriving_is_never_cut_however_long_it_takes():
    calls: Counter[str] = Counter()
    chunks, gap = 80, MIN_SILENCE_S / 10  # 2 s in all, never silent for long

    async def handler(request: web.Request) -> web.StreamResponse:
        key = request.path.rsplit("/", 1)[1]
        calls[key] += 1
        if key != "long":
            return web.json_response({"name": key})
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"name": "long", "pad": "')
        for _ in range(chunks):
            await asyncio.sleep(gap)
            await response.write(b"x")
        await response.write(b'"}')
        return response

    async with serve(handler) as base_url:
        async with HttpEnricher(config(base_url)) as enrich:

            async def source() -> AsyncIterator[dict[str, Any]]:
                for record in [*QUICK, {"id": "long"}]:
                    yield record
                enrich.input_ended()

            outputs = await asyncio.wait_for(enrich_all(enrich, source()), 45)
            stats = enrich.stats
    assert isinstance(outputs["long"], Result) and outputs["long"].attempts == 1
    assert calls["long"] == 1 and stats.stragglers_resent == 0


async def test_by_default_a_silent_attempt_is_waited_for_and_paid_once():
    """The straggler of the first test, but without ``resend_stragglers``: no watch is
    made, and the attempt, silent for many times the limit the watch would have cut it
    at, is waited for until its body comes, one call."""
    calls: Counter[str] = Counter()
    stalled, overtaken = asyncio.Event(), asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        key = request.path.rsplit("/", 1)[1]
        calls[key] += 1
        if sum(calls[r["id"]] for r in LATER) == len(LATER):
            overtaken.set()
        if key != "slow":
            return web.json_response({"name": key})
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)  # the headers, then silence
        stalled.set()
        await overtaken.wait()
        await asyncio.sleep(8 * MIN_SILENCE_S)
        await response.write(b'{"name": "slow"}')
        return response

    async with serve(handler) as base_url:
        settings = config(base_url, resend_stragglers=False)
        assert RequestSender(settings, None).stragglers is None  # no per-attempt cost
        async with HttpEnricher(settings) as enrich:

            async def source() -> AsyncIterator[dict[str, Any]]:
                for record in [*QUICK, {"id": "slow"}]:
                    yield record
                await stalled.wait()  # so the later records are sent after it
                for record in LATER:
                    yield record
                enrich.input_ended()

            outputs = await asyncio.wait_for(enrich_all(enrich, source()), 45)
            stats = enrich.stats
    slow = outputs["slow"]
    assert isinstance(slow, Result) and slow.value == {"name": "slow"} and slow.attempts == 1
    assert calls["slow"] == 1 and stats.stragglers_resent == 0
    assert stats.requests_made == len(QUICK) + len(LATER) + 1
