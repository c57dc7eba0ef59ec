"""The run's request budget as a ledger on the snapshot storage (a real local directory):
concurrent claimers never get more than the budget, parts given back reach skewed
partitions, and a resumed attempt continues the run's ledger."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileSystem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_jobs.enrichers import BudgetExhausted, RequestBudget
from spark_jobs.snapshots.budget_ledger import (
    BUDGET_DIR,
    BudgetLedger,
    chunk_size,
    create_exclusively,
    discard_other_runs,
)

FS = LocalFileSystem()


def ledger(root: str, total: int, chunk: int, run_id: str = "run-1") -> BudgetLedger:
    return BudgetLedger(FS, f"{root}/ns", run_id, total, chunk)


def take_until(book: BudgetLedger, need: int, owner: str) -> int:
    """A partition that needs ``need`` calls: claims until it has them or none is left,
    spends, and gives back what it claimed beyond its need. Returns what it spent."""
    held = spent = 0
    while spent < need:
        if held == 0:
            held = book.claim(owner)
            if held == 0:
                return spent
        used = min(held, need - spent)
        spent, held = spent + used, held - used
    book.give_back(held)
    return spent


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    total=st.integers(1, 200),
    running=st.integers(1, 4),
    needs=st.lists(st.integers(0, 120), min_size=2, max_size=6),
)
def test_concurrent_claimers_never_spend_more_than_the_budget(total, running, needs):
    chunk = chunk_size(total, running)
    with tempfile.TemporaryDirectory() as root:
        spent = [0] * len(needs)
        start = threading.Barrier(len(needs))

        def partition(number: int) -> None:
            book = ledger(root, total, chunk)  # each attempt has its own instance
            start.wait()
            spent[number] = take_until(book, needs[number], f"p{number}")

        threads = [threading.Thread(target=partition, args=(n,)) for n in range(len(needs))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(spent) <= total
        starved = [n for n, need in enumerate(needs) if spent[n] < need]
        if starved:  # unspent only in chunks others held when the starved one stopped
            assert total - sum(spent) < chunk * len(needs)
        chunks = sorted(p.name for p in (Path(root) / "ns" / BUDGET_DIR / "run-1").glob("chunk-*"))
        assert chunks == [f"chunk-{i:06d}" for i in range(len(chunks))]
        assert len(chunks) <= book_chunks(total, chunk)


def book_chunks(total: int, chunk: int) -> int:
    return -(-total // chunk)


@settings(max_examples=40, deadline=None)
@given(total=st.integers(1, 300), running=st.integers(1, 4), needs=st.lists(st.integers(0, 150)))
def test_skewed_partitions_in_turn_get_every_request_the_budget_holds(total, running, needs):
    """Partitions running one after another (the tail of a skewed stage): what finished
    ones did not spend reaches the ones that need it, so none starves while the budget
    suffices, and none gets more than the budget leaves."""
    with tempfile.TemporaryDirectory() as root:
        chunk = chunk_size(total, running)
        spent = [
            take_until(ledger(root, total, chunk), need, f"p{n}") for n, need in enumerate(needs)
        ]
        if sum(needs) <= total:
            assert spent == needs
        else:
            assert sum(spent) == total


def test_a_resumed_attempt_continues_the_ledger_and_a_new_run_starts_its_own(tmp_path):
    root = str(tmp_path)
    first = ledger(root, 100, 30)
    assert [first.claim("p0 a0"), first.claim("p0 a0")] == [30, 30]
    # The attempt dies; its retry (a new instance, same run) counts those as spent.
    retry = ledger(root, 100, 30)
    assert [retry.claim("p0 a1"), retry.claim("p0 a1"), retry.claim("p0 a1")] == [30, 10, 0]
    retry.give_back(7)
    other = ledger(root, 100, 30)
    assert [other.claim("p1 a0"), other.claim("p1 a0")] == [7, 0]
    assert ledger(root, 100, 30, run_id="run-2").claim("p0 a0") == 30
    discard_other_runs(root, f"{root}/ns", "run-2")
    assert sorted(p.name for p in (tmp_path / "ns" / BUDGET_DIR).iterdir()) == ["run-2"]


def test_an_unreadable_part_given_back_is_not_spent(tmp_path, caplog):
    book = ledger(str(tmp_path), 10, 10)
    assert book.claim("p0") == 10
    directory = tmp_path / "ns" / BUDGET_DIR / "run-1"
    (directory / "left-0123abcd").write_text("{not json")
    (directory / "left-4567cdef").write_text('{"requests": 11}')  # more than a chunk
    assert book.claim("p1") == 0
    assert "left-0123abcd" in caplog.text and "left-4567cdef" in caplog.text


def test_create_exclusively_lets_one_of_many_writers_win(tmp_path):
    won = []
    start = threading.Barrier(8)

    def write(n: int) -> None:
        start.wait()
        if create_exclusively(FS, str(tmp_path / "d"), "claim", f"writer {n}".encode()):
            won.append(n)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    assert (tmp_path / "d" / "claim").read_text() == f"writer {won[0]}"
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["claim"]  # no temporary left


def test_chunk_size_gives_each_slot_several_chunks():
    assert chunk_size(250, 2) == 16
    assert chunk_size(1_000_000, 2_000) == 63
    assert chunk_size(3, 1_000) == 1


def test_a_request_budget_refills_one_claim_at_a_time_and_stops_when_spent():
    grants = iter([5, 3, 0])
    inside, most = 0, 0

    def claim() -> int:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        try:
            return next(grants)
        finally:
            inside -= 1

    async def main() -> tuple[int, int]:
        budget = RequestBudget(claim=claim)
        outcomes = await asyncio.gather(
            *(budget.spend() for _ in range(12)), return_exceptions=True
        )
        refused = sum(isinstance(o, BudgetExhausted) for o in outcomes)
        return refused, budget.granted

    refused, granted = asyncio.run(main())
    assert (refused, granted, most) == (4, 8, 1)


def test_closing_a_request_budget_hands_back_the_rest_and_claims_no_more():
    claims = []
    budget = RequestBudget(claim=lambda: claims.append(1) or 10)

    async def spend_two() -> None:
        await budget.spend()
        await budget.spend()

    asyncio.run(spend_two())
    assert budget.close() == 8
    with pytest.raises(BudgetExhausted):
        asyncio.run(budget.spend())
    assert claims == [1]


def test_a_fixed_request_budget_without_a_ledger_is_all_there_is():
    budget = RequestBudget(2)

    async def spend(times: int) -> None:
        for _ in range(times):
            await budget.spend()

    asyncio.run(spend(2))
    with pytest.raises(BudgetExhausted, match="request budget is spent"):
        asyncio.run(spend(1))
