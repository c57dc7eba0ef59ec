"""Batch mode (``model.mode: batch``) against the demo endpoint's batch APIs on loopback,
no Spark: the same rows as online at half the price, failed rows as dead letters of the
online class, expiry, and a kill at each step (before the upload, after the create call,
while the batch runs, while its results are read) followed by a retry that pays no
request twice; the response cache shared by both modes."""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fsspec.core import url_to_fs

from demo.batch_jobs import BatchKnobs
from demo.model_api import ModelApi, run_model_api
from spark_jobs.enrichers import (
    BatchRunning,
    HttpEnricher,
    HttpEnricherConfig,
    RequestBudget,
    RetryableError,
)
from spark_jobs.enrichers.model_endpoint import (
    ModelAnswers,
    ModelConfig,
    ModelPacing,
    request_options,
)
from spark_jobs.enrichers.model_endpoint.batch_calls import BatchMode
from spark_jobs.enrichers.model_endpoint.pacing import COST_UNITS
from spark_jobs.enrichers.model_endpoint.tokens import prompt_tokens
from spark_jobs.partition_runner.cache_scope import scope_of
from spark_jobs.partition_runner.response_cache import ResponseCache
from spark_jobs.snapshots.batch_journal import BatchJournal, batches_waited_for

SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["spam", "ham"]}},
    "required": ["label"],
}
FAST = {"batch_wait_s": 0.05, "batch_poll_s": 0.02}
PRICES = {"price_input_per_million": 2.0, "price_output_per_million": 8.0}


def _config(mode: str = "batch", api: str = "chat", **more: Any) -> ModelConfig:
    parameters = {"max_tokens": 16} if api == "anthropic" else {}
    fields = {"output_schema": SCHEMA} if api == "chat" else {}
    return ModelConfig(
        model="demo",
        prompt="Is this spam? {title}",
        api=api,  # type: ignore[arg-type]
        parameters=parameters,
        mode=mode,  # type: ignore[arg-type]
        **fields,
        **PRICES,
        **FAST,
        **more,
    )


@asynccontextmanager
async def enricher(
    base: str,
    config: ModelConfig,
    journal: Path,
    stored: Any = None,
    cost_budget: RequestBudget | None = None,
    detach: bool = False,
):
    path = "/messages" if config.api == "anthropic" else "/chat/completions"
    options: dict[str, Any] = {
        "url_template": base + path,
        "response_fields": {"unused": "$.unused"},
        "cache_size": 0,
    }
    options.update(request_options(config, options))
    http = HttpEnricherConfig.from_dict(options)
    pacing = ModelPacing(config, 1, cost_budget)
    journal_at = BatchJournal.at(str(journal), str(journal), 0)
    calls = BatchMode(config, journal_at, pacing, detach).calls
    if config.mode == "online":
        calls = None
    async with HttpEnricher(
        http, stored, answers=ModelAnswers(config), pacing=pacing, calls=calls
    ) as enrich:
        yield enrich, pacing


async def outcome(enrich: HttpEnricher, record: dict[str, Any]) -> Any:
    """The output or the class of the failure, retried as the operator retries."""
    for _ in range(20):
        try:
            return await enrich(record)
        except RetryableError:
            await asyncio.sleep(0.01)
        except Exception as error:
            return type(error).__name__
    return "gave up"


async def run_all(enrich: HttpEnricher, titles: list[str]) -> dict[str, Any]:
    found = await asyncio.gather(*(outcome(enrich, {"title": t}) for t in titles))
    return dict(zip(titles, found, strict=True))


TITLES = [f"mail {i}" for i in range(60)]


async def test_batch_rows_equal_online_at_half_the_cost(tmp_path):
    api = ModelApi(batch_knobs=BatchKnobs(process_s=0.2, max_requests=25))
    async with run_model_api(api) as base:
        async with enricher(base, _config("online"), tmp_path / "a") as (enrich, online):
            expected = await run_all(enrich, [*TITLES, "REFUSE this"])
        async with enricher(base, _config(batch_size=25), tmp_path / "b") as (enrich, batch):
            found = await run_all(enrich, [*TITLES, "REFUSE this"])
            batches = enrich.stats.batches_sent
    assert found == expected and expected["REFUSE this"] == "RefusedError"
    assert batches == 3  # 61 requests, 25 a batch
    seen = BatchJournal.at(str(tmp_path / "b"), str(tmp_path / "b"), 0).progress()
    assert [p.status for p in seen] == ["completed"] * 3  # as the snapshot page shows them
    assert sum(p.total for p in seen) == 61 == sum(p.done + p.failed for p in seen)
    assert (
        api.stats["batch_requests"] == 61 and api.batches.jobs.stats()["custom_ids_paid_twice"] == 0
    )
    config = _config()
    assert (batch.prompt_tokens, batch.completion_tokens) == (
        online.prompt_tokens,
        online.completion_tokens,
    )
    assert config.cost(batch.prompt_tokens, batch.completion_tokens) == pytest.approx(
        0.5 * _config("online").cost(online.prompt_tokens, online.completion_tokens)
    )


