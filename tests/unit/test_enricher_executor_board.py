"""The executor's board of found rate limits: a task left alone takes the share of one
that ended, a successor keeps it, a killed task stops counting, a hostile file is read as
nothing found, a failing one leaves each task on its own."""

import math
import multiprocessing
import os
import struct
import tempfile

from spark_jobs.enrichers.executor_board import GRACE_S, ExecutorBoard, open_board
from spark_jobs.enrichers.rate_control import RateController

from .test_enricher_rate_control import FakeClock, FixedWindowServer, ok_per_second, simulate


def _pair(tmp_path, clock, boards: bool):
    """Two partitions of one executor that have found their halves of a 200/s limit."""
    server = FixedWindowServer(200)
    made = [ExecutorBoard(tmp_path) if boards else None for _ in range(2)]
    survivor, neighbour = (RateController(clock=clock, board=board) for board in made)
    simulate(server, [survivor, neighbour], clock, 60)
    return server, survivor, made


def test_a_task_left_alone_takes_the_share_of_the_one_that_ended(tmp_path):
    """The lone tail of a stage: without the board the survivor's probe needs many
    seconds to pass its old half; with it the survivor is at the whole limit within a
    few seconds of the grace."""
    regained = {}
    for boards in (False, True):
        clock = FakeClock()
        server, survivor, made = _pair(tmp_path / str(boards), clock, boards)
        assert survivor.rate <= 0.7 * 200  # it had found about its half
        left_at = clock.now
        if made[1] is not None:
            made[1].leave(left_at)
        simulate(server, [survivor], clock, GRACE_S + 5)
        regained[boards] = ok_per_second(server, left_at + GRACE_S + 2, left_at + GRACE_S + 5)
    assert regained[True] >= 0.9 * 200 > regained[False]


def test_a_successor_within_the_grace_keeps_the_share_of_the_one_it_follows(tmp_path):
    clock = FakeClock()
    server, survivor, made = _pair(tmp_path, clock, True)
    share = survivor.ceiling_hint
    made[1].leave(clock.now)
    clock.now += GRACE_S / 2
    successor = RateController(learned=share, clock=clock, board=ExecutorBoard(tmp_path))
    simulate(server, [survivor, successor], clock, 10)
    fair = made[0].fair_share(clock.now)
    assert fair is not None and fair < 0.7 * 200  # two tasks share it still
    assert survivor.rate <= 0.7 * 200


def _join_then_die(directory, ready, die):
    board = ExecutorBoard(directory)
    board.publish(100.0, 10.0)
    ready.set()
    die.wait(60)
    os._exit(0)  # killed: it never leaves the board


def test_a_killed_task_counts_no_more_once_its_worker_is_gone(tmp_path):
    """A task counts while its process holds its slot; a killed worker's lock goes with
    it, whatever its entry still says."""
    context = multiprocessing.get_context("fork")
    ready, die = context.Event(), context.Event()
    worker = context.Process(target=_join_then_die, args=(tmp_path, ready, die))
    worker.start()
    assert ready.wait(60)
    board = ExecutorBoard(tmp_path)
    board.publish(100.0, 10.0)
    board.record_cut(100.0, 10.0)
    assert board.fair_share(10.5) == 100.0  # 200 over two
    die.set()
    worker.join(60)
    assert board.fair_share(10.5) == 200.0
    board.leave(11.0)


def test_no_total_before_a_cut_nor_long_after_it(tmp_path):
    board = ExecutorBoard(tmp_path)
    board.publish(100.0, 10.0)
    assert board.fair_share(10.0) is None
    board.record_cut(80.0, 10.0)
    assert board.fair_share(10.0) == 80.0
    board.publish(80.0, 100.0)
    assert board.fair_share(100.0) is None  # 90 s after the cut: forgotten


def test_a_hostile_board_file_is_read_as_nothing_found(tmp_path):
    """NaN, negative and infinite numbers, a torn entry and a huge file: no share
    raised, no task stopped."""
    (tmp_path / "board").write_bytes(
        struct.pack("<dd", math.nan, 5.0)
        + struct.pack("<ddd", -1.0, 5.0, 0.0)
        + struct.pack("<ddd", math.inf, 5.0, 0.0)
        + b"\x00" * 7
    )
    board = ExecutorBoard(tmp_path)
    assert board.fair_share(5.0) is None
    (tmp_path / "board").write_bytes(struct.pack("<dd", 1e6, 5.0) + b"\xff" * (2 << 20))
    assert board.fair_share(5.0) is None  # 0xff..: NaNs, and no entry counts
    board.publish(10.0, 5.0)
    assert board.fair_share(5.0) == 1e6
    board.leave(5.0)


def test_an_unusable_folder_or_a_failing_file_leaves_each_task_on_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "resumable-enrichment-rate").write_text("a file where the folder goes")
    assert open_board("api") is None
    board = ExecutorBoard(tmp_path / "board-folder")
    os.close(board._fd)  # the file fails under it (a closed descriptor: EBADF)
    board.publish(100.0, 5.0)
    board.record_cut(100.0, 5.0)
    assert board.fair_share(5.0) is None
    board._fd = os.open(os.devnull, os.O_RDONLY)  # leave() closes it
    board.leave(6.0)
