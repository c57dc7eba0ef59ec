"""How long an attempt may be silent before it is a straggler: nothing before enough
answers, then a multiple of their p99, never under the floor."""

import pytest

from spark_jobs.enrichers.stragglers import (
    ANSWER_SAMPLES,
    MIN_ANSWERS,
    MIN_SILENCE_S,
    SILENCE_FACTOR,
    StragglerWatch,
)


def test_no_limit_without_enough_answers_to_judge_by():
    watch = StragglerWatch()
    for _ in range(MIN_ANSWERS - 1):
        watch.answered(0.05)
    assert watch.silence_limit() is None
    watch.answered(0.05)
    assert watch.silence_limit() == MIN_SILENCE_S  # a fast API: the floor


def test_the_limit_follows_the_p99_of_recent_answers():
    watch = StragglerWatch()
    for i in range(100):
        watch.answered(0.1 + 0.001 * i)  # 0.100 .. 0.199 s
    assert watch.silence_limit() == pytest.approx(SILENCE_FACTOR * 0.199)
    for _ in range(ANSWER_SAMPLES):
        watch.answered(2.0)  # the API slowed down: the old answers are forgotten
    assert watch.silence_limit() == pytest.approx(SILENCE_FACTOR * 2.0)
