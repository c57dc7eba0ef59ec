"""The executor's board of found rate limits: a task left alone takes the share of one
that ended at once, a newcomer takes its share without a round of 429s, a neighbour that
wants no more leaves the rest of its share, a killed task stops counting, a hostile file
is read as nothing found, a failing one leaves each task on its own."""

import logging
import math
import multiprocessing
import os
import struct
import tempfile

from spark_jobs.enrichers.executor_board import FRESH_S, ExecutorBoard, open_board
from spark_jobs.enrichers.private_dir import FOLDER_PREFIX, PrivateFolder
from spark_jobs.enrichers.rate_control import RateController

from .test_enricher_rate_control import FakeClock, FixedWindowServer, ok_per_second, simulate


def board_in(directory):
    return ExecutorBoard(PrivateFolder.open(directory))


def _pair(tmp_path, clock, boards: bool):
    """Two partitions of one executor that have found their halves of a 200/s limit."""
    server = FixedWindowServer(200)
    made = [board_in(tmp_path) if boards else None for _ in range(2)]
    survivor, neighbour = (RateController(clock=clock, board=board) for board in made)
    simulate(server, [survivor, neighbour], clock, 60)
    return server, survivor, made


def test_a_task_left_alone_takes_the_share_of_the_one_that_ended(tmp_path):
    """The lone tail of a stage: without the board the survivor's probe needs many
    seconds to pass its old half; with it the survivor climbs to the whole limit at once
    (its approach, 3 s later)."""
    regained = {}
    for boards in (False, True):
        clock = FakeClock()
        server, survivor, made = _pair(tmp_path / str(boards), clock, boards)
        assert survivor.rate <= 0.7 * 200  # it had found about its half
        left_at = clock.now
        if made[1] is not None:
            made[1].leave()
        simulate(server, [survivor], clock, 6)
        regained[boards] = ok_per_second(server, left_at + 3, left_at + 6)
    assert regained[True] >= 0.9 * 200 > regained[False]


def test_a_newcomer_takes_its_share_and_the_others_give_way_before_any_429(tmp_path):
    """A task that joins (at its first send) starts at the executor's fair share, and
    the one that had the executor to itself halves its rate at its next tick: the
    limit's windows stay within it, where a newcomer at its predecessor's whole share
    would meet 429s."""
    clock = FakeClock()
    server, survivor, made = _pair(tmp_path, clock, True)
    made[1].leave()
    simulate(server, [survivor], clock, 10)
    assert survivor.ceiling_hint >= 0.9 * 200  # the share it holds: all of it
    throttled_before = server.throttled
    newcomer = RateController(learned=200.0, clock=clock, board=board_in(tmp_path))
    simulate(server, [survivor], clock, 2)  # reading its input: it takes no share yet
    assert survivor.ceiling_hint >= 0.9 * 200
    newcomer.reserve()  # its first send: it joins
    assert newcomer.rate <= 0.55 * 200  # the fair share, not the predecessor's 200
    simulate(server, [survivor, newcomer], clock, 1)
    assert survivor.rate <= 0.55 * 200
    assert server.throttled - throttled_before <= 0.02 * 200


def test_a_neighbour_that_wants_no_more_leaves_the_rest_of_its_share(tmp_path):
    """Max-min fair: a neighbour waiting on its last records (its pace holds nothing
    back) keeps what it uses, the rest is this task's; a silent one uses nothing."""
    mine, theirs = board_in(tmp_path), board_in(tmp_path)
    theirs.publish(100.0, 10.0, True)
    mine.publish(100.0, 10.0, True)
    mine.record_cut(100.0, 10.0)  # the wanting neighbour is taken to have cut as well
    assert mine.fair_share(10.0) == 100.0
    theirs.publish(20.0, 10.5, False)
    assert mine.fair_share(10.5) == 180.0
    assert mine.fair_share(10.5 + FRESH_S + 0.1) == 200.0  # it has sent nothing since
    theirs.publish(0.0, 12.0, True)  # it sends again, wanting its share
    assert mine.fair_share(12.0) == 100.0
    for board in (mine, theirs):
        board.leave()


def _join_then_die(directory, ready, die):
    board = board_in(directory)
    board.publish(100.0, 10.0, True)
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
    board = board_in(tmp_path)
    board.publish(100.0, 10.0, True)
    board.record_cut(100.0, 10.0)
    assert board.fair_share(10.5) == 100.0  # 200 over two
    die.set()
    worker.join(60)
    assert board.fair_share(10.5) == 200.0
    board.leave()


def test_no_total_before_a_cut_nor_long_after_it(tmp_path):
    board = board_in(tmp_path)
    board.publish(100.0, 10.0, True)
    assert board.fair_share(10.0) is None
    board.record_cut(80.0, 10.0)
    assert board.fair_share(10.0) == 80.0
    board.publish(80.0, 100.0, True)
    assert board.fair_share(100.0) is None  # 90 s after the cut: forgotten


def test_a_hostile_board_file_is_read_as_nothing_found(tmp_path, caplog):
    """NaN, negative and infinite numbers, a torn entry and a huge file: no share
    raised, no task stopped."""
    board_file = tmp_path / "board"
    board_file.write_bytes(
        struct.pack("<dd", math.nan, 5.0)
        + struct.pack("<ddd", -1.0, 5.0, 0.0)
        + struct.pack("<ddd", math.inf, 5.0, 0.0)
        + b"\x00" * 7
    )
    board_file.chmod(0o600)  # the user's own file: read, not replaced
    board = board_in(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert board.fair_share(5.0) is None
    assert [str(board_file) in r.getMessage() for r in caplog.records] == [True]  # once
    board_file.write_bytes(struct.pack("<dd", 1e6, 5.0) + b"\xff" * (2 << 20))
    assert board.fair_share(5.0) is None  # 0xff..: NaNs, and no entry counts
    board.publish(10.0, 5.0, True)
    assert board.fair_share(5.0) == 1e6
    board.leave()


def test_an_unusable_folder_or_a_failing_file_leaves_each_task_on_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    (tmp_path / f"{FOLDER_PREFIX}{os.getuid()}").write_text("a file where the folder goes")
    assert open_board("api") is None
    board = board_in(tmp_path / "board-folder")
    os.close(board._fd)  # the file fails under it (a closed descriptor: EBADF)
    board.publish(100.0, 5.0, True)
    board.record_cut(100.0, 5.0)
    assert board.fair_share(5.0) is None
    board._fd = os.open(os.devnull, os.O_RDONLY)  # leave() closes it
    board.leave()
