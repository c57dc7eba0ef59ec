"""LRU cache and in-flight coalescing."""

import asyncio

import pytest

from spark_jobs.asyncwait import AsyncWaitOperator, Failure, Result, untimed
from spark_jobs.enrichers import RetryableError
from spark_jobs.enrichers.dedup import Coalescer, LruCache


def test_lru_evicts_the_least_recently_used():
    cache = LruCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recent
    cache.put("c", 3)
    assert cache.get("b") is None
    assert cache.get("a") == 1 and cache.get("c") == 3
    assert len(cache) == 2


def test_size_zero_keeps_nothing():
    cache = LruCache(0)
    cache.put("a", 1)
    assert cache.get("a") is None and len(cache) == 0
    with pytest.raises(ValueError):
        LruCache(-1)


async def test_identical_calls_in_flight_share_one_call():
    calls = []

    async def call(key):
        calls.append(key)
        await asyncio.sleep(0.01)
        return {"key": key}

    coalescer = Coalescer()
    results = await asyncio.gather(*(coalescer.run(k, call, k) for k in "aaabba"))
    assert calls == ["a", "b"]
    assert [r["key"] for r in results] == list("aaabba")
    assert coalescer.saved_calls == 4
    assert len(coalescer) == 0
    await coalescer.run("a", call, "a")  # nothing in flight any more: a new call
    assert calls == ["a", "b", "a"]


async def test_a_follower_s_timeout_pauses_while_the_leader_waits_for_a_slot():
    """The leader's wait for a slot (untimed) is its followers' wait too: none times out
    into a dead letter while no record is being worked on; the call itself still counts."""
    coalescer = Coalescer()
    slot_wait = {"a": 1.5, "b": 0.0}  # "a" queues behind the rate limit: three timeouts

    async def call(key):
        async with untimed():
            await asyncio.sleep(slot_wait.pop(key, 0.0))
        await asyncio.sleep(0.01 if key == "a" else 1.0)  # "b" answers after its timeout
        return key.upper()

    operator = AsyncWaitOperator(lambda key: coalescer.run(key, call, key), timeout=0.5)
    outputs = [o async for o in operator.run("aaabb") if isinstance(o, Result | Failure)]
    assert sorted(o.value for o in outputs if isinstance(o, Result)) == ["A", "A", "A"]
    assert sorted(o.record for o in outputs if isinstance(o, Failure)) == ["b", "b"]
    assert coalescer.saved_calls == 3


async def test_followers_share_the_leaders_error():
    async def fail():
        await asyncio.sleep(0.01)
        raise RetryableError("boom")

    coalescer = Coalescer()
    outcomes = await asyncio.gather(
        *(coalescer.run("k", fail) for _ in range(3)), return_exceptions=True
    )
    assert [str(o) for o in outcomes] == ["boom"] * 3


async def test_a_cancelled_leader_fails_followers_retryably_and_a_cancelled_follower_is_alone():
    release = asyncio.Event()

    async def slow():
        await release.wait()
        return 1

    coalescer = Coalescer()
    leader = asyncio.create_task(coalescer.run("k", slow))
    follower = asyncio.create_task(coalescer.run("k", slow))
    quitter = asyncio.create_task(coalescer.run("k", slow))
    await asyncio.sleep(0)
    quitter.cancel()
    await asyncio.sleep(0)
    leader.cancel()
    with pytest.raises(RetryableError, match="cancelled"):
        await follower
    assert quitter.cancelled() and leader.cancelled()

    # A follower giving up does not disturb the leader.
    leader = asyncio.create_task(coalescer.run("j", slow))
    quitter = asyncio.create_task(coalescer.run("j", slow))
    await asyncio.sleep(0)
    quitter.cancel()
    release.set()
    assert await leader == 1
