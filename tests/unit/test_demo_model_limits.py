"""The demo model endpoint's limit shapes: fixed windows (from the start, or opened by the first
call) and continuously refilled buckets, driven by an injected clock."""

from __future__ import annotations

import math

import pytest

from demo.model_limits import LimitWindow, ModelLimits, TokenBucket


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("from_first_call, reset", [(False, "3.500s"), (True, "6.000s")])
def test_the_first_window_opens_at_the_start_or_at_the_first_call(from_first_call, reset):
    clock = _Clock()
    window = LimitWindow(
        ModelLimits(tokens=100, window_s=6.0, from_first_call=from_first_call), clock
    )
    clock.now += 2.5  # the endpoint has been up 2.5 s when the first call comes
    ok, headers = window.admit(60)
    assert ok and headers["x-ratelimit-reset-tokens"] == reset
    assert headers["x-ratelimit-remaining-tokens"] == "40"
    refused, headers = window.admit(60)
    seconds = float(reset.removesuffix("s"))
    assert not refused and headers["Retry-After"] == str(math.ceil(seconds))  # whole seconds
    clock.now += seconds
    assert window.admit(60)[0], "the next window"


def test_a_window_counts_a_call_only_when_it_is_taken():
    clock = _Clock()
    window = LimitWindow(ModelLimits(requests=2, tokens=100, window_s=10.0), clock)
    assert window.fits(100) and not window.fits(101)
    assert window.requests == 0, "fits() counts nothing"
    window.take(60)
    assert not window.fits(50) and window.fits(40)
    clock.now += 4.0
    assert window.reset_s() == pytest.approx(6.0)
    clock.now += 6.0
    assert window.fits(100) and window.requests == 0, "a new window"


def test_a_bucket_starts_full_and_refills_at_capacity_per_minute():
    clock = _Clock()
    bucket = TokenBucket(600, minute_s=6.0, clock=clock)  # 100 a second
    assert bucket.level() == 600 and bucket.per_second == 100
    assert bucket.take(600) and not bucket.take(1)
    clock.now += 0.5
    assert bucket.level() == pytest.approx(50)
    assert not bucket.take(51) and bucket.level() == pytest.approx(50), "all or nothing"
    assert bucket.seconds_until(150) == pytest.approx(1.0)
    assert bucket.seconds_to_full() == pytest.approx(5.5)
    clock.now += 60
    assert bucket.level() == 600, "never above its capacity"
    assert bucket.seconds_to_full() == 0 and bucket.seconds_until(601) == math.inf


def test_a_bucket_charge_is_adjusted_both_ways_and_capped_at_capacity():
    clock = _Clock()
    bucket = TokenBucket(1000, minute_s=60.0, clock=clock)
    assert bucket.take(800)
    bucket.adjust(300)  # charged 800, used 500
    assert bucket.level() == pytest.approx(500)
    bucket.adjust(-700)  # used more than charged: below zero
    assert bucket.level() == pytest.approx(-200) and bucket.seconds_until(1) == pytest.approx(12.06)
    bucket.adjust(5000)
    assert bucket.level() == 1000


@pytest.mark.parametrize("capacity, minute_s", [(0, 60.0), (10, 0.0), (10, math.inf)])
def test_a_bucket_refuses_a_shape_that_cannot_refill(capacity, minute_s):
    with pytest.raises(ValueError):
        TokenBucket(capacity, minute_s)
