"""The AIMD rate controller on a fake clock: pacing, convergence on a server's hard
limit (alone and four partitions sharing it), the hard ceiling, and hostile signals."""

import asyncio
import math
import random

import pytest

from spark_jobs import defaults
from spark_jobs.enrichers.rate_control import (
    MIN_RATE,
    START_RATE,
    THROTTLED_RUN,
    TICK_S,
    RateController,
)
from spark_jobs.enrichers.rate_headers import MAX_RESET_S, QuotaHint
from spark_jobs.enrichers.rate_sharing import ProcessNeighbours


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FixedWindowServer:
    """A hard limit of ``limit`` requests per whole second, 429 beyond (Retry-After: 1)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.window = -1
        self.count = 0
        self.ok_by_second: dict[int, int] = {}
        self.throttled = 0
        self.calls = 0

    def admit(self, now: float) -> bool:
        self.calls += 1
        second = math.floor(now)
        if second != self.window:
            self.window, self.count = second, 0
        self.count += 1
        if self.count > self.limit:
            self.throttled += 1
            return False
        self.ok_by_second[second] = self.ok_by_second.get(second, 0) + 1
        return True


def simulate(
    server: FixedWindowServer, controllers: list[RateController], clock: FakeClock, seconds: float
) -> list[int]:
    """Every controller sends as fast as it lets (unbounded demand); answers are instant.
    Returns the calls each controller made."""
    due = [clock.now + c.reserve() for c in controllers]
    sent = [0] * len(controllers)
    end = clock.now + seconds
    while True:
        index = min(range(len(due)), key=due.__getitem__)
        if due[index] >= end:
            return sent
        clock.now = due[index]
        sent[index] += 1
        controllers[index].sending()
        if server.admit(clock.now):
            controllers[index].accepted()
        else:
            controllers[index].throttled(1.0, clock.now)
        due[index] = clock.now + controllers[index].reserve()


def ok_per_second(server: FixedWindowServer, start: float, end: float) -> float:
    seconds = range(math.floor(start), math.floor(end))
    return sum(server.ok_by_second.get(s, 0) for s in seconds) / len(seconds)


def test_a_given_rate_spaces_sends_and_saves_no_idle_time():
    clock = FakeClock()
    controller = RateController(10, clock=clock)
    assert [controller.reserve() for _ in range(5)] == pytest.approx([0, 0.1, 0.2, 0.3, 0.4])
    clock.now += 60  # an idle minute earns no burst
    assert [controller.reserve() for _ in range(3)] == pytest.approx([0, 0.1, 0.2])


def test_a_bad_ceiling_is_rejected():
    for bad in (0, -5, math.nan):
        with pytest.raises(ValueError, match="ceiling"):
            RateController(bad)


async def test_acquire_sleeps_until_its_slot():
    controller = RateController(1000)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.gather(*(controller.acquire() for _ in range(21)))
    assert loop.time() - started >= 0.0199  # the 21st slot is 20 ms after the first


def test_one_partition_converges_on_a_hard_limit_with_few_429s():
    clock = FakeClock()
    server = FixedWindowServer(200)
    controller = RateController(clock=clock)
    simulate(server, [controller], clock, 120)
    throughput = ok_per_second(server, 110, 220)  # after the first 10 s
    assert 0.85 * 200 <= throughput <= 200
    assert server.throttled / server.calls <= 0.01
    assert 0.8 * 200 <= controller.rate <= 1.1 * 200


def test_four_partitions_sharing_a_limit_each_find_a_quarter():
    clock = FakeClock()
    server = FixedWindowServer(200)
    controllers = [RateController(clock=clock) for _ in range(4)]
    sent = simulate(server, controllers, clock, 120)
    assert 0.85 * 200 <= ok_per_second(server, 110, 220) <= 200
    assert server.throttled / server.calls <= 0.05
    for calls in sent:  # none starves, none takes the lion's share
        assert 0.6 * 50 <= calls / 120 <= 1.4 * 50


def test_a_partition_left_alone_regains_the_whole_limit_within_seconds():
    """Two partitions share a limit at about half each; one finishes. The other's probe
    passes its old share with no 429 and slow start finds the freed half, instead of a
    probe that would take a minute (the lone tail of a job's last partitions)."""
    clock = FakeClock()
    server = FixedWindowServer(200)
    survivor, neighbour = RateController(clock=clock), RateController(clock=clock)
    simulate(server, [survivor, neighbour], clock, 60)
    assert survivor.rate <= 0.7 * 200  # it had found about its half
    simulate(server, [survivor], clock, 30)
    assert ok_per_second(server, 175, 190) >= 0.85 * 200


def test_a_successor_starting_at_its_predecessors_share_spares_the_neighbours_429s():
    """A partition that starts in the worker where another has just found its share of a
    shared limit starts there: slow start's overshoot would meet a spent window and pause
    the neighbour as well (a second of the limit each time)."""
    throughputs, throttled = {}, {}
    for start in ("slow start", "learned"):
        clock = FakeClock()
        server = FixedWindowServer(200)
        predecessor, neighbour = RateController(clock=clock), RateController(clock=clock)
        simulate(server, [predecessor, neighbour], clock, 60)
        neighbours = ProcessNeighbours(start)
        if start == "learned":
            neighbours.leave(predecessor.found(), clock.now)
        successor = RateController(clock=clock, neighbours=ProcessNeighbours(start))
        successor.reserve()  # its first send: it starts at what was handed on
        assert successor.slow_start is (start == "slow start")
        calls, refused, begin = server.calls, server.throttled, clock.now
        simulate(server, [successor, neighbour], clock, 6)
        throughputs[start] = ok_per_second(server, begin + 1, begin + 6)
        throttled[start] = (server.throttled - refused) / (server.calls - calls)
    assert throughputs["learned"] >= 0.9 * 200 > throughputs["slow start"]
    assert throttled["learned"] < throttled["slow start"]


def test_the_first_slow_start_lets_a_tick_of_sends_through_and_retakes_outgrown_slots():
    """An API that states no limit: answers come in bursts, and a burst of ready calls
    goes up to a tick ahead of its slots; the partition's first ``capacity`` calls, ready
    at once, take the slots of the starting rate, and once the rate has grown past them
    they are taken anew (they waited up to ``capacity / START_RATE`` s, 1.3 s for 64)."""
    clock = FakeClock()
    controller = RateController(clock=clock)
    waits = [controller.reserve() for _ in range(64)]
    at_once = sum(wait == 0 for wait in waits)
    assert at_once == int(TICK_S * START_RATE) + 1  # the slots within a tick
    assert max(waits) == pytest.approx(63 / START_RATE - TICK_S)
    for _ in range(at_once):
        controller.sending()
    clock.now += TICK_S
    epoch = controller.epoch
    controller.sending()  # the tick: the rate grows past the slots taken
    assert controller.rate > START_RATE and controller.epoch > epoch  # waiters re-take
    again = [controller.reserve() for _ in range(64 - at_once)]
    assert max(again) < max(waits) / 2
    controller.throttled(1.0, clock.now, limited=True)  # a limit met: one token from here
    clock.now += 2.0
    slots = [controller.reserve() for _ in range(3)]
    assert slots == pytest.approx([0, 1 / controller.rate, 2 / controller.rate])


def test_an_api_stating_its_quota_gets_no_tick_of_sends_at_once():
    """Rate-limit headers say a limit is near (Azure's emulator: its 1 s request window
    refused the burst of the first ramp): from the first answer stating a quota, ready
    calls are spaced at the rate as after a limit met, and slow start goes on."""
    clock = FakeClock()
    controller = RateController(clock=clock)
    controller.observe_quota(QuotaHint(remaining=200), clock.now)
    waits = [controller.reserve() for _ in range(3)]
    assert waits == pytest.approx([0, 1 / START_RATE, 2 / START_RATE])
    assert controller.slow_start


def test_a_given_rate_stays_a_hard_ceiling():
    clock = FakeClock()
    server = FixedWindowServer(10_000)  # never throttles
    controller = RateController(40, clock=clock)
    simulate(server, [controller], clock, 30)
    assert controller.rate == 40
    assert max(server.ok_by_second.values()) <= 41


def test_a_given_rate_above_the_limit_still_backs_off():
    clock = FakeClock()
    server = FixedWindowServer(50)
    controller = RateController(400, clock=clock)
    simulate(server, [controller], clock, 60)
    assert server.throttled / server.calls <= 0.05
    assert controller.rate <= 400


def test_a_429_of_a_call_sent_before_the_last_cut_cuts_nothing():
    clock = FakeClock()
    controller = RateController(100, clock=clock)
    sent_at = clock.now
    clock.now += 0.5
    controller.throttled(None, sent_at, limited=True)
    assert controller.rate == pytest.approx(85)
    for _ in range(10):
        controller.throttled(None, sent_at, limited=True)
    assert controller.rate == pytest.approx(85)
    assert controller.decreases == 1


def test_retry_after_pauses_every_send_and_hostile_values_are_capped():
    clock = FakeClock()
    controller = RateController(100, clock=clock)
    controller.throttled(2.0, clock.now, limited=True)
    assert controller.reserve() == pytest.approx(2.0)
    for hostile in (math.nan, math.inf, -3.0, 0.0):
        controller.throttled(hostile, clock.now, limited=True)
    clock.now += 2.5
    assert controller.reserve() < 0.05  # none of those paused anything
    controller.throttled(1e12, clock.now, limited=True)
    assert controller.reserve() <= MAX_RESET_S + 1


def test_a_spent_quota_pauses_until_its_reset_and_a_policy_caps_the_rate():
    clock = FakeClock()
    controller = RateController(clock=clock)
    controller.observe_quota(QuotaHint(remaining=5, reset_s=9, limit=30, window_s=10), clock.now)
    assert controller.rate == pytest.approx(3.0)  # 30 per 10 s
    assert controller.reserve() == 0  # quota left: no pause
    controller.observe_quota(QuotaHint(remaining=0, reset_s=4), clock.now)
    assert controller.reserve() >= 4


def test_a_policy_of_zero_or_nonsense_never_stalls_the_partition():
    clock = FakeClock()
    controller = RateController(clock=clock)
    controller.observe_quota(QuotaHint(limit=0, window_s=60), clock.now)
    controller.observe_quota(QuotaHint(limit=1e-9, window_s=60), clock.now)
    assert controller.rate >= MIN_RATE


def test_an_idle_partition_does_not_grow_a_rate_it_does_not_use():
    clock = FakeClock()
    controller = RateController(clock=clock)
    for _ in range(200):  # 2 sends per second for 100 s
        clock.now += 0.5
        controller.reserve()
        controller.sending()
    assert controller.rate <= START_RATE


@pytest.mark.parametrize("seed", range(5))
def test_isolated_429s_at_a_steady_rate_never_cut_the_rate_nor_pause_other_sends(seed):
    """2 % of calls answered 429 (Retry-After: 1) at random, no rate limit: each only
    delays its own record; the partition's rate and every other send go on untouched."""
    chance = random.Random(seed)
    clock = FakeClock()
    controller = RateController(200, clock=clock)
    throttled = 0
    for _ in range(20_000):  # 100 s at 200/s
        wait = controller.reserve()
        assert wait <= 1 / 200 + 1e-9  # never a pause beyond the pacing
        clock.now += wait
        controller.sending()
        if chance.random() < 0.02:
            throttled += 1
            controller.throttled(1.0, clock.now)
        else:
            controller.accepted()
    assert throttled >= 300  # the 429s did come
    assert controller.decreases == 0
    assert controller.rate == 200


def test_a_sustained_share_of_429s_cuts_and_pauses():
    clock = FakeClock()
    controller = RateController(100, clock=clock)
    needed = math.ceil(defaults.THROTTLE_SHARE * defaults.THROTTLE_WINDOW)
    for _ in range(defaults.THROTTLE_WINDOW - 2 * needed):
        controller.accepted()
    for _ in range(needed - 1):  # never two in a row
        controller.throttled(1.0, clock.now)
        controller.accepted()
    controller.accepted()
    assert controller.decreases == 0 and controller.reserve() == 0
    controller.throttled(1.0, clock.now)  # the share is reached
    assert controller.decreases == 1
    assert controller.reserve() == pytest.approx(1.0)  # every send paused


def test_a_429_with_rate_limit_headers_is_a_rate_limit_at_once():
    assert QuotaHint(remaining=0, reset_s=1).limits
    assert QuotaHint(remaining=7, limit=100, window_s=60).limits  # a stated policy
    assert not QuotaHint(remaining=7, reset_s=1).limits
    clock = FakeClock()
    controller = RateController(100, clock=clock)
    controller.throttled(1.0, clock.now, limited=QuotaHint(remaining=0, reset_s=1).limits)
    assert controller.decreases == 1


def test_a_run_of_429s_is_sustained_throttling_even_below_the_share():
    clock = FakeClock()
    controller = RateController(100, clock=clock)
    for _ in range(200):
        controller.accepted()
    for _ in range(THROTTLED_RUN - 1):
        controller.throttled(1.0, clock.now)
    assert controller.decreases == 0
    controller.throttled(1.0, clock.now)  # a limit's spent window refuses every call
    assert controller.decreases == 1
