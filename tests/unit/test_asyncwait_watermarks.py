"""The watermark valve (Flink's StatusWatermarkValveTest scenarios) and the
bounded-out-of-orderness generator."""

import pytest

from spark_jobs.asyncwait import (
    MIN_WATERMARK,
    BoundedOutOfOrdernessGenerator,
    Watermark,
    WatermarkStatus,
    WatermarkValve,
)

ACTIVE, IDLE = WatermarkStatus.ACTIVE, WatermarkStatus.IDLE


def test_single_channel_forwards_only_advancing_watermarks():
    valve = WatermarkValve(1)
    assert valve.input_watermark(Watermark(0), 0) == [Watermark(0)]
    assert valve.input_watermark(Watermark(25), 0) == [Watermark(25)]
    assert valve.input_watermark(Watermark(18), 0) == []  # never backwards
    assert valve.input_watermark(Watermark(42), 0) == [Watermark(42)]


def test_output_is_the_minimum_over_aligned_channels():
    valve = WatermarkValve(3)
    assert valve.input_watermark(Watermark(10), 0) == []
    assert valve.input_watermark(Watermark(5), 1) == []
    assert valve.input_watermark(Watermark(3), 2) == [Watermark(3)]
    assert valve.input_watermark(Watermark(12), 2) == [Watermark(5)]
    assert valve.input_watermark(Watermark(8), 1) == [Watermark(8)]
    assert valve.input_watermark(Watermark(20), 1) == [Watermark(10)]


def test_an_idle_channel_does_not_hold_the_watermark_back():
    valve = WatermarkValve(2)
    valve.input_watermark(Watermark(10), 0)
    assert valve.input_watermark(Watermark(3), 1) == [Watermark(3)]
    # Channel 1 holds the output at 3; once idle, the output advances to channel 0's 10.
    assert valve.input_status(IDLE, 1) == [Watermark(10)]
    assert valve.input_watermark(Watermark(15), 0) == [Watermark(15)]
    assert valve.input_watermark(Watermark(99), 1) == []  # an idle channel's watermark is ignored


def test_all_idle_emits_idle_and_flushes_to_the_max_watermark():
    valve = WatermarkValve(3)
    valve.input_watermark(Watermark(10), 0)
    valve.input_watermark(Watermark(7), 1)
    assert valve.input_watermark(Watermark(5), 2) == [Watermark(5)]
    assert valve.input_status(IDLE, 0) == []  # channel 0 was not holding the output
    assert valve.input_status(IDLE, 1) == []
    # The last active channel goes idle while holding the output: flush to the max.
    assert valve.input_status(IDLE, 2) == [Watermark(10), IDLE]
    assert valve.last_output_status is IDLE


def test_the_flush_adds_nothing_when_the_output_already_holds_the_max():
    valve = WatermarkValve(2)
    valve.input_watermark(Watermark(4), 0)
    valve.input_watermark(Watermark(9), 1)  # output 4, held by channel 0
    assert valve.input_status(IDLE, 0) == [Watermark(9)]  # channel 1 takes over
    valve.input_watermark(Watermark(12), 1)
    assert valve.input_status(IDLE, 1) == [IDLE]  # it held the output at 12 already


def test_a_channel_back_from_idle_realigns_only_once_it_catches_up():
    valve = WatermarkValve(2)
    valve.input_watermark(Watermark(5), 0)
    valve.input_watermark(Watermark(5), 1)
    valve.input_status(IDLE, 1)
    assert valve.input_watermark(Watermark(20), 0) == [Watermark(20)]
    assert valve.input_status(ACTIVE, 1) == []  # behind the output: active but not aligned
    assert valve.input_watermark(Watermark(10), 1) == []  # still behind: does not pull back
    assert valve.input_watermark(Watermark(25), 0) == [Watermark(25)]  # min ignores channel 1
    assert valve.input_watermark(Watermark(26), 1) == []  # caught up: aligned again
    assert valve.input_watermark(Watermark(40), 0) == [Watermark(26)]  # now it counts


