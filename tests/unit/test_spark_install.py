"""The installed pyspark Python side must match the Spark jars it drives.

Trap: apache-airflow-providers-apache-spark pulls in ``pyspark-client``, which installs
its own copy of the ``pyspark`` Python package over pyspark's; if the versions differ,
Python UDFs fail with Py4J "Constructor ... does not exist".
"""

import re
import sys
from importlib import metadata
from pathlib import Path

import pyspark


def test_pyspark_and_pyspark_client_distributions_have_one_version():
    versions = {name: metadata.version(name) for name in ("pyspark", "pyspark-client")}
    assert len(set(versions.values())) == 1, f"pin both to one version: {versions}"
    assert pyspark.__version__ == versions["pyspark"]


def test_python_side_matches_the_spark_core_jar():
    jars = Path(pyspark.__file__).parent / "jars"
    cores = [p.name for p in jars.glob("spark-core_*.jar")]
    assert cores, f"no spark-core jar under {jars}: is only pyspark-client installed?"
    jar_version = re.search(r"spark-core_[\d.]+-(.+)\.jar", cores[0]).group(1)
    assert jar_version == pyspark.__version__, f"jars {jar_version} vs python {pyspark.__version__}"


def test_requirements_pin_pyspark_and_client_together():
    pins = dict(
        line.split("==")
        for line in (Path(__file__).parents[2] / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert pins["pyspark"] == pins["pyspark-client"]


def test_spark_workers_run_the_project_interpreter():
    import os

    assert Path(os.environ["PYSPARK_PYTHON"]).resolve() == Path(sys.executable).resolve()
