"""Batcher: size and time triggers, per-key outcomes, shared batch failures."""

import asyncio

import pytest

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
