"""Shared test configuration: the project's interpreter runs Spark's Python workers."""

import logging
import os
import sys
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# demo/ is not installed (nothing installs a top-level `demo`): the processes the tests
# start (Airflow, spark-submit, Spark's Python workers on a cluster) import it from this
# checkout, as the test process does.
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")])
)
# Not the JVM users get, on purpose: every JVM a test starts (the jobs, Airflow's tasks,
# the session below) lives a minute or so, most of it starting, and C1 alone with the
# one-thread collector takes 25-30 % off the Spark-heavy tests' wall time on 2 cores
# (test_cli, test_enrich_job and test_enrich_job_failures at -n 2: 172-177 s against
# 230-243 s with the JVM's defaults, either one alone 213-289 s; 2026-12-02): without it
# the suite would not stay within its 30 minutes. The JVM users get (the JVM's own tiers,
# the class archive) is tested by tests/integration/test_class_archive.py, whose JVMs run
# without this. Set SPARK_SUBMIT_OPTS to choose others.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


import pytest

#: The suite's time budget is 30 minutes on 2 cores (CI stops at 90): tests marked
#: ``extended`` repeat a proof at a user's size or through a second route, and run only
#: when asked (``make test-extended``).
EXTENDED = os.environ.get("EXTENDED_TESTS") == "1"


def pytest_collection_modifyitems(config, items):
    if EXTENDED:
        return
    skip = pytest.mark.skip(reason="extended test: set EXTENDED_TESTS=1 (make test-extended)")
    for item in items:
        if "extended" in item.keywords:
            item.add_marker(skip)


#: Files that build a wheel from the checkout (setuptools writes ``build/`` in the tree):
#: one build at a time, so they share a worker.
CHECKOUT_BUILD = frozenset(
    {
        "tests/e2e/test_wheel_install.py",
        "tests/integration/test_enrich_job_shipped.py",
        "tests/integration/test_plugin_loading.py",
    }
)


def worker_scope(nodeid: str) -> str:
    """What runs on one worker under ``make test`` (``pytest -n N --dist loadscope``): a
    unit test alone; an integration or e2e file whole, so a fixture that outlives a test
    (module-scoped, the Spark Connect server) starts once and the file's tests never run
    beside each other; the files of CHECKOUT_BUILD together."""
    path = nodeid.split("::", 1)[0]
    if path in CHECKOUT_BUILD:
        return "checkout-build"
    return nodeid if path.startswith("tests/unit/") else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadscope`` with :func:`worker_scope`'s scopes. pytest-xdist's ``loadgroup``
    cannot group here: it renames ``item._nodeid``, which pytest 9.2 no longer reads."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_scope(nodeid)

    return Scheduling(config, log)


@pytest.fixture(scope="session")
def spark():
    """One real local Spark session (``local[2]``) for the whole test run."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    yield session
    session.stop()
    # py4j logs "Closing down clientserver connection" from __del__ at interpreter exit,
    # after pytest closed the stream: keep its info lines out of the way.
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture(autouse=True)
def _no_rate_shared(monkeypatch):
    """Each test starts as a fresh Python worker would: nothing shared with an earlier
    test's enricher of the same loopback API (``rate_sharing``) within its minute."""
    from spark_jobs.enrichers import rate_sharing

    monkeypatch.setattr(rate_sharing, "_in_process", {})
