"""The driver JVM's class-data-sharing archive: a local session's start without Spark's
class loading.

A session this process launches itself (``python -m spark_jobs.enrich_job``) spends most
of its start on loading and verifying Spark's classes. HotSpot's dynamic class-data-sharing
archive (JEP 350) maps those classes from a file instead (docs/clusters.md has the
figures). A run never writes it: an explicit command does, ``make jvm-archive`` or an
image's build (``write_class_archive.py``); a run maps the archive when there is one
(``-XX:SharedArchiveFile``) and starts as the JVM would without it otherwise.

The archive is code the driver JVM runs, and the JVM's check of it (``-XX:+Verify
SharedSpaces``) is a checksum, not authentication: it is taken only from a folder that is
the user's own, not a symlink and not writable by group or others, and only as a regular
file of the user's that no one else may write, opened without following a symlink
(``enrichers/private_dir.py``); anything else is refused with a warning naming it. What is
trusted is the folder's parents (the user's cache folder, or the folder named). The JVM
runs without an archive whose contents or class path do not match its own; a JVM that
does not start with it is started again without it, and the archive deleted. Its
warnings are silenced: the JVM's stdout is the job's summary line. Nothing changes under
``spark-submit`` (its JVM is already running: give it ``-XX:SharedArchiveFile`` in
``spark.driver.extraJavaOptions``) or over Spark Connect (no JVM here).

``ENRICH_JVM_CLASS_ARCHIVE`` names the archives' folder (default:
``$XDG_CACHE_HOME/resumable-enrichment/jvm``, else ``~/.cache/...``), or ``off``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.enrichers.private_dir import PrivateFolder
from spark_jobs.session.jvm import chosen_elsewhere

logger = logging.getLogger(__name__)

SETTING = "ENRICH_JVM_CLASS_ARCHIVE"
#: Where a user already chose an archive (or any CDS option) for the JVM: left alone.
_CHOSEN_ELSEWHERE = ("SharedArchiveFile", "ArchiveClassesAtExit", "Xshare")
#: HotSpot's CDS warnings go to the JVM's stdout, which is the job's (its summary line);
#: a JVM that knows no CDS options (not HotSpot) starts as if not given them.
QUIET = "-XX:+IgnoreUnrecognizedVMOptions -Xlog:cds=off -Xlog:cds+dynamic=off"


@dataclass(frozen=True)
class ClassArchive:
    """A whole archive (``spark-<installation>-<bytes>.jsa``) for a JVM launched here."""

    path: Path

    @property
    def java_options(self) -> str:
        return f"{QUIET} -XX:+VerifySharedSpaces -XX:SharedArchiveFile={self.path}"


def class_archive(environ: Mapping[str, str] | None = None) -> ClassArchive | None:
    """The archive for a JVM about to be launched here, or None: turned off, a user's own
    CDS options, none written yet, or a folder or file not the user's alone (a warning)."""
    env = os.environ if environ is None else environ
    folder = archive_folder(env)
    if folder is None or cds_chosen_elsewhere(env):
        return None
    if not os.path.lexists(folder):
        logger.info("no JVM class archive in %s: `make jvm-archive` writes one", folder)
        return None
    try:
        private = open_folder(folder)
    except OSError as error:
        logger.warning("not using the JVM class archives in %s: %s", folder, error)
        return None
    try:
        return _whole_archive(private, archive_name(env))
    finally:
        private.close()


def cds_chosen_elsewhere(env: Mapping[str, str]) -> bool:
    """The user's own Java options choose CDS: the JVM is left alone."""
    return chosen_elsewhere(_CHOSEN_ELSEWHERE, env)


def open_folder(folder: Path) -> PrivateFolder:
    """The archives' folder, created ``0700`` when absent; raises OSError (UnsafeFolder:
    why) unless it is the user's own, not a symlink, and not writable by others."""
    return PrivateFolder.open(folder, others_may_read=True)


def _whole_archive(folder: PrivateFolder, name: str) -> ClassArchive | None:
    """The archive of this installation whose size is the one it was written with (the
    JVM checks an archive's contents, not its length: a truncated one crashes it) and
    that is the user's own; one of another size is deleted."""
    prefix = f"{name}-"
    for candidate in sorted(folder.names()):
        if not (candidate.startswith(prefix) and candidate.endswith(".jsa")):
            continue
        written = candidate.removeprefix(prefix).removesuffix(".jsa")
        path = folder.path / candidate
        problem = folder.untrusted(candidate)
        if problem is not None:
            logger.warning("not using the JVM class archive %s: %s", path, problem)
            continue
        with contextlib.suppress(OSError):
            if written.isdigit() and path.stat().st_size == int(written):
                return ClassArchive(path)
            logger.warning("JVM class archive %s is not the size it was written: deleted", path)
            path.unlink()
    return None


def archive_folder(env: Mapping[str, str]) -> Path | None:
    """Where the archives are (``ENRICH_JVM_CLASS_ARCHIVE``); None when turned off."""
    setting = env.get(SETTING, "").strip()
    if setting.lower() == "off":
        return None
    if setting:
        return Path(setting).expanduser()
    cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "resumable-enrichment" / "jvm"


def spark_home(env: Mapping[str, str]) -> str:
    """The Spark installation whose ``bin/spark-submit`` launches the driver JVM."""
    import pyspark

    return env.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)


def archive_name(env: Mapping[str, str]) -> str:
    """The archive's name before its size: which Java and which Spark. An archive fits
    one JVM build and one class path (the JVM checks both; this keeps installations
    sharing a folder from replacing each other's archives)."""
    import pyspark

    java_home = env.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java") or ""
    identity = "\n".join([os.path.realpath(java), os.path.realpath(spark_home(env))])
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return f"spark-{pyspark.__version__}-{key}"


def set_aside(archive: ClassArchive) -> None:
    """The JVM did not start with ``archive`` but does without: it is deleted (``make
    jvm-archive`` writes a new one)."""
    logger.warning("the driver JVM did not start with the class archive %s: deleted", archive.path)
    with contextlib.suppress(OSError):
        archive.path.unlink()
