"""The demo model endpoint's fixed windows: from its start, or opened by the first call."""

from __future__ import annotations

import math

import pytest

from demo.model_limits import LimitWindow, ModelLimits


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
