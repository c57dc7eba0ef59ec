"""A provider's fixed window told apart from a bucket by the ends its answers state, and
spent at once: the partition's share from the window's start, nothing in its last
moments, a late answer of the window before no reason to doubt it."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.enrichers.model_endpoint import ModelConfig, ModelPacing
from spark_jobs.enrichers.model_endpoint.fixed_window import EVIDENCE_S, FixedWindow

WINDOW_S = 6.0
END = 106.0  # the provider's window ends here; the next at 112


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _answer(window: FixedWindow, clock: _Clock, sent: float, end: float = END) -> None:
    """A call sent at ``sent``, counted 1 ms later and answered 0.3 s later, in a window
    ending at ``end``; the clock moves to its answer."""
    clock.now = sent + 0.3
    window.observe(sent, clock.now, end - (sent + 0.001), left=1e9)


def _fixed_window(clock: _Clock) -> FixedWindow:
    """A window whose answers agreed for longer than the evidence needs."""
    window = FixedWindow(WINDOW_S, clock)
    window.allowance = 1000.0
    for step in range(int(EVIDENCE_S / 0.5) + 2):
        _answer(window, clock, 100.0 + 0.5 * step)
    return window


def test_answers_agreeing_on_one_end_make_the_next_window_spendable_at_once():
    clock = _Clock()
    window = _fixed_window(clock)
    assert not window.fixed  # the window the evidence came in stays the bucket's
    clock.now = END - window.guard_s
    assert window.fixed
    assert window.wait_for(1) == pytest.approx(END + 0.299 - clock.now)  # the guard
    clock.now = window.ends
    assert window.wait_for(1000) == 0  # the whole share, at the window's start
    window.take(1000)
    assert window.wait_for(1) == pytest.approx(WINDOW_S)  # spent: the next window


def test_a_bucket_whose_end_moves_with_every_call_is_never_fixed():
    clock = _Clock()
    window = FixedWindow(WINDOW_S, clock)
    window.allowance = 1000.0
    for step in range(40):  # full again 0.5 s after each call: an end that moves
        sent = 100.0 + 0.25 * step
        clock.now = sent + 0.3
        window.observe(sent, clock.now, 0.5, left=1e9)
        clock.now += WINDOW_S
        assert not window.fixed


def test_an_answer_stating_another_end_makes_a_fixed_window_a_bucket_again():
    clock = _Clock()
    window = _fixed_window(clock)
    clock.now = END + 1.0
    window.observe(clock.now - 0.3, clock.now, 0.2, left=1e9)  # full 0.2 s from now
    assert not window.fixed


def test_a_late_answer_of_the_window_before_keeps_the_window_fixed():
    clock = _Clock()
    window = _fixed_window(clock)
    clock.now = END + 1.0
    window.take(10)
    window.observe(END - 1.0, clock.now, 1.0, left=1e9)  # sent before the end, slow
    assert window.fixed and window.spent == 10


def test_settling_frees_room_in_the_same_window_only():
    clock = _Clock()
    window = _fixed_window(clock)
    clock.now = window.ends
    taken_in = window.take(1000)
    ends = window.ends
    window.observe(clock.now, clock.now + 0.1, END + WINDOW_S - clock.now - 0.001, left=1e9)
    assert window.fixed and window.ends < ends  # a quicker answer: a narrower end
    window.give(300, taken_in)  # the answer used 700 of the 1000 reserved
    assert window.wait_for(300) == 0
    window.take(300)
    clock.now = window.ends + 0.1  # the next window: the old one's settlement is void
    window.give(500, taken_in)
    assert window.spent == 0


def test_what_the_provider_says_is_left_lowers_the_share():
    clock = _Clock()
    window = _fixed_window(clock)
    clock.now = window.ends
    window.take(100)
    window.observe(clock.now, clock.now + 0.3, WINDOW_S - 0.3, left=200)  # another spent it
    assert window.wait_for(200) == 0 and window.wait_for(201) > 0


def test_a_call_that_waited_in_the_bucket_as_the_window_turned_fixed_is_the_windows():
    clock = _Clock()
    config = ModelConfig(model="m", prompt="{x}", tokens_per_minute=600, limits_window_s=6.0)
    pacing = ModelPacing(config, partitions=1, clock=clock)
    window, bucket = pacing.window, pacing.bucket
    assert bucket is not None
    for step in range(int(EVIDENCE_S / 0.5) + 2):
        _answer(window, clock, 100.0 + 0.5 * step)
    bucket.take(bucket.level + 100)  # empty: the call waits

    async def admit_as_the_window_turns():
        call = asyncio.create_task(pacing.admit(json.dumps({"x": "y"})))
        await asyncio.sleep(0.01)  # waiting for the empty bucket
        clock.now = window.ends
        bucket.give(1e9)  # the bucket has room now: the call wakes
        return await call

    admitted = asyncio.run(admit_as_the_window_turns())
    assert admitted.window is not None and not admitted.paced
    assert window.spent == pytest.approx(admitted.tokens)
    assert bucket.level == pytest.approx(bucket.burst), "given back to the bucket"


def test_a_call_larger_than_the_share_goes_alone_in_an_unspent_window():
    clock = _Clock()
    window = _fixed_window(clock)
    clock.now = window.ends
    assert window.wait_for(5000) == 0
    window.take(5000)
    assert window.wait_for(1) > 0


@settings(max_examples=200, deadline=None)
@given(
    sends=st.lists(st.floats(0.0, 20.0), min_size=40, max_size=120),
    transits=st.lists(st.floats(0.0, 0.05), min_size=120, max_size=120),
    latencies=st.lists(st.floats(0.0, 2.0), min_size=120, max_size=120),
)
def test_a_fixed_windows_answers_in_any_order_never_look_like_a_bucket(sends, transits, latencies):
    """Calls counted a random transit after sending and answered in any order: once the
    answers have agreed for long enough, the window stays fixed to the end."""
    clock = _Clock()
    window = FixedWindow(WINDOW_S, clock)
    window.allowance = 1000.0
    answers = []
    for sent, transit, latency in zip(sorted(sends), transits, latencies, strict=False):
        counted = 100.0 + sent + transit
        reset = round(WINDOW_S - (counted - 100.0) % WINDOW_S, 3)  # ms, as headers say
        answers.append((counted + latency, 100.0 + sent, reset))
    agreed = False
    for answered, sent, reset in sorted(answers):
        clock.now = answered
        window.observe(sent, answered, reset, left=1e9)
        agreed = agreed or window._fixed_from < math.inf
        assert not agreed or window._fixed_from < math.inf, "a fixed window's answer disagreed"


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.floats(0.01, 0.5), min_size=40, max_size=120),
    latency=st.floats(0.0, 1.0),
    tokens=st.integers(10, 400),
)
def test_a_buckets_answers_never_make_a_fixed_window(gaps, latency, tokens):
    """A bucket refilled at 100 tokens/s: each answer's reset is the time until it is
    full again, an end that moves with every call; the window never turns fixed."""
    clock = _Clock()
    window = FixedWindow(WINDOW_S, clock)
    window.allowance = 1000.0
    deficit, at = 0.0, 100.0
    for gap in gaps:
        deficit = max(0.0, deficit - 100.0 * gap) + tokens
        at += gap
        clock.now = at + latency
        window.observe(at, clock.now, round(deficit / 100.0, 3), left=1e9)
        clock.now += 2 * WINDOW_S
        assert not window.fixed
        clock.now = at + latency
