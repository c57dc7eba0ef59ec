"""The neighbours a partition shares an API's rate with (``enrichers/rate_sharing.py``),
in process and across an executor's Python workers, one suite over both: a given rate
follows the partitions actually sending; a partition left alone takes the share of one
that ended; a newcomer takes its share before any 429; the successor starts at the share
found, which is forgotten after ``MAX_AGE_S``; across processes, a killed task counts no
more once its worker is gone, a hostile file is read as nothing found and an unusable
folder or file leaves each task on its own."""

import itertools
import logging
import math
import multiprocessing
import os
import struct
import time

import pytest

from spark_jobs.enrichers import rate_sharing
from spark_jobs.enrichers.config import HttpEnricherConfig
from spark_jobs.enrichers.private_dir import FOLDER_PREFIX, PrivateFolder
from spark_jobs.enrichers.rate_control import RateController
from spark_jobs.enrichers.rate_sharing import (
    FRESH_S,
    MAX_AGE_S,
    ExecutorNeighbours,
    Found,
    ProcessNeighbours,
    open_neighbours,
)
from spark_jobs.enrichers.sender import RequestSender

from .test_enricher_rate_control import FakeClock, FixedWindowServer, ok_per_second, simulate

HEAD = struct.Struct("<7d")  # the file's header, as the module writes it


def in_folder(directory, per_slot=None, slots=1):
    return ExecutorNeighbours(PrivateFolder.open(directory), "api", per_slot, slots)


@pytest.fixture(params=["process", "executor"])
def make(request, tmp_path):
    """Neighbours of the API ``api``: ``make(per_slot, slots)`` is one more partition."""
    if request.param == "process":
        return lambda per_slot=None, slots=1: ProcessNeighbours("api", per_slot, slots)
    return lambda per_slot=None, slots=1: in_folder(tmp_path, per_slot, slots)


def config(url="http://api.test:8080/v1/{id}", **extra):
    fields = {"url_template": url, "response_fields": {"city": "$.city"}}
    return HttpEnricherConfig.from_dict({**fields, **extra})


# -- a given rate ----------------------------------------------------------------------


def test_a_partition_alone_keeps_the_share_of_the_slots_shown_at_once(make):
    first, second = make(25.0, 4), make(25.0, 4)  # 100/s over 4 slots
    second.leave(None, 0.0)  # its neighbour is between tasks
    starts = [first.reserve(10.0) for _ in range(5)]
    assert starts == pytest.approx([10.0, 10.02, 10.04, 10.06, 10.08])  # 2 of 4 slots: 50/s
    third = make(25.0, 4)  # takes the freed slot: still 2 seen
    assert third.reserve(10.0) == pytest.approx(10.1)
    assert not third.try_reserve(10.1) and third.try_reserve(10.12)
    for left in (first, third):
        left.leave(None, 11.0)


def test_neighbours_never_take_more_than_the_slots_they_have_shown(make):
    only = make(25.0, 4)  # one task at a time
    assert [only.reserve(0.0) for _ in range(3)] == pytest.approx([0.0, 0.04, 0.08])
    only.leave(None, 1.0)


def test_controllers_sharing_a_schedule_send_the_given_rate_together(make):
    clock = FakeClock()
    neighbours = [make(50.0, 2) for _ in range(2)]
    pair = [RateController(100.0, neighbours=n, clock=clock) for n in neighbours]
    due = sorted(c.reserve() for c in pair for _ in range(50))
    assert due[-1] == pytest.approx(0.99)  # 100 sends in a second, not 200
    alone = RateController(100.0, neighbours=neighbours[0], clock=clock)
    clock.now += 2.0
    assert [alone.reserve() for _ in range(3)] == pytest.approx([0.0, 0.01, 0.02])
    for controller in pair:
        controller.leave()


def test_one_slot_shares_no_schedule_and_bad_rates_are_refused(make):
    one = make(100.0, 1)
    assert [one.reserve(5.0) for _ in range(3)] == [5.0, 5.0, 5.0]  # the controller paces
    one.leave(None, 5.0)
    for per_slot, slots in ((0.0, 2), (math.nan, 2), (10.0, 0)):
        with pytest.raises(ValueError, match="rate"):
            make(per_slot, slots)
    assert rate_sharing.MAX_SLOTS >= (os.cpu_count() or 1)


def _take_send_times(directory, count, queue):
    neighbours = in_folder(directory, 250.0, 4)
    queue.put([neighbours.reserve(50.0) for _ in range(count)])


