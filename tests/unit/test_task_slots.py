"""The partitions that run at once, read from a Spark conf: what each share of
``--requests-per-second`` is divided by."""

from __future__ import annotations

import logging
import os

import pytest

from spark_jobs.enrichers import ResponseField
from spark_jobs.session.task_slots import task_slots, with_running_partitions
from spark_jobs.spec.job_spec import JobSpec
from spark_jobs.spec.spec_error import SpecError


def conf(**values: str):
    settings = {key.replace("_", "."): value for key, value in values.items()}
    return settings.get


@pytest.mark.parametrize(
    ("settings", "slots"),
    [
        ({"spark_master": "local[2]"}, 2),
        ({"spark_master": "local"}, 1),
        ({"spark_master": "local[*]"}, os.cpu_count()),
        ({"spark_master": "local[8,3]", "spark_task_cpus": "2"}, 4),
        ({"spark_master": "local-cluster[3, 2, 1024]"}, 6),
        ({"spark_master": "yarn", "spark_executor_instances": "50"}, 50),
        (
            {
                "spark_master": "k8s://https://api:6443",
                "spark_executor_instances": "10",
                "spark_executor_cores": "4",
            },
            40,
        ),
        (
            {
                "spark_master": "yarn",
                "spark_dynamicAllocation_enabled": "true",
                "spark_dynamicAllocation_maxExecutors": "20",
                "spark_executor_instances": "2",
                "spark_executor_cores": "4",
            },
            80,
        ),
        ({"spark_master": "spark://host:7077", "spark_cores_max": "24"}, 24),
        ({"spark_master": "spark://host:7077", "spark_default_parallelism": "64"}, 64),
    ],
)
def test_task_slots_from_the_spark_conf(settings, slots):
    found = task_slots(conf(**settings))
    assert found is not None and found[0] == slots


@pytest.mark.parametrize(
    "settings",
    [
        {"spark_master": "spark://host:7077"},  # standalone: executors take every core
        {
            "spark_master": "yarn",
            "spark_dynamicAllocation_enabled": "true",
            "spark_dynamicAllocation_maxExecutors": "infinity",
        },
        {},
    ],
)
def test_task_slots_are_unknown_where_the_conf_does_not_say(settings):
    assert task_slots(conf(**settings)) is None


def spec(**kw) -> JobSpec:
    return JobSpec(
        input="in",
        output="out",
        key_column="id",
        snapshot_dir="snap",
        url_template="http://api/{id}",
        response_fields={"name": ResponseField("$.name", "string")},
        http={"requests_per_second": 100.0},
        **kw,
    )


def test_the_rate_is_shared_by_the_partitions_running_at_once():
    running = with_running_partitions(spec(partitions=32), conf(spark_master="local[2]"))
    assert running.max_concurrent_partitions == 2
    assert running.http_config().rate_per_partition == 50.0


def test_never_more_running_partitions_than_partitions_and_the_flag_wins():
    few = with_running_partitions(spec(partitions=3), conf(spark_master="local[16]"))
    assert few.running_partitions == 3 and few.http_config().rate_per_partition == 100 / 3
    given = spec(partitions=32, max_concurrent_partitions=4)
    assert with_running_partitions(given, conf(spark_master="local[2]")).running_partitions == 4


def test_unknown_slots_keep_the_split_that_cannot_overshoot_and_say_so(caplog):
    with caplog.at_level(logging.WARNING):
        unknown = with_running_partitions(spec(partitions=32), conf())
    assert unknown.running_partitions == 32
    assert unknown.http_config().rate_per_partition == 100 / 32
    assert "--max-concurrent-partitions" in caplog.text


def test_a_bad_max_concurrent_partitions_is_refused_naming_the_option():
    with pytest.raises(SpecError, match="--max-concurrent-partitions: must be a positive integer"):
        spec(max_concurrent_partitions=0)
