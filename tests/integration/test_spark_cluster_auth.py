"""The compose stack's Spark authentication, on a real standalone cluster on loopback: a
master and a worker started as docker-compose.yaml starts them (``spark.authenticate``,
the secret in ``_SPARK_AUTH_SECRET``) run an application whose secret comes from a
``spark-defaults.conf`` (what ``airflow-init`` writes), and refuse one without it; the
secret shows on no command line the worker launches."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .spark_cluster import SPARK_HOME, standalone_cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SECRET = "compose-like-secret-7f3a9c"
APP = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
print("COUNTED", spark.sparkContext.parallelize(range(100), 2).count())
spark.stop()
"""


def submit(tmp: Path, master: str, defaults: str) -> subprocess.Popen:
    conf = tmp / f"conf-{len(defaults)}"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(defaults)
    (tmp / "app.py").write_text(APP)
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_CONF_DIR": str(conf),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    command = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", master, str(tmp / "app.py")]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def test_spark_cluster_admits_only_applications_that_know_its_secret(tmp_path):
    with standalone_cluster(tmp_path, workers=1, auth_secret=SECRET) as master:
        admitted = submit(
            tmp_path, master, f"spark.authenticate true\nspark.authenticate.secret {SECRET}\n"
        )
        out, _ = admitted.communicate(timeout=300)
        assert admitted.returncode == 0 and b"COUNTED 100" in out
        refused = submit(tmp_path, master, "")
        try:
            master_log = tmp_path / "master.log"
            deadline = time.monotonic() + 120
            while "Expected SaslMessage" not in master_log.read_text():
                assert time.monotonic() < deadline, "the master never refused the application"
                assert refused.poll() is None or refused.returncode != 0
                time.sleep(0.5)
        finally:
            refused.kill()
            refused.wait(30)
    logs = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".conf"]
    assert logs and not [p for p in logs if SECRET in p.read_text(errors="replace")]