def test_active_again_after_all_idle_resumes_the_output_status():
    valve = WatermarkValve(2)
    valve.input_status(IDLE, 0)
    assert valve.input_status(IDLE, 1) == [IDLE]
    assert valve.input_status(ACTIVE, 0) == [ACTIVE]
    assert valve.input_watermark(Watermark(7), 0) == [Watermark(7)]


def test_bad_channels_are_rejected():
    with pytest.raises(ValueError, match="at least one channel"):
        WatermarkValve(0)
    with pytest.raises(IndexError, match="channel 2"):
        WatermarkValve(2).input_watermark(Watermark(1), 2)


def test_generator_trails_the_max_event_time_by_the_bound_every_n_records():
    generator = BoundedOutOfOrdernessGenerator(bound=5, every=3)
    assert generator.current == MIN_WATERMARK
    assert generator.on_event(100) is None
    assert generator.on_event(90) is None  # out of order: max stays 100
    assert generator.on_event(95) == Watermark(95)  # third record: 100 - 5
    assert [generator.on_event(t) for t in (96, 97, 98)] == [None, None, None]  # no advance
    assert [generator.on_event(t) for t in (110, 101, 102)] == [None, None, Watermark(105)]


def test_generator_rejects_bad_settings():
    with pytest.raises(ValueError, match="bound"):
        BoundedOutOfOrdernessGenerator(bound=-1)
    with pytest.raises(ValueError, match="interval"):
        BoundedOutOfOrdernessGenerator(bound=0, every=0)


# FLINK-40475: realignment after idleness works out the minimum again.


def test_all_idle_flushes_even_when_the_last_channel_to_go_idle_is_unaligned():
    """(a) Channel 2 came back behind the output (unaligned) and is the last to go idle:
    the flush to the maximum must still happen, or the output stays at 20 for good."""
    valve = WatermarkValve(3)
    valve.input_watermark(Watermark(20), 0)
    valve.input_watermark(Watermark(30), 1)
    valve.input_status(IDLE, 2)
    assert valve.input_watermark(Watermark(5), 2) == []  # ignored while idle
    assert valve.input_status(ACTIVE, 2) == []  # behind the output of 20: unaligned
    assert valve.last_output_watermark == 20
    assert valve.input_status(IDLE, 1) == []
    assert valve.input_status(IDLE, 0) == []  # channel 2 is still active
    assert valve.input_status(IDLE, 2) == [Watermark(30), IDLE]


def test_a_channel_active_again_as_the_only_aligned_one_moves_the_output_at_once():
    """(b) Channel 1 went idle ahead of the output; when it is back it is the only aligned
    channel, and its watermark becomes the output without waiting for new data."""
    valve = WatermarkValve(3)
    valve.input_watermark(Watermark(20), 0)
    valve.input_watermark(Watermark(30), 1)
    valve.input_status(IDLE, 2)
    valve.input_status(ACTIVE, 2)  # back with MIN_WATERMARK: unaligned
    assert valve.input_status(IDLE, 1) == []
    assert valve.input_status(IDLE, 0) == []  # nothing aligned is left: output stays 20
    assert valve.input_status(ACTIVE, 1) == [Watermark(30)]


def test_the_all_idle_flush_never_repeats_the_last_output():
    """(c) The maximum equals the last output: only IDLE goes out."""
    valve = WatermarkValve(2)
    valve.input_watermark(Watermark(10), 0)
    assert valve.input_watermark(Watermark(10), 1) == [Watermark(10)]
    assert valve.input_status(IDLE, 1) == []
    assert valve.input_status(IDLE, 0) == [IDLE]


def test_on_idle_to_active_the_status_comes_before_the_new_watermark():
    """The order rule: downstream learns the output is active before it moves."""
    valve = WatermarkValve(2)
    valve.input_watermark(Watermark(10), 0)
    valve.input_watermark(Watermark(10), 1)
    valve.input_status(IDLE, 0)
    assert valve.input_status(IDLE, 1) == [IDLE]
    outputs = valve.input_status(ACTIVE, 0)
    assert outputs[0] is ACTIVE
    assert valve.input_watermark(Watermark(15), 0) == [Watermark(15)]
