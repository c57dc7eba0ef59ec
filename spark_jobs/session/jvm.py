"""Java options for a driver JVM this process launches itself (``python -m
spark_jobs.enrich_job`` without ``--remote``): the class archive's (``class_archive.py``)
and the JIT compiler's, added after the user's own options, never instead of them.

The JIT: the JVM's own tiers unless asked otherwise. Under ``local[*]`` that JVM is the
whole of Spark (reading the input, a shuffle, Arrow to and from the Python workers,
writing Parquet), and C1 alone made that work 44 % slower for a first call 1.25 s sooner
on 2 cores (docs/performance.md, "The driver JVM's defaults"): a trade a user makes for a
small run, not one made for them. ``ENRICH_JVM_JIT=quick`` asks for C1 alone
(``-XX:TieredStopAtLevel=1``); JIT options of the user's own are left alone. Under
``spark-submit`` (the Airflow operator's route) or over Spark Connect nothing changes: no
JVM is launched here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from spark_jobs.spec.spec_error import SpecError

#: The environment variable spark-submit's launcher adds to the driver JVM's options
#: (client mode), beside and not instead of ``spark.driver.extraJavaOptions``.
SUBMIT_OPTIONS = "SPARK_SUBMIT_OPTS"
#: Where a user's own options for the driver JVM are.
JAVA_VARIABLES = (SUBMIT_OPTIONS, "JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS", "PYSPARK_SUBMIT_ARGS")
JIT_SETTING = "ENRICH_JVM_JIT"
#: A JVM that knows no such option (not HotSpot) starts as if not given it.
_JIT_OPTIONS = {"quick": "-XX:+IgnoreUnrecognizedVMOptions -XX:TieredStopAtLevel=1", "full": ""}
_JIT_CHOSEN_ELSEWHERE = ("TieredStopAtLevel", "TieredCompilation")


def chosen_elsewhere(words: tuple[str, ...], environ: Mapping[str, str]) -> bool:
    """Whether the user's own Java options name any of ``words``."""
    return any(word in environ.get(name, "") for name in JAVA_VARIABLES for word in words)


def jit_options(environ: Mapping[str, str] | None = None) -> str:
    """The JIT options for a driver JVM about to be launched here (``ENRICH_JVM_JIT``:
    ``full``, the default, or ``quick``); raises :class:`SpecError` for another value."""
    env = os.environ if environ is None else environ
    setting = env.get(JIT_SETTING, "").strip()
    choice = setting.lower() or "full"
    if choice not in _JIT_OPTIONS:
        raise SpecError(
            f"{JIT_SETTING}={setting!r}: full (the JVM's own tiers, the default) or quick "
            "(C1 alone: a first call about a second sooner, the JVM's own work some 45 % slower)"
        )
    return "" if chosen_elsewhere(_JIT_CHOSEN_ELSEWHERE, env) else _JIT_OPTIONS[choice]


@contextlib.contextmanager
def launching(options: str) -> Iterator[None]:
    """The driver JVM launched inside this block gets ``options`` after the user's own."""
    if not options.strip():
        yield
        return
    before = os.environ.get(SUBMIT_OPTIONS)
    os.environ[SUBMIT_OPTIONS] = f"{before or ''} {options.strip()}".strip()
    try:
        yield
    finally:
        if before is None:
            del os.environ[SUBMIT_OPTIONS]
        else:
            os.environ[SUBMIT_OPTIONS] = before
