"""A real Spark Connect server for the tests, started from the installed pyspark.

``spark-submit --class ...SparkConnectServer`` on loopback, ``local[4]``, run from an
empty directory. Its Python workers lack this project: they run the project's
interpreter, whose editable install of ``resumable-enrichment`` is switched off by a
``sitecustomize`` (third-party packages such as pyarrow and aiohttp stay, as on a
managed server with libraries installed), so a job only runs there when it ships its
own code with ``addArtifacts``. The server is stopped by its process id.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from demo.stack import free_port

#: Up to this long for the server's JVM to listen (a loaded 2-core machine is slow).
START_S = 240.0
CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: Drops the project's editable-install finder from the workers' import system.
SITECUSTOMIZE = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "resumable_enrichment" not in repr(f)]
sys.path[:] = [p for p in sys.path if not p.endswith("{worktree}")]
"""


@dataclass(frozen=True)
class ConnectServer:
    url: str
    log: Path
    pid: int


def spark_home() -> Path:
    import pyspark

    home = Path(pyspark.__file__).parent
    jars = list((home / "jars").glob("spark-connect_*.jar"))
    assert jars, f"the installed pyspark has no Spark Connect server jar in {home / 'jars'}"
    return home


def worker_python(directory: Path) -> Path:
    """An interpreter for the server's Python workers that cannot import the project
    from its editable install or from the worktree."""
    blocker = directory / "no-project"
    blocker.mkdir(parents=True, exist_ok=True)
    worktree = str(Path(__file__).resolve().parents[2])
    (blocker / "sitecustomize.py").write_text(SITECUSTOMIZE.format(worktree=worktree))
    script = directory / "python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH="{blocker}:$PYTHONPATH" exec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return script


@contextmanager
def connect_server(directory: Path) -> Iterator[ConnectServer]:
    """A Spark Connect server on ``sc://127.0.0.1:<free port>`` until the block ends."""
    home = spark_home()
    port = free_port()
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "server.log"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "SPARK_REMOTE", "PYSPARK_DRIVER_PYTHON")
    }
    env.update(
        SPARK_HOME=str(home),
        PYSPARK_PYTHON=str(worker_python(directory)),
        SPARK_LOCAL_IP="127.0.0.1",
    )
    command = [
        str(home / "bin" / "spark-submit"),
        "--class",
        CLASS,
        "--master",
        "local[4]",  # a killed client's two tasks leave room for its successor's
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=4",
        "spark-internal",
    ]
    with log.open("w") as out:
        server = subprocess.Popen(
            command,
            cwd=directory,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_port(port, server, log)
        yield ConnectServer(f"sc://127.0.0.1:{port}", log, server.pid)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(30)


def _wait_for_port(port: int, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the Spark Connect server exited:\n{log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"the Spark Connect server never listened:\n{log.read_text()[-3000:]}")
