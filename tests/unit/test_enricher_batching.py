"""Batcher: size, weight and time triggers, per-key outcomes, shared batch failures."""

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.asyncwait import AsyncWaitOperator, Result, untimed
from spark_jobs.enrichers.batching import BatchAnswerMissing, Batcher


class Recorder:
    def __init__(self, fail=None):
        self.batches = []
        self.fail = fail

    async def __call__(self, keys):
        self.batches.append(keys)
        await asyncio.sleep(0.001)
        if self.fail is not None:
            raise self.fail
        return {k: (KeyError(k) if k.startswith("bad") else k.upper()) for k in keys if k != "lost"}


async def test_full_batches_go_at_once_and_the_rest_after_max_wait():
    send = Recorder()
    batcher = Batcher(send, size=3, max_wait=0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    results = await asyncio.gather(*(batcher.submit(k) for k in ["a", "b", "c", "d"]))
    elapsed = loop.time() - started
    assert results == ["A", "B", "C", "D"]
    assert send.batches == [["a", "b", "c"], ["d"]]
    assert 0.04 <= elapsed < 0.5


async def test_each_caller_gets_its_own_outcome_and_duplicates_are_asked_once():
    send = Recorder()
    batcher = Batcher(send, size=10, max_wait=0.01)
    outcomes = await asyncio.gather(
        *(batcher.submit(k) for k in ["a", "bad1", "a", "lost"]), return_exceptions=True
    )
    assert send.batches == [["a", "bad1", "lost"]]
    assert outcomes[0] == outcomes[2] == "A"
    assert isinstance(outcomes[1], KeyError)
    assert isinstance(outcomes[3], BatchAnswerMissing)


async def test_a_failed_batch_fails_every_caller():
    batcher = Batcher(Recorder(fail=ConnectionError("reset")), size=2, max_wait=0.01)
    outcomes = await asyncio.gather(*(batcher.submit(k) for k in "xyz"), return_exceptions=True)
    assert all(isinstance(o, ConnectionError) for o in outcomes)


async def test_a_caller_that_gives_up_does_not_disturb_its_batch():
    batcher = Batcher(Recorder(), size=10, max_wait=0.02)
    quitter = asyncio.create_task(batcher.submit("q"))
    stayer = asyncio.create_task(batcher.submit("s"))
    await asyncio.sleep(0)
    quitter.cancel()
    assert await stayer == "S"
    assert quitter.cancelled()


async def test_a_batch_waiting_for_a_rate_slot_pauses_every_caller_s_timeout():
    """The batch's wait for a slot (untimed) is each of its records' wait, not only the
    one's whose context its task was made in: no record times out into a dead letter."""

    async def rate_limited(keys):
        async with untimed():
            await asyncio.sleep(1.5)  # queued behind the rate limit: three timeouts
        return {k: k.upper() for k in keys}

    for size in (4, 8):  # sent when full (by the last caller), or after max_wait (the first)
        batcher = Batcher(rate_limited, size=size, max_wait=0.01)
        operator = AsyncWaitOperator(batcher.submit, timeout=0.5)
        outputs = [o async for o in operator.run("abcd")]
        assert [o.value for o in outputs if isinstance(o, Result)] == list("ABCD"), outputs


async def test_aclose_cancels_waiting_callers():
    batcher = Batcher(Recorder(), size=10, max_wait=10)
    waiting = asyncio.create_task(batcher.submit("a"))
    await asyncio.sleep(0)
    await batcher.aclose()
    with pytest.raises(asyncio.CancelledError):
        await waiting


def test_bad_settings():
    with pytest.raises(ValueError, match="size"):
        Batcher(Recorder(), size=0, max_wait=1)
    with pytest.raises(ValueError, match="max_wait"):
        Batcher(Recorder(), size=1, max_wait=0)
    with pytest.raises(ValueError, match="max_weight"):
        Batcher(Recorder(), size=1, max_wait=1, weight=len)
    with pytest.raises(ValueError, match="max_weight"):
        Batcher(Recorder(), size=1, max_wait=1, weight=len, max_weight=0)


# -- a weight budget beside the count (an embeddings request's tokens) ---------------------


async def test_a_key_that_would_pass_the_weight_budget_sends_the_waiting_batch_first():
    send = Recorder()
    batcher = Batcher(send, size=10, max_wait=0.01, weight=len, max_weight=6)
    keys = ["aa", "bbb", "cc", "dddddddd", "e"]
    results = await asyncio.gather(*(batcher.submit(k) for k in keys))
    assert results == [k.upper() for k in keys]
    # "cc" would carry 5 to 7; "dddddddd" weighs 8 on its own and goes alone
    assert send.batches == [["aa", "bbb"], ["cc"], ["dddddddd"], ["e"]]


async def test_a_batch_that_reaches_the_weight_budget_goes_at_once():
    send = Recorder()
    batcher = Batcher(send, size=10, max_wait=10, weight=len, max_weight=4)
    assert await asyncio.wait_for(batcher.submit("abcd"), 1) == "ABCD"
    assert send.batches == [["abcd"]]


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.text("ab", min_size=1, max_size=6), min_size=1, max_size=40),
    size=st.integers(1, 8),
    max_weight=st.integers(1, 12),
    stagger=st.lists(st.booleans(), max_size=40),
)
def test_every_key_is_answered_once_within_count_and_weight_in_arrival_order(
    keys, size, max_weight, stagger
):
    """Whatever the arrival pattern: each caller its own answer, each key asked once per
    batch, batches within ``size`` and ``max_weight`` (but a key heavier on its own),
    and the keys of all batches in arrival order."""

    async def run():
        send = Recorder()
        batcher = Batcher(send, size=size, max_wait=0.001, weight=len, max_weight=max_weight)
        callers = []
        for i, key in enumerate(keys):
            callers.append(asyncio.create_task(batcher.submit(key)))
            if i < len(stagger) and stagger[i]:
                await asyncio.sleep(0.002)  # let a partial batch go on its timer
        return send.batches, await asyncio.gather(*callers)

    batches, results = asyncio.run(run())
    assert results == [k.upper() for k in keys]
    for batch in batches:
        assert len(batch) == len(set(batch)) <= size
        assert len(batch) == 1 or sum(map(len, batch)) <= max_weight
    first_seen = list(dict.fromkeys(keys))
    sent = [k for batch in batches for k in batch]
    assert sorted(set(sent)) == sorted(first_seen)
    assert [k for k in dict.fromkeys(sent)] == [k for k in first_seen if k in sent]