async def test_a_failed_row_is_its_own_dead_letter_and_expired_rows_are_sent_again(tmp_path):
    # Every batch expires with about half its rows done: the rest go into new batches.
    api = ModelApi(batch_knobs=BatchKnobs(day_s=0.15, process_s=0.3, fail_every=5))
    async with run_model_api(api) as base:
        async with enricher(base, _config(), tmp_path) as (enrich, _):
            found = await run_all(enrich, TITLES)
    failed = {t: v for t, v in found.items() if not isinstance(v, dict)}
    assert failed and set(failed.values()) == {"ClientStatusError"}
    assert len(failed) < len(TITLES) / 2
    assert api.batches.jobs.stats()["batches_created"] > 1  # the expired rows sent again
    assert api.batches.jobs.stats()["custom_ids_paid_twice"] == 0
    seen = BatchJournal.at(str(tmp_path), str(tmp_path), 0).progress()
    assert "expired" in {p.status for p in seen}
    assert all(p.done + p.failed <= p.total for p in seen)


async def test_rows_an_expired_batch_left_are_sent_online_when_asked(tmp_path):
    api = ModelApi(batch_knobs=BatchKnobs(day_s=0.15, process_s=0.3))
    async with run_model_api(api) as base:
        config = _config(batch_resend="online")
        async with enricher(base, config, tmp_path) as (enrich, pacing):
            found = await run_all(enrich, TITLES)
    assert all(isinstance(v, dict) for v in found.values())
    charged = api.batches.jobs.stats()["batch_requests_charged"]
    assert api.batches.jobs.stats()["batches_created"] == 1 and 0 < charged < len(TITLES)
    assert api.stats["requests"] == len(TITLES) - charged  # the rest online, once each
    assert api.stats["prompts_paid_twice"] == 0
    assert 0 < pacing.batch_prompt_tokens < pacing.prompt_tokens  # each part at its price


@pytest.mark.parametrize("api_kind", ["chat", "anthropic"])
@pytest.mark.parametrize("step", ["upload", "create", "running", "results"])
async def test_a_kill_at_each_step_then_a_retry_pays_nothing_twice(tmp_path, step, api_kind):
    if api_kind == "anthropic" and step == "upload":
        pytest.skip("Anthropic's requests go in the create call: no upload step")
    api = ModelApi(batch_knobs=BatchKnobs(process_s=0.4))
    config = _config(api=api_kind)
    async with run_model_api(api) as base:
        if step != "running":
            api.batches.stall_at.add(step)
        async with enricher(base, config, tmp_path) as (enrich, _):
            killed = asyncio.ensure_future(run_all(enrich, TITLES))
            await _reached(api, step)
            killed.cancel()
            with pytest.raises(asyncio.CancelledError):
                await killed
        api.batches.stall_at.clear()
        async with enricher(base, config, tmp_path) as (enrich, _):
            found = await run_all(enrich, TITLES)
    assert all(isinstance(v, dict) for v in found.values()), found
    stats = api.batches.jobs.stats()
    assert stats["custom_ids_paid_twice"] == 0
    assert stats["batch_requests_charged"] == len(TITLES)
    assert stats["batches_created"] == 1  # killed before the upload: none until the retry


async def _reached(api: ModelApi, step: str) -> None:
    for _ in range(500):
        if step == "running":
            states = [api.batches.jobs.status(b) for b in api.batches.jobs.batches.values()]
            if "in_progress" in states:
                return
        elif step in api.batches.reached and api.batches.reached[step].is_set():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never reached {step}")


async def test_one_ledger_across_modes(tmp_path):
    """Answers paid online answer a batch run, and the other way round."""
    api = ModelApi(batch_knobs=BatchKnobs(process_s=0.1))
    scope = scope_of(b"k" * 32, {}, [])

    def cache() -> ResponseCache:
        stored = ResponseCache(
            str(tmp_path / "cache"), partition=0, partitions=1, ttl_s=3600, scope=scope
        )
        stored.load()
        return stored

    first, second = TITLES[:30], TITLES[30:]
    async with run_model_api(api) as base:
        stored = cache()
        async with enricher(base, _config("online"), tmp_path / "j", stored) as (enrich, _):
            online = await run_all(enrich, first)
        stored.flush()
        stored = cache()
        async with enricher(base, _config(), tmp_path / "j", stored) as (enrich, _):
            batch = await run_all(enrich, first + second)
        stored.flush()
        paid_in_batch = api.stats["batch_requests"]
        online_calls = api.stats["requests"]
        stored = cache()
        async with enricher(base, _config("online"), tmp_path / "k", stored) as (enrich, _):
            again = await run_all(enrich, first + second)
    assert paid_in_batch == len(second)  # the online answers answered the batch run
    assert api.stats["requests"] == online_calls == len(first)  # and the batch ones online
    assert {t: batch[t] for t in first} == online and again == batch


