"""A spent account through the real job (Spark local[2], a loopback API answering as OpenAI
documents an account without credit): the run fails within seconds naming the provider's
code and message, publishes nothing, keeps its snapshots, and once the account is funded
the next run resumes and calls those records again. And, through the HTTP enricher, a
429 ``rate_limit_exceeded`` is still a throttle that is retried."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from spark_jobs.asyncwait import AsyncWaitOperator, Failure, Result
from spark_jobs.enrichers import HttpEnricher, HttpEnricherConfig, default_retry_strategy
from spark_jobs.exit_status import ExitStatus
from spark_jobs.snapshots import NamespaceKey, SnapshotStore

from .job_support import job_args, read_output, run_job, write_input
from .provider_account import QUOTA, ProviderAccount

KEY = NamespaceKey("manual", "enrich", "default")


@pytest.mark.spark
@pytest.mark.slow
def test_a_spent_account_fails_the_run_in_seconds_and_the_funded_run_resumes(tmp_path):
    ids = [f"k{i:05d}" for i in range(4000)]
    write_input(tmp_path / "in" / "part.jsonl", ids)
    with ProviderAccount(spent=True) as api:
        args = job_args(tmp_path, api.url, "--partitions", "2", "--capacity", "10")
        code, log = run_job(args)
        ended = time.monotonic()
        spent_calls = sum(api.calls.values())
        assert code == ExitStatus.SYSTEMIC_FAILURE, log[-3000:]
        assert api.first_call is not None and ended - api.first_call < 30, "within seconds"
        assert spent_calls <= 100, spent_calls
        assert f"429 insufficient_quota: {QUOTA}" in log, log[-3000:]
        assert "account-level failure" in log and "Nothing was published" in log
        assert not list(tmp_path.glob("out*")), "nothing published, no run folder left"
        partitions = SnapshotStore(str(tmp_path / "snapshots")).namespace_progress(KEY)
        assert partitions, "the snapshots are kept"
        assert sum(p.committed_rows + p.dead_letter_rows for p in partitions) == 0
        print(f"\nspent account: exit {code} after {spent_calls} calls")

        api.spent = False  # the account is funded
        code, log = run_job(args)
        assert code == 0, log[-3000:]
        assert "resuming epoch" in log
        calls = api.calls
    data, dead, summary = read_output(tmp_path / "out")
    assert dead == [] and summary["dead_letters"] == 0, "no record was a dead letter"
    assert Counter(r["id"] for r in data) == Counter(ids)
    funded = calls - Counter({k: 1 for k in calls})  # each record's spent call, if it had one
    assert set(funded.values()) <= {1}, "each record answered once the account was funded"


async def test_a_rate_limit_429_is_retried_and_a_spent_quota_429_never_is() -> None:
    records = [{"id": f"c{i}"} for i in range(6)]
    retry = default_retry_strategy(max_attempts=2, initial_delay=0.01, max_delay=0.05)
    for spent in (False, True):
        provider = ProviderAccount(spent=spent, rate_limited=3)
        await asyncio.to_thread(provider.__enter__)
        try:
            config = HttpEnricherConfig(
                url_template=provider.url + "/customers/{id}", response_fields={"name": "$.name"}
            )
            async with HttpEnricher(config) as enrich:
                operator = AsyncWaitOperator(enrich, capacity=4, retry=retry, timeout=20)
                outputs: list[Any] = [o async for o in operator.run(records)][:-1]
        finally:
            await asyncio.to_thread(provider.__exit__)
        if spent:
            assert all(isinstance(o, Failure) and not o.transient for o in outputs), outputs
            assert all(
                o.error.startswith("AccountError: HTTP 429 insufficient_quota") for o in outputs
            )
            assert provider.calls == Counter(r["id"] for r in records), "one call each"
        else:
            assert all(isinstance(o, Result) for o in outputs), outputs
            assert provider.calls == Counter({r["id"]: 4 for r in records}), "3 throttled, 1 paid"
