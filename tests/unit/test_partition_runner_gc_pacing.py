"""The partition's collector pacing: raised while it runs, the process's own afterwards."""

import gc

import pytest

from spark_jobs.partition_runner.gc_pacing import YOUNG_THRESHOLD, paced_collections


@pytest.fixture
def thresholds():
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def test_young_collections_are_paced_inside_and_restored_after(thresholds):
    gc.set_threshold(700, 10, 10)
    with paced_collections():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_failure_inside_restores_the_thresholds(thresholds):
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), paced_collections():
        raise RuntimeError("the partition failed")
    assert gc.get_threshold() == (700, 10, 10)


def test_a_process_collecting_less_often_already_is_left_as_it_is(thresholds):
    gc.set_threshold(50_000, 20, 5)
    with paced_collections():
        assert gc.get_threshold() == (50_000, 20, 5)


def test_a_partition_run_paces_collections_only_while_it_is_consumed(thresholds, tmp_path):
    """Spark pulls the runner's batches one at a time: the pacing holds between two
    pulls and ends when the iterator is closed, even before its end."""
    from spark_jobs.partition_runner import runner as runner_module

    seen = []

    def batches():
        seen.append(gc.get_threshold()[0])
        yield from ()

    gc.set_threshold(700, 10, 10)
    runner = runner_module.PartitionRunner.__new__(runner_module.PartitionRunner)

    async def run_async(batches_in, task):
        for _ in batches_in:
            pass
        seen.append(gc.get_threshold()[0])
        yield "first"
        yield "second"

    runner.run_async = run_async
    outputs = runner.run(batches(), task=None)
    assert next(outputs) == "first"
    assert seen == [YOUNG_THRESHOLD, YOUNG_THRESHOLD]
    outputs.close()
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_partitions_restore_the_thresholds_when_the_last_one_ends(thresholds):
    gc.set_threshold(700, 10, 10)
    first, second = paced_collections(), paced_collections()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first ends while the second still runs
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)
