"""The model pacing against every provider profile's emulator on loopback (OpenAI's and
Anthropic's buckets, Azure's per-deployment limits stated without resets, a gateway's
fixed windows), two partitions sharing the limits, nothing configured: the limits are
learned from the headers. The measure is the benchmark's (``benchmarks/provider_pacing.py``,
``make bench-providers``) on fewer records; its targets (0.9 of the binding limit, 2 % of
calls answered 429) are the benchmark's, the bounds here allow a loaded machine."""

from __future__ import annotations

import pytest

from benchmarks.provider_pacing import PROFILES, run_profile


@pytest.mark.parametrize("profile", sorted(PROFILES))
async def test_the_binding_limit_is_used_with_few_429s_and_no_dead_letter(profile):
    # 600 records: two to four whole "minutes" after the first, so that a stall of a
    # loaded machine (the emulator shares the client's loop) does not decide the measure
    # alone: with 400 there was one, and a busy CI run measured 0.629 of it (0.996 idle).
    run = await run_profile(profile, records=600)
    assert run["dead_letters"] == 0, run
    assert run["used_after_first_minute"] >= 0.8, run
    assert run["share_429"] <= 0.05, run
