"""Which class archive a driver JVM launched here gets (``driver/class_archive.py``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from spark_jobs.driver import class_archive as ca


def env(tmp_path, **more: str) -> dict[str, str]:
    return {ca.SETTING: str(tmp_path / "jvm"), "JAVA_HOME": "/usr/lib/jvm/a", **more}


def written(archive: ca.ClassArchive, content: bytes, size: int | None = None) -> Path:
    """The file keep_written would leave for ``archive``, with ``content``."""
    path = archive.path.with_name(f"{archive.path.stem}-{size or len(content)}.jsa")
    path.write_bytes(content)
    return path


def test_without_an_archive_the_jvm_writes_one_under_a_name_of_its_own(tmp_path):
    archive = ca.class_archive(env(tmp_path))
    assert archive is not None and archive.writing is not None
    assert archive.writing.parent == archive.path.parent == tmp_path / "jvm"
    assert archive.writing.name == f"{archive.path.stem}.{os.getpid()}.partial"
    assert f"-XX:ArchiveClassesAtExit={archive.writing}" in archive.java_options
    assert "SharedArchiveFile" not in archive.java_options


def test_an_archive_in_place_is_mapped_after_its_contents_are_checked(tmp_path):
    first = ca.class_archive(env(tmp_path))
    assert first is not None
    path = written(first, b"archive")
    archive = ca.class_archive(env(tmp_path))
    assert archive is not None and archive.writing is None and archive.path == path
    options = archive.java_options.split()
    assert f"-XX:SharedArchiveFile={path}" in options
    assert "-XX:+VerifySharedSpaces" in options
    # Its warnings would land on the job's stdout, and a JVM without CDS must still start.
    assert "-Xlog:cds=off" in options and "-XX:+IgnoreUnrecognizedVMOptions" in options


def test_another_java_or_spark_gets_an_archive_of_its_own(tmp_path):
    one = ca.class_archive(env(tmp_path))
    other_java = ca.class_archive(env(tmp_path, JAVA_HOME="/usr/lib/jvm/b"))
    other_spark = ca.class_archive(env(tmp_path, SPARK_HOME=str(tmp_path)))
    assert one and other_java and other_spark
    assert len({one.path, other_java.path, other_spark.path}) == 3


@pytest.mark.parametrize(
    "setting",
    [
        {ca.SETTING: "off"},
        {ca.SETTING: "OFF "},
        {"SPARK_SUBMIT_OPTS": "-XX:SharedArchiveFile=/mine.jsa"},
        {"JDK_JAVA_OPTIONS": "-Xshare:off"},
        {"JAVA_TOOL_OPTIONS": "-XX:ArchiveClassesAtExit=/mine.jsa"},
    ],
)
def test_turned_off_or_a_users_own_cds_options_leave_the_jvm_alone(tmp_path, setting):
    assert ca.class_archive({**env(tmp_path), **setting}) is None


def test_a_folder_that_cannot_be_written_means_no_archive(tmp_path):
    (tmp_path / "jvm").write_text("a file where the folder should be")
    assert ca.class_archive(env(tmp_path)) is None


def test_the_default_folder_is_the_users_cache(tmp_path):
    archive = ca.class_archive({"XDG_CACHE_HOME": str(tmp_path), "JAVA_HOME": "/j"})
    assert archive is not None
    assert archive.path.parent == tmp_path / "resumable-enrichment" / "jvm"


def test_a_dead_writers_partial_archive_is_removed_a_live_ones_kept(tmp_path):
    folder = tmp_path / "jvm"
    folder.mkdir()
    dead, live = folder / "spark-x.jsa.1.partial", folder / "spark-x.jsa.2.partial"
    dead.write_bytes(b"half")
    live.write_bytes(b"half")
    old = time.time() - ca.STALE_PARTIAL_S - 60
    os.utime(dead, (old, old))
    ca.class_archive(env(tmp_path))
    assert not dead.exists() and live.exists()


def test_an_archive_not_the_size_it_was_written_is_deleted_before_any_jvm_maps_it(tmp_path):
    archive = ca.class_archive(env(tmp_path))
    assert archive is not None
    truncated = written(archive, b"half of it", size=20)
    again = ca.class_archive(env(tmp_path))
    assert again is not None and again.writing is not None  # written anew
    assert not truncated.exists()


def test_a_mapped_archive_the_jvm_did_not_take_is_deleted_a_written_one_not(tmp_path):
    archive = ca.class_archive(env(tmp_path))
    assert archive is not None
    path = written(archive, b"archive")
    mapped = ca.class_archive(env(tmp_path))
    assert mapped is not None
    ca.set_aside(archive)  # the writer's: the file in place is not the one it tried
    assert path.exists()
    ca.set_aside(mapped)
    assert not path.exists()
