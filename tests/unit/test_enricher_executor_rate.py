"""A given rate shared by the tasks of one executor: one schedule across processes, at the
executor's share of the job's rate, which a task alone may use whole."""

import itertools
import logging
import math
import multiprocessing
import os
import struct
import tempfile

import pytest

from spark_jobs.enrichers import executor_rate
from spark_jobs.enrichers.executor_rate import ExecutorSchedule, open_schedule
from spark_jobs.enrichers.private_dir import FOLDER_PREFIX, PrivateFolder
from spark_jobs.enrichers.rate_control import RateController

from .test_enricher_rate_control import FakeClock


def executor_schedule(directory, rate, slots):
    return ExecutorSchedule(PrivateFolder.open(directory), rate, slots)


def _take_slots(directory, rate, slots, count, start, queue):
    schedule = executor_schedule(directory, rate, slots)
    queue.put([schedule.reserve(start) for _ in range(count)])


def test_processes_of_one_executor_take_distinct_send_times_at_its_share(tmp_path):
    """Two Python workers (processes) at once: 2 of 4 job slots, so half of 1 000/s."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    holder = executor_schedule(tmp_path, 1000.0, 4)  # a third task holds a slot meanwhile
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
    first, second = executor_schedule(tmp_path, 100.0, 4), executor_schedule(tmp_path, 100.0, 4)
    second.close()  # its neighbour is between tasks
    starts = [first.reserve(10.0) for _ in range(5)]
    assert starts == pytest.approx([10.0, 10.02, 10.04, 10.06, 10.08])  # 2 of 4 slots: 50/s
    third = executor_schedule(tmp_path, 100.0, 4)  # takes the freed slot: still 2 seen
    assert third.reserve(10.0) == pytest.approx(10.1)
    assert not third.try_reserve(10.1) and third.try_reserve(10.12)
    first.close()
    third.close()


def test_an_executor_never_takes_more_than_the_slots_it_has_shown(tmp_path):
    only = executor_schedule(tmp_path, 100.0, 4)  # one task at a time on this executor
    assert [only.reserve(0.0) for _ in range(3)] == pytest.approx([0.0, 0.04, 0.08])
    only.close()


def test_controllers_sharing_a_schedule_send_the_executors_rate_together(tmp_path):
    clock = FakeClock()
    schedules = [executor_schedule(tmp_path, 100.0, 2) for _ in range(2)]
    pair = [RateController(100.0, shared=s, clock=clock) for s in schedules]
    due = sorted(c.reserve() for c in pair for _ in range(50))
    assert due[-1] == pytest.approx(0.99)  # 100 sends in a second, not 200
    alone = RateController(100.0, shared=schedules[0], clock=clock)
    clock.now += 2.0
    assert [alone.reserve() for _ in range(3)] == pytest.approx([0.0, 0.01, 0.02])
    for shared in schedules:
        shared.close()


def test_one_slot_shares_nothing_and_an_unusable_folder_falls_back(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    assert open_schedule("api", 100.0, 1) is None
    shared = open_schedule("api", 100.0, 2)
    assert shared is not None
    shared.close()
    blocked = tmp_path / f"{FOLDER_PREFIX}{os.getuid()}"
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
            executor_schedule(tmp_path, rate, slots)
    assert executor_rate.MAX_SLOTS >= os.cpu_count()


@pytest.mark.parametrize(
    "content",
    [
        struct.pack("<dq", -1.0, 2),
        struct.pack("<dq", math.nan, 2),
        struct.pack("<dq", math.inf, 2),
        struct.pack("<dq", 10.0, executor_rate.MAX_SLOTS + 1),
        b"\x00" * 7,  # torn
        struct.pack("<dq", 10.0, 2) + b"\x00",  # grown
    ],
)
def test_a_malformed_schedule_is_replaced_with_a_warning(tmp_path, caplog, content):
    """Read as no schedule yet, not trusted: the first send goes when asked."""
    schedule_file = tmp_path / "schedule"
    schedule_file.write_bytes(content)
    schedule_file.chmod(0o600)  # the user's own file, but not a schedule
    with caplog.at_level(logging.WARNING):
        shared = executor_schedule(tmp_path, 100.0, 2)
        assert shared.reserve(5.0) == 5.0
    assert any(str(schedule_file) in r.getMessage() for r in caplog.records)
    assert len(schedule_file.read_bytes()) == struct.calcsize("<dq")
    shared.close()


def _open_and_take(local_dirs, count, queue):
    os.environ["SPARK_LOCAL_DIRS"] = local_dirs
    schedule = open_schedule("api", 1000.0, 4)
    assert schedule is not None
    queue.put([schedule.reserve(50.0) for _ in range(count)])


def test_two_workers_share_the_schedule_in_sparks_local_dir(tmp_path):
    """As the Python workers of one executor do (children of one daemon), through
    ``open_schedule`` and the private folder under ``SPARK_LOCAL_DIRS``."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [
        context.Process(target=_open_and_take, args=(str(tmp_path), 100, queue)) for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    times = sorted(queue.get(timeout=60) + queue.get(timeout=60))
    for worker in workers:
        worker.join(timeout=60)
    assert len(set(times)) == 200  # one schedule: no send time taken twice
    assert (tmp_path / f"{FOLDER_PREFIX}{os.getuid()}").is_dir()