def test_processes_of_one_executor_take_distinct_send_times_at_its_share(tmp_path):
    """Two Python workers at once: 2 of 4 job slots, so half of 1 000/s."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    holder = in_folder(tmp_path, 250.0, 4)  # a third task holds a slot meanwhile
    workers = [
        context.Process(target=_take_send_times, args=(tmp_path, 200, queue)) for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    times = sorted(queue.get(timeout=60) + queue.get(timeout=60))
    for worker in workers:
        worker.join(timeout=60)
    holder.leave(None, 0.0)
    assert len(set(times)) == 400
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 1 / 750 - 1e-9  # never faster than 3 slots of 4 allow
    assert times[-1] - times[0] <= 400 / 500 + 1e-6  # at least 2 slots seen throughout


def _open_and_take(local_dirs, count, queue):
    os.environ["SPARK_LOCAL_DIRS"] = local_dirs
    neighbours = open_neighbours(config(requests_per_second=1000, partitions=4))
    assert isinstance(neighbours, ExecutorNeighbours)
    queue.put([neighbours.reserve(50.0) for _ in range(count)])


def test_two_spark_workers_share_the_schedule_in_sparks_local_dir(tmp_path):
    """As the Python workers of one executor do (children of one daemon, given
    ``SPARK_LOCAL_DIRS``), through ``open_neighbours`` and the private folder."""
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


# -- a limit found ---------------------------------------------------------------------


def _pair(make, clock, shared: bool):
    """Two partitions that have found their halves of a 200/s limit."""
    server = FixedWindowServer(200)
    made = [make() if shared else None for _ in range(2)]
    survivor, neighbour = (RateController(clock=clock, neighbours=n) for n in made)
    simulate(server, [survivor, neighbour], clock, 60)
    return server, survivor, neighbour


def test_a_partition_left_alone_takes_the_share_of_the_one_that_ended(make):
    """The lone tail of a stage: alone, the survivor's probe needs many seconds to pass
    its old half; with neighbours it climbs to the whole limit at once (its approach)."""
    regained = {}
    for shared in (False, True):
        clock = FakeClock()
        server, survivor, neighbour = _pair(make, clock, shared)
        assert survivor.rate <= 0.7 * 200  # it had found about its half
        left_at = clock.now
        neighbour.leave()
        simulate(server, [survivor], clock, 6)
        regained[shared] = ok_per_second(server, left_at + 3, left_at + 6)
    assert regained[True] >= 0.9 * 200 > regained[False]


def test_a_newcomer_takes_its_share_and_the_others_give_way_before_any_429(make):
    """A partition that joins (at its first send) starts at the fair share, and the one
    that had the limit to itself halves its rate at its next tick: the limit's windows
    stay within it, where a newcomer at its predecessor's whole share meets 429s.

    The survivor, alone, probes at the whole limit and may meet a 429 of its own as the
    newcomer joins (on the earlier controller too, after 8 s alone instead of 10): its
    next tick then comes after that Retry-After's second, so the window is 2 s and the
    429s counted are those after the join."""
    clock = FakeClock()
    server, survivor, neighbour = _pair(make, clock, True)
    neighbour.leave()
    simulate(server, [survivor], clock, 10)
    assert survivor.ceiling_hint >= 0.9 * 200  # the share it holds: all of it
    make().leave(Found(200.0, limited=True), clock.now)  # a predecessor's whole share
    newcomer = RateController(clock=clock, neighbours=make())
    simulate(server, [survivor], clock, 2)  # reading its input: it takes no share yet
    assert survivor.ceiling_hint >= 0.9 * 200
    throttled_before = server.throttled
    newcomer.reserve()  # its first send: it joins
    assert newcomer.rate <= 0.55 * 200  # the fair share, not the predecessor's 200
    simulate(server, [survivor, newcomer], clock, 2)
    assert survivor.rate <= 0.55 * 200
    assert server.throttled - throttled_before <= 0.02 * 200


def test_a_neighbour_that_wants_no_more_leaves_the_rest_of_its_share(make):
    """Max-min fair: a neighbour waiting on its last records (its pace holds nothing
    back) keeps what it uses, the rest is this partition's; a silent one uses nothing."""
    mine, theirs = make(), make()
    theirs.join(10.0)
    mine.publish(100.0, 10.0, True)
    mine.record_cut(100.0, 10.0)  # the wanting neighbour is taken to have cut as well
    assert mine.fair_share(10.0) == 100.0
    theirs.publish(20.0, 10.5, False)
    assert mine.fair_share(10.5) == 180.0
    assert mine.fair_share(10.5 + FRESH_S + 0.1) == 200.0  # it has sent nothing since
    theirs.publish(0.0, 12.0, True)  # it sends again, wanting its share
    assert mine.fair_share(12.0) == 100.0
    for left in (mine, theirs):
        left.leave(None, 12.0)


