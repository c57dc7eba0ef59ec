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


import pytest

#: The suite's time budget is 30 minutes on 2 cores (CI stops at 90): tests marked
#: ``extended`` repeat a proof at a user's size or through a second route, and run only
#: when asked (``make test-extended``).
EXTENDED = os.environ.get("EXTENDED_TESTS") == "1"


#: Session fixtures that start something heavy for a few tests: their tests run on one
#: worker (``make test`` runs ``pytest -n``), so it starts once.
ONE_WORKER_FIXTURES = frozenset({"spark_connect"})


def pytest_collection_modifyitems(config, items):
    for item in items:
        group = _worker_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    if EXTENDED:
        return
    skip = pytest.mark.skip(reason="extended test: set EXTENDED_TESTS=1 (make test-extended)")
    for item in items:
        if "extended" in item.keywords:
            item.add_marker(skip)


def _worker_group(item) -> str | None:
    """Which tests share a worker under ``--dist loadgroup`` (every other test goes to any
    worker on its own). A group marked on the test wins (tests that touch the same thing
    in the checkout, ``xdist_group``); a module- or class-scoped fixture keeps its file on
    one worker, so the fixture starts once; so does a fixture of ONE_WORKER_FIXTURES."""
    if item.get_closest_marker("xdist_group"):
        return None
    fixtures = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        if name in ONE_WORKER_FIXTURES:
            return name
        definitions = fixtures.name2fixturedefs.get(name) if fixtures else None
        if definitions and definitions[-1].scope in ("module", "class", "package"):
            return item.nodeid.split("::")[0]
    return None


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
def _no_learned_rates(monkeypatch):
    """Each test starts as a fresh Python worker would: no rate learned by an earlier
    test's enricher of the same loopback API (``learned_rates``) within its minute."""
    from spark_jobs.enrichers import learned_rates

    monkeypatch.setattr(learned_rates, "_learned", {})
