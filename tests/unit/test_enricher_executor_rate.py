"""A given rate shared by the tasks of one executor: one schedule across processes, at the
executor's share of the job's rate, which a task alone may use whole."""

import itertools
import multiprocessing
import os
import tempfile

import pytest

from spark_jobs.enrichers import executor_rate
from spark_jobs.enrichers.executor_rate import ExecutorSchedule, open_schedule
from spark_jobs.enrichers.rate_control import RateController

from .test_enricher_rate_control import FakeClock


def _take_slots(directory, rate, slots, count, start, queue):
    schedule = ExecutorSchedule(directory, rate, slots)
    queue.put([schedule.reserve(start) for _ in range(count)])


def test_processes_of_one_executor_take_distinct_send_times_at_its_share(tmp_path):
    """Two Python workers (processes) at once: 2 of 4 job slots, so half of 1 000/s."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    holder = ExecutorSchedule(tmp_path, 1000.0, 4)  # a third task holds a slot meanwhile
    workers = [
        context.Process(target=_take_slots, args=(tmp_path, 1000.0, 4, 200, 50.0, queue))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    times = sorted(queue.get(timeout=60) + queue.get(timeout=60))
    for worker in workers:
        worker.join(timeout=60)
    holder.close()
    assert len(set(times)) == 400
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 1 / 750 - 1e-9  # never faster than 3 slots of 4 allow
    assert times[-1] - times[0] <= 400 / 500 + 1e-6  # at least 2 slots seen throughout


def test_a_task_alone_keeps_the_share_of_the_slots_its_executor_has_shown(tmp_path):
    first, second = ExecutorSchedule(tmp_path, 100.0, 4), ExecutorSchedule(tmp_path, 100.0, 4)
    second.close()  # its neighbour is between tasks
    starts = [first.reserve(10.0) for _ in range(5)]
    assert starts == pytest.approx([10.0, 10.02, 10.04, 10.06, 10.08])  # 2 of 4 slots: 50/s
    third = ExecutorSchedule(tmp_path, 100.0, 4)  # takes the freed slot: still 2 seen
    assert third.reserve(10.0) == pytest.approx(10.1)
    assert not third.try_reserve(10.1) and third.try_reserve(10.12)
    first.close()
    third.close()


def test_an_executor_never_takes_more_than_the_slots_it_has_shown(tmp_path):
    only = ExecutorSchedule(tmp_path, 100.0, 4)  # one task at a time on this executor
    assert [only.reserve(0.0) for _ in range(3)] == pytest.approx([0.0, 0.04, 0.08])
    only.close()


def test_controllers_sharing_a_schedule_send_the_executors_rate_together(tmp_path):
    clock = FakeClock()
    schedules = [ExecutorSchedule(tmp_path, 100.0, 2) for _ in range(2)]
    pair = [RateController(100.0, shared=s, clock=clock) for s in schedules]
    due = sorted(c.reserve() for c in pair for _ in range(50))
    assert due[-1] == pytest.approx(0.99)  # 100 sends in a second, not 200
    alone = RateController(100.0, shared=schedules[0], clock=clock)
    clock.now += 2.0
    assert [alone.reserve() for _ in range(3)] == pytest.approx([0.0, 0.01, 0.02])
    for schedule in schedules:
        schedule.close()


def test_one_slot_shares_nothing_and_an_unusable_folder_falls_back(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert open_schedule("api", 100.0, 1) is None
    shared = open_schedule("api", 100.0, 2)
    assert shared is not None
    shared.close()
    blocked = tmp_path / "resumable-enrichment-rate"
    for folder in blocked.iterdir():
        for file in folder.iterdir():
            file.unlink()
        folder.rmdir()
    blocked.rmdir()
    blocked.write_text("a file where the folder goes")
    assert open_schedule("api", 100.0, 2) is None


def test_bad_rates_and_slots_are_refused(tmp_path):
    for rate, slots in ((0.0, 2), (float("nan"), 2), (10.0, 0)):
        with pytest.raises(ValueError, match="rate"):
            ExecutorSchedule(tmp_path, rate, slots)
    assert executor_rate.MAX_SLOTS >= os.cpu_count()
