"""The job as a Spark Connect client: ``--remote sc://host:15002`` or ``SPARK_REMOTE``.

Over Connect this process holds no JVM and no ``SparkContext``: it sends plans to a
server, whose executors run the partitions. Those executors' Python is the server's, so
the job ships its own code: a zip of the ``spark_jobs`` package added to the session with
``addArtifacts(pyfile=True)`` lands on the Python path of this session's workers only.
Third-party packages (pyarrow, aiohttp, fsspec...) must be on the server's Python, as a
managed platform installs libraries; the executor check names any that are missing.
The client's environment does not reach those executors either, nor does a PEX
(``--ship-env``): a secret the enricher reads from an environment variable must be set
on the server (the executor check says so).

A Connect URL may carry a token (``sc://host:443/;use_ssl=true;token=...``): such a URL
belongs in ``SPARK_REMOTE``, never in ``--remote`` (a command line is visible in ``ps``),
and is logged with the token hidden.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import spark_jobs
from spark_jobs.launch import REMOTE_ENV, redacted
from spark_jobs.spec.spec_error import SpecError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)


def remote_url(remote: str | None, ship_env: str | None = None) -> str | None:
    """The Connect URL this run uses: ``--remote``, else ``SPARK_REMOTE``, else None
    (classic Spark: ``spark-submit`` or ``local[*]``). SpecError for a ``ship_env``
    beside one: a PEX cannot become a Connect server's Python."""
    url = remote or os.environ.get(REMOTE_ENV) or None
    if url is not None and ship_env is not None:
        raise SpecError(
            "ship_env: a PEX cannot become a Spark Connect server's Python; over Spark Connect "
            "the job ships its own code, and its dependencies must be installed on the server"
        )
    return url


def connect_session(url: str) -> SparkSession:
    """A Spark Connect session on ``url`` with the job's code shipped to its workers."""
    from pyspark.sql import SparkSession

    logger.info("Spark Connect: %s", redacted(url))
    spark = SparkSession.builder.remote(url).appName("enrich_job").getOrCreate()
    ship_code(spark)
    return spark


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (not a classic one with a JVM)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def ship_code(spark: SparkSession) -> None:
    """Add the ``spark_jobs`` package, zipped, to the session's Python artifacts.

    Named after its content, so the same code is uploaded once per session and a
    changed one never clashes with an earlier upload of another version."""
    data = code_zip()
    name = f"spark_jobs-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    with tempfile.TemporaryDirectory(prefix="enrich-job-code-") as directory:
        path = Path(directory) / name
        path.write_bytes(data)
        spark.addArtifacts(str(path), pyfile=True)
    logger.info("shipped the job's code to the Spark Connect session (%s)", name)


def code_zip() -> bytes:
    """The ``spark_jobs`` package as a zip importable from ``sys.path`` (sources and
    package data, no bytecode), with fixed timestamps: the same code, the same bytes."""
    # The package's root, wherever this module sits inside it.
    package = Path(spark_jobs.__file__).resolve().parent
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(package.rglob("*")):
            if path.is_dir() or "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            name = f"{package.name}/{path.relative_to(package).as_posix()}"
            entry = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            archive.writestr(entry, path.read_bytes(), compress_type=zipfile.ZIP_DEFLATED)
    return buffer.getvalue()
