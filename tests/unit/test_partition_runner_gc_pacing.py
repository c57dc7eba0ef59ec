"""The partition's collector pacing (``--gc-young-threshold``): off by default; when asked,
raised while a partition runs, the process's own afterwards."""

import gc
from types import SimpleNamespace

import pytest

from spark_jobs.partition_runner.gc_pacing import paced_collections
from spark_jobs.spec.job_cli import parse_args
from spark_jobs.spec.spec_error import SpecError

YOUNG_THRESHOLD = 10_000
JOB_ARGS = ["--input", "in", "--output", "out", "--key-column", "id", "--snapshot-dir", "s"]
JOB_ARGS += ["--url-template", "http://api/{id}", "--response-field", "name=$.name"]


@pytest.fixture
def thresholds():
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def test_young_collections_are_paced_inside_and_restored_after(thresholds):
    gc.set_threshold(700, 10, 10)
    with paced_collections(YOUNG_THRESHOLD):
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_failure_inside_restores_the_thresholds(thresholds):
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), paced_collections(YOUNG_THRESHOLD):
        raise RuntimeError("the partition failed")
    assert gc.get_threshold() == (700, 10, 10)


def test_a_process_collecting_less_often_already_is_left_as_it_is(thresholds):
    gc.set_threshold(50_000, 20, 5)
    with paced_collections(YOUNG_THRESHOLD):
        assert gc.get_threshold() == (50_000, 20, 5)


def partition_run(young: int | None, seen: list[int]):
    """A runner's ``run`` whose partition records the young threshold as it runs."""
    from spark_jobs.partition_runner import runner as runner_module

    def batches():
        seen.append(gc.get_threshold()[0])
        yield from ()

    runner = runner_module.PartitionRunner.__new__(runner_module.PartitionRunner)
    runner.spec = SimpleNamespace(gc_young_threshold=young)

    async def run_async(batches_in, task):
        for _ in batches_in:
            pass
        seen.append(gc.get_threshold()[0])
        yield "first"
        yield "second"

    runner.run_async = run_async
    return runner.run(batches(), task=None)


def test_by_default_a_partition_run_leaves_the_process_thresholds_alone(thresholds):
    gc.set_threshold(700, 10, 10)
    seen: list[int] = []
    assert list(partition_run(parse_args(JOB_ARGS).gc_young_threshold, seen)) == [
        "first",
        "second",
    ]
    assert seen == [700, 700]


def test_a_partition_run_asked_to_pace_does_so_only_while_it_is_consumed(thresholds):
    """Spark pulls the runner's batches one at a time: the pacing holds between two
    pulls and ends when the iterator is closed, even before its end."""
    gc.set_threshold(700, 10, 10)
    seen: list[int] = []
    young = parse_args([*JOB_ARGS, "--gc-young-threshold", str(YOUNG_THRESHOLD)])
    outputs = partition_run(young.gc_young_threshold, seen)
    assert next(outputs) == "first"
    assert seen == [YOUNG_THRESHOLD, YOUNG_THRESHOLD]
    outputs.close()
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_partitions_restore_the_thresholds_when_the_last_one_ends(thresholds):
    gc.set_threshold(700, 10, 10)
    first, second = paced_collections(YOUNG_THRESHOLD), paced_collections(YOUNG_THRESHOLD)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first ends while the second still runs
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_threshold_that_is_not_a_positive_integer_is_refused(value):
    with pytest.raises(SpecError, match="--gc-young-threshold: must be a positive integer"):
        parse_args([*JOB_ARGS, "--gc-young-threshold", value])