async def test_max_cost_counts_a_batch_as_it_is_created(tmp_path):
    """Two batches of 20 are due at once and the budget covers one and a half at the
    batch price: the second is never created, its records meet the spent budget."""
    config = _config(batch_size=20)
    units = math.ceil(config.cost(prompt_tokens('{"title": "mail 10"}') + 20, 256) * COST_UNITS)
    api = ModelApi(batch_knobs=BatchKnobs(process_s=0.2))
    async with run_model_api(api) as base:
        budget = RequestBudget(allowance=30 * units, what="cost")
        async with enricher(base, config, tmp_path, cost_budget=budget) as (enrich, _):
            found = await run_all(enrich, TITLES[:40])
    outcomes = Counter(v if isinstance(v, str) else "answered" for v in found.values())
    assert outcomes == {"answered": 20, "BudgetExhausted": 20}
    assert api.batches.jobs.stats()["batches_created"] == 1
    assert 0 < budget.left < 30 * units  # the batch settled by its usage


async def test_anthropic_re_attach_takes_the_oldest_batch_of_its_size_above_the_one_before(
    tmp_path,
):
    """Killed after the create call, before its id was written: other batches of the same
    and of another size created since do not mislead the retry."""
    api = ModelApi(batch_knobs=BatchKnobs(process_s=0.3))
    config = _config(api="anthropic")
    async with run_model_api(api) as base, aiohttp.ClientSession() as other:
        async with other.post(f"{base}/messages/batches", json=_anthropic_batch("old", 7)):
            pass  # listed before ours: where the search stops
        api.batches.stall_at.add("create")
        async with enricher(base, config, tmp_path) as (enrich, _):
            killed = asyncio.ensure_future(run_all(enrich, TITLES))
            await _reached(api, "create")
            killed.cancel()
            with pytest.raises(asyncio.CancelledError):
                await killed
        api.batches.stall_at.clear()
        for name, size in (("same", len(TITLES)), ("other", 5)):  # newer than ours
            async with other.post(f"{base}/messages/batches", json=_anthropic_batch(name, size)):
                pass
        async with enricher(base, config, tmp_path) as (enrich, _):
            found = await run_all(enrich, TITLES)
    assert all(isinstance(v, dict) for v in found.values())
    stats = api.batches.jobs.stats()
    assert stats["batches_created"] == 4 and stats["custom_ids_paid_twice"] == 0


def _anthropic_batch(name: str, size: int) -> dict[str, Any]:
    params = {"model": "demo", "max_tokens": 9, "messages": [{"role": "user", "content": name}]}
    return {"requests": [{"custom_id": f"{name}{i}", "params": params} for i in range(size)]}


@pytest.mark.parametrize("api_kind", ["chat", "anthropic"])
async def test_a_detached_run_leaves_its_batches_running_and_the_next_reads_them(
    tmp_path, api_kind
):
    """``--detach-batches``: each record whose batch still runs raises BatchRunning (the
    runner keeps it for the next run), the journal names the batches waited for, and a
    run after they ended reads their rows without creating or paying anything again."""
    api = ModelApi(batch_knobs=BatchKnobs(process_s=1.0, max_requests=25))
    config = _config(api=api_kind, batch_size=25)
    async with run_model_api(api) as base:
        async with enricher(base, _config("online", api=api_kind), tmp_path / "a") as (e, _):
            expected = await run_all(e, TITLES)
        async with enricher(base, config, tmp_path / "b", detach=True) as (enrich, _):
            detached = await run_all(enrich, TITLES)
        created = api.batches.jobs.stats()["batches_created"]
        (fs, _), root = url_to_fs(str(tmp_path / "b")), tmp_path / "b"
        waited = batches_waited_for(fs, str(root))
        await asyncio.sleep(1.5)  # the batches end
        async with enricher(base, config, tmp_path / "b") as (enrich, _):
            found = await run_all(enrich, TITLES)
    assert set(detached.values()) == {BatchRunning.__name__}
    assert created == 3 and len(waited) == 3
    assert found == expected
    stats = api.batches.jobs.stats()
    assert stats["batches_created"] == created and stats["custom_ids_paid_twice"] == 0
    assert batches_waited_for(fs, str(root)) == []  # each seen ending