def test_no_total_before_a_cut_nor_long_after_it(make):
    neighbours = make()
    assert neighbours.join(10.0) is None
    assert neighbours.fair_share(10.0) is None
    neighbours.record_cut(80.0, 10.0)
    assert neighbours.fair_share(10.0) == 80.0
    neighbours.publish(80.0, 10.0 + MAX_AGE_S + 1, True)
    assert neighbours.fair_share(10.0 + MAX_AGE_S + 1) is None  # forgotten


def test_the_share_handed_on_is_forgotten_after_max_age(make):
    make().leave(Found(120.0, limited=True), 100.0)
    assert make().join(100.0 + MAX_AGE_S - 1) == Found(120.0, limited=True)
    assert make().join(100.0 + MAX_AGE_S + 1) is None
    make().leave(Found(0.0, limited=True), 200.0)  # nothing accepted: nothing handed on
    assert make().join(201.0) is None


def _join_then_die(directory, ready, die):
    in_folder(directory).publish(100.0, 10.0, True)
    ready.set()
    die.wait(60)
    os._exit(0)  # killed: it never leaves


def test_a_killed_task_counts_no_more_once_its_worker_is_gone(tmp_path):
    """A task counts while its process holds its slot; a killed worker's lock goes with
    it, whatever its entry still says."""
    context = multiprocessing.get_context("fork")
    ready, die = context.Event(), context.Event()
    worker = context.Process(target=_join_then_die, args=(tmp_path, ready, die))
    worker.start()
    assert ready.wait(60)
    neighbours = in_folder(tmp_path)
    neighbours.publish(100.0, 10.0, True)
    neighbours.record_cut(100.0, 10.0)
    assert neighbours.fair_share(10.5) == 100.0  # 200 over two
    die.set()
    worker.join(60)
    assert neighbours.fair_share(10.5) == 200.0
    neighbours.leave(None, 11.0)


# -- the executor's file -------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        HEAD.pack(-1.0, 2, 0, 0, 0, 0, 0),
        HEAD.pack(math.nan, 2, 0, 0, 0, 0, 0),
        HEAD.pack(math.inf, 2, 0, 0, 0, 0, 0),
        HEAD.pack(10.0, rate_sharing.MAX_SLOTS + 1, 0, 0, 0, 0, 0),
        HEAD.pack(10.0, 1.5, 0, 0, 0, 0, 0),
        HEAD.pack(10.0, 2, 0, 0, 120.0, 0.5, 1.0),  # "limited" is neither 0 nor 1
        b"\x00" * 7,  # torn
    ],
)
def test_a_malformed_header_is_read_as_nothing_and_replaced(tmp_path, caplog, content):
    """Not trusted: the first send goes when asked, no share is handed on."""
    commons = tmp_path / "commons"
    commons.write_bytes(content)
    commons.chmod(0o600)  # the user's own file, but not what the module writes
    with caplog.at_level(logging.WARNING):
        neighbours = in_folder(tmp_path, 50.0, 2)
        assert neighbours.reserve(5.0) == 5.0
        assert neighbours.join(5.0) is None
    assert [str(commons) in r.getMessage() for r in caplog.records] == [True]  # once
    assert len(commons.read_bytes()) == HEAD.size + struct.calcsize("<3d")  # one entry
    neighbours.leave(None, 5.0)


def test_hostile_entries_are_left_out_and_a_huge_file_read_no_further(tmp_path, caplog):
    """NaN, negative and infinite entries and a torn one: no share raised, no task
    stopped; a file of megabytes is read only as far as the slots go."""
    commons = tmp_path / "commons"
    commons.write_bytes(
        HEAD.pack(0, 0, 1e6, 5.0, 0, 0, 0)
        + struct.pack("<3d", -1.0, 5.0, 0.0)
        + struct.pack("<3d", math.inf, 5.0, 0.0)
        + struct.pack("<3d", 50.0, math.nan, 1.0)
        + b"\x00" * 7
    )
    commons.chmod(0o600)
    with caplog.at_level(logging.WARNING):
        neighbours = in_folder(tmp_path)  # slot 0: the hostile entries are slots 0 to 2
        assert neighbours.fair_share(5.0) is None  # its own entry is not there
    assert sum(str(commons) in r.getMessage() for r in caplog.records) == 1
    commons.write_bytes(HEAD.pack(0, 0, 1e6, 5.0, 0, 0, 0) + b"\xff" * (2 << 20))
    neighbours.publish(10.0, 5.0, True)  # 0xff..: NaNs, and no entry counts
    assert neighbours.fair_share(5.0) == 1e6
    assert commons.stat().st_size == HEAD.size + struct.calcsize("<3d")
    neighbours.leave(None, 5.0)


