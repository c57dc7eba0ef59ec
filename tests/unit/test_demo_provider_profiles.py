"""The provider profiles' own formats (OpenAI's Go-style durations, the fault shares) and the
command line that builds each profile."""

from __future__ import annotations

import pytest

from demo import model_api_options
from demo.provider_profiles import (
    AnthropicProfile,
    AzureProfile,
    Faults,
    FixedWindowProfile,
    OpenAIProfile,
    SelfHostedProfile,
    go_duration,
)


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


@pytest.mark.parametrize(
    "argv, kind",
    [
        ([], FixedWindowProfile),
        (["--profile", "openai", "--tokens", "1000", "--minute-s", "6"], OpenAIProfile),
        (["--profile", "azure", "--tokens", "60000"], AzureProfile),
        (["--profile", "anthropic", "--output-tokens", "800", "--account", "spent"],
         AnthropicProfile),
        (["--profile", "self-hosted", "--batch", "4", "--queue", "16"], SelfHostedProfile),
    ],
)  # fmt: skip
def test_the_command_line_builds_each_profile(argv, kind):
    profile = model_api_options.parse(argv).profile
    assert isinstance(profile, kind)
    if kind is AzureProfile:
        assert profile.limits() == {"requests": 360, "tokens": 60000}, "6 RPM per 1 000 TPM"
    if kind is OpenAIProfile:
        assert profile.minute_s == 6.0 and profile.limits() == {"tokens": 1000}


def test_the_command_line_refuses_an_account_state_its_provider_does_not_have():
    with pytest.raises(ValueError, match="no account state"):
        model_api_options.parse(["--profile", "openai", "--account", "no-permission"])
