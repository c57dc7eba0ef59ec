"""The provider profiles' own formats: OpenAI's Go-style durations and the fault shares."""

from __future__ import annotations

import pytest

from demo.provider_profiles import Faults, go_duration


@pytest.mark.parametrize(
    "seconds, text",
    [(0, "0s"), (0.0004, "0s"), (0.287, "287ms"), (1.5, "1.5s"), (17.284, "17.284s"),
     (360, "6m0s"), (90.5, "1m30.5s"), (7322, "2h2m2s")],
)  # fmt: skip
def test_durations_read_as_go_prints_them(seconds, text):
    assert go_duration(seconds) == text


def test_faults_are_a_seeded_share_and_repeat_with_their_seed():
    first, second = Faults(0.1, 0.2, seed=7), Faults(0.1, 0.2, seed=7)
    sequence = [first.draw() for _ in range(2000)]
    assert sequence == [second.draw() for _ in range(2000)]
    assert sequence != [Faults(0.1, 0.2, seed=8).draw() for _ in range(2000)]
    assert 0.08 < sequence.count("server_error") / 2000 < 0.12
    assert 0.17 < sequence.count("overloaded") / 2000 < 0.23
    with pytest.raises(ValueError):
        Faults(0.6, 0.6)
