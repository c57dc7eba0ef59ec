"""The driver JVM's class-data-sharing archive: a local session's start without Spark's
class loading.

A session this process launches itself (``python -m spark_jobs.enrich_job``) spends most
of its start on loading and verifying Spark's classes: on 2 cores 7 to 9 s to a session
and 4 s more for its first job. HotSpot's dynamic class-data-sharing archive (JEP 350)
maps those classes from a file instead: 5 to 6 s and 2 to 2.5 s. The first run on a
machine has its JVM write the archive as it exits (``-XX:ArchiveClassesAtExit``; once,
some 15 s after the session stops), under a name of its own that is renamed into place
once the JVM is gone, so no run ever maps half a file; later runs map it
(``-XX:SharedArchiveFile``).

The archive is a cache file, hostile input like any: the JVM checks its contents before
mapping them (``-XX:+VerifySharedSpaces``) and runs without it when they do not match its
build or class path; a JVM that does not start with it is started again without it. An
archive the JVM did not take is deleted: the next run writes a new one. Nothing changes
under ``spark-submit`` (its JVM is already running: give it ``-XX:SharedArchiveFile`` in
``spark.driver.extraJavaOptions``) or over Spark Connect (no JVM here). An image or a
machine's set-up can write the archive beforehand, so that no run pays for it:
``python -m spark_jobs.driver.write_class_archive``.

``ENRICH_JVM_CLASS_ARCHIVE`` names the archives' folder (default:
``$XDG_CACHE_HOME/resumable-enrichment/jvm``, else ``~/.cache/...``), or ``off``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.driver.driver_jvm import chosen_elsewhere

logger = logging.getLogger(__name__)

SETTING = "ENRICH_JVM_CLASS_ARCHIVE"
#: Where a user already chose an archive (or any CDS option) for the JVM: left alone.
_CHOSEN_ELSEWHERE = ("SharedArchiveFile", "ArchiveClassesAtExit", "Xshare")
#: HotSpot's CDS warnings go to the JVM's stdout, which is the job's (its summary line);
#: a JVM that knows no CDS options (not HotSpot) starts as if not given them.
_QUIET = "-XX:+IgnoreUnrecognizedVMOptions -Xlog:cds=off -Xlog:cds+dynamic=off"
#: A writer's dump takes seconds; a partial file older than this is a dead writer's.
STALE_PARTIAL_S = 3600.0
#: How long a stopped session's JVM may take to write the archive before it is killed.
DUMP_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ClassArchive:
    """The archive this launch maps (``writing`` None), or writes to ``writing`` as its
    JVM exits, to be renamed by :func:`keep_written` to ``path`` with its size in the
    name (``spark-<installation>-<bytes>.jsa``)."""

    path: Path
    writing: Path | None

    @property
    def java_options(self) -> str:
        if self.writing is not None:
            return f"{_QUIET} -XX:ArchiveClassesAtExit={self.writing}"
        return f"{_QUIET} -XX:+VerifySharedSpaces -XX:SharedArchiveFile={self.path}"


def class_archive(environ: dict[str, str] | None = None) -> ClassArchive | None:
    """The archive for a JVM about to be launched here, or None (turned off, a user's own
    CDS options, no folder that can be written)."""
    env = dict(os.environ if environ is None else environ)
    folder = _folder(env)
    if folder is None or chosen_elsewhere(_CHOSEN_ELSEWHERE, env):
        return None
    name = f"spark-{_installation_key(env)}"
    whole = _whole_archive(folder, name)
    if whole is not None:
        return ClassArchive(whole, None)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _remove_stale_partials(folder)
    except OSError as error:
        logger.info("no JVM class archive: %s cannot be written (%s)", folder, error)
        return None
    return ClassArchive(folder / f"{name}.jsa", folder / f"{name}.{os.getpid()}.partial")


def _whole_archive(folder: Path, name: str) -> Path | None:
    """The archive of this installation whose size is the one it was written with. The
    JVM checks an archive's contents, not its length: a truncated one crashes it."""
    for candidate in sorted(folder.glob(f"{name}-*.jsa")):
        written = candidate.stem.removeprefix(f"{name}-")
        with contextlib.suppress(OSError):
            if written.isdigit() and candidate.stat().st_size == int(written):
                return candidate
            logger.warning(
                "JVM class archive %s is not the size it was written: deleted", candidate
            )
            candidate.unlink()
    return None


def _folder(env: dict[str, str]) -> Path | None:
    setting = env.get(SETTING, "").strip()
    if setting.lower() == "off":
        return None
    if setting:
        return Path(setting).expanduser()
    cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "resumable-enrichment" / "jvm"


def _installation_key(env: dict[str, str]) -> str:
    """Which Java and which Spark: an archive fits one JVM build and one class path (the
    JVM checks both, this keeps installations sharing a folder from replacing each
    other's archives on every run)."""
    import pyspark

    java_home = env.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java") or ""
    spark_home = env.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    identity = "\n".join([os.path.realpath(java), os.path.realpath(spark_home)])
    return f"{pyspark.__version__}-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"


def _remove_stale_partials(folder: Path) -> None:
    """Partial archives of writers that died (a JVM killed while writing leaves one)."""
    for partial in folder.glob("*.partial"):
        with contextlib.suppress(OSError):
            if time.time() - partial.stat().st_mtime > STALE_PARTIAL_S:
                partial.unlink()


def set_aside(archive: ClassArchive) -> None:
    """The JVM refused ``archive`` or did not start with it but does without: a mapped
    archive is deleted (the next run writes anew)."""
    logger.warning("the driver JVM did not take the class archive %s", archive.path)
    if archive.writing is None:
        with contextlib.suppress(OSError):
            archive.path.unlink()


def drop_if_refused(archive: ClassArchive | None) -> None:
    """Once the JVM runs: an archive it was to map and did not (its contents or class
    path did not match; ``/proc`` tells, where there is one) is deleted, so that the next
    run writes one that fits instead of every run checking a useless file."""
    if archive is None or archive.writing is not None:
        return
    from pyspark import SparkContext

    process = getattr(SparkContext._gateway, "proc", None)
    try:
        with open(f"/proc/{process.pid}/maps") as maps:  # type: ignore[union-attr]
            if any(line.rstrip().endswith(str(archive.path)) for line in maps):
                return
    except (AttributeError, OSError):  # not launched here, or no /proc: cannot tell
        return
    set_aside(archive)


def keep_written(archive: ClassArchive | None) -> None:
    """After the session stopped: a JVM that writes the archive is ended and waited for,
    and the archive renamed into place (the folder only ever holds whole archives)."""
    if archive is None or archive.writing is None:
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if gateway is None or process is None:  # not a JVM this process launched
        return
    gateway.shutdown()
    SparkContext._gateway = SparkContext._jvm = None  # a later session launches its own
    logger.info("writing the driver JVM's class archive once, for later runs: %s", archive.path)
    process.stdin.close()  # the gateway's JVM exits at the end of its input
    try:
        process.wait(timeout=DUMP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    try:
        size = archive.writing.stat().st_size
        if process.returncode == 0 and size > 0:
            os.replace(archive.writing, archive.path.with_name(f"{archive.path.stem}-{size}.jsa"))
            return
        logger.warning("the driver JVM wrote no class archive (exit %s)", process.returncode)
    except OSError as error:
        logger.warning("the driver JVM's class archive was not kept: %s", error)
    with contextlib.suppress(OSError):
        archive.writing.unlink()