def test_an_unusable_folder_or_a_failing_file_leaves_each_task_on_its_own(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    in_spark = open_neighbours(config())
    assert isinstance(in_spark, ExecutorNeighbours)
    in_spark.leave(None, 0.0)
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    assert type(open_neighbours(config())) is ProcessNeighbours  # not in a Spark worker
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "spark"))
    (tmp_path / "spark").mkdir()
    (tmp_path / "spark" / f"{FOLDER_PREFIX}{os.getuid()}").write_text("not a folder")
    with caplog.at_level(logging.WARNING):
        assert type(open_neighbours(config())) is ProcessNeighbours
    assert "not a private folder" in caplog.text
    failing, other = in_folder(tmp_path / "file", 25.0, 4), in_folder(tmp_path / "file", 25.0, 4)
    other.publish(50.0, 5.0, True)
    os.close(failing._fd)
    failing._fd = os.open(os.devnull, os.O_RDONLY)  # reads nothing, every write fails
    failing.publish(100.0, 5.0, True)
    failing.publish(100.0, 5.0, True)
    failing.record_cut(100.0, 5.0)
    assert failing.fair_share(5.0) == 100.0  # its own, not half of a total with `other`
    assert [failing.reserve(6.0) for _ in range(2)] == pytest.approx([6.0, 6.04])  # 25/s
    assert "no longer shared" in caplog.text
    for left in (failing, other):
        left.leave(None, 6.0)


# -- the successor -------------------------------------------------------------------


async def test_the_next_sender_of_the_same_api_and_credential_starts_at_the_share_found():
    api = config(secret_headers={"X-Api-Key": "GEO_KEY"})
    first = RequestSender(api, None)
    first.rate.reserve()
    assert first.rate.slow_start
    first.rate.ceiling_hint = 97.0  # what its last cut found the server accepting
    await first.close()
    successor = RequestSender(
        config("http://api.test:8080/v2/{id}", secret_headers={"X-Api-Key": "GEO_KEY"}), None
    )
    successor.rate.reserve()  # its first send: it joins
    assert not successor.rate.slow_start
    assert successor.rate.ceiling_hint == 97.0
    for other in (
        config(secret_headers={"X-Api-Key": "OTHER_KEY"}),
        config("http://elsewhere.test/v1/{id}", secret_headers={"X-Api-Key": "GEO_KEY"}),
    ):
        sender = RequestSender(other, None)
        sender.rate.reserve()
        assert sender.rate.slow_start, rate_sharing.key_for(other)


async def test_a_given_rate_is_not_handed_on_nor_overridden():
    api = config("http://given.test/{id}", requests_per_second=40)
    sender = RequestSender(api, None)
    sender.rate.ceiling_hint = 33.0
    await sender.close()
    assert rate_sharing._in_process[rate_sharing.key_for(api)].found is None
    successor = RequestSender(api, None).rate
    successor.reserve()
    assert successor.rate == 40


def test_a_partition_that_met_no_limit_found_the_rate_it_was_accepted_at():
    """A short partition of a fast API ends still in slow start: what it hands on is no
    share of a limit but the rate the API accepted."""
    clock = FakeClock()
    controller = RateController(clock=clock)
    for _ in range(16):  # 800 calls/s accepted over two seconds, no 429
        for _ in range(100):
            controller.sending()
            controller.accepted()
        clock.now += 0.125
    controller.sending()
    assert controller.slow_start
    found = controller.found()
    assert found is not None and not found.limited and 600 <= found.rate <= 800


def test_its_successor_goes_on_with_slow_start_from_that_rate():
    api = config("http://fast.test/{id}")
    key = rate_sharing.key_for(api)
    ProcessNeighbours(key).leave(Found(800.0, limited=False), time.monotonic())
    successor = RequestSender(api, None).rate
    successor.reserve()
    assert successor.slow_start and successor.ceiling_hint is None
    assert successor.rate == 800.0  # not START_RATE again
