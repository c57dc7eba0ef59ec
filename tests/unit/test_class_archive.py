"""Which class archive a driver JVM launched here gets (``session/class_archive.py``):
only a whole one of this installation's, in a folder and a file that are the user's own."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from spark_jobs.session import class_archive as ca


def env(tmp_path, **more: str) -> dict[str, str]:
    return {ca.SETTING: str(tmp_path / "jvm"), "JAVA_HOME": "/usr/lib/jvm/a", **more}


def written(environ: dict[str, str], content: bytes, size: int | None = None) -> Path:
    """The file ``make jvm-archive`` would leave for ``environ``, with ``content``."""
    folder = Path(environ[ca.SETTING])
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{ca.archive_name(environ)}-{size or len(content)}.jsa"
    path.write_bytes(content)
    path.chmod(0o444)  # as the JVM writes it
    return path


def test_without_an_archive_the_jvm_gets_none_and_nothing_is_written(tmp_path):
    assert ca.class_archive(env(tmp_path)) is None
    assert not (tmp_path / "jvm").exists()


def test_a_written_archive_is_mapped_after_its_contents_are_checked(tmp_path):
    path = written(env(tmp_path), b"archive")
    archive = ca.class_archive(env(tmp_path))
    assert archive is not None and archive.path == path
    options = archive.java_options.split()
    assert f"-XX:SharedArchiveFile={path}" in options
    assert "-XX:+VerifySharedSpaces" in options
    assert not any("ArchiveClassesAtExit" in option for option in options)
    # Its warnings would land on the job's stdout, and a JVM without CDS must still start.
    assert "-Xlog:cds=off" in options and "-XX:+IgnoreUnrecognizedVMOptions" in options


def test_another_java_or_spark_has_an_archive_of_its_own(tmp_path):
    names = {
        ca.archive_name(env(tmp_path)),
        ca.archive_name(env(tmp_path, JAVA_HOME="/usr/lib/jvm/b")),
        ca.archive_name(env(tmp_path, SPARK_HOME=str(tmp_path))),
    }
    assert len(names) == 3
    written(env(tmp_path, JAVA_HOME="/usr/lib/jvm/b"), b"archive")
    assert ca.class_archive(env(tmp_path)) is None


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
    written(env(tmp_path), b"archive")
    assert ca.class_archive({**env(tmp_path), **setting}) is None


def test_a_file_where_the_folder_goes_means_no_archive(tmp_path):
    (tmp_path / "jvm").write_text("a file where the folder should be")
    assert ca.class_archive(env(tmp_path)) is None


def test_the_default_folder_is_the_users_cache(tmp_path):
    assert ca.archive_folder({}) == Path.home() / ".cache" / "resumable-enrichment" / "jvm"
    assert ca.archive_folder({"XDG_CACHE_HOME": str(tmp_path)}) == (
        tmp_path / "resumable-enrichment" / "jvm"
    )


def test_an_archive_not_the_size_it_was_written_is_deleted_before_any_jvm_maps_it(tmp_path):
    truncated = written(env(tmp_path), b"half of it", size=20)
    assert ca.class_archive(env(tmp_path)) is None
    assert not truncated.exists()


def test_an_archive_the_jvm_did_not_start_with_is_deleted(tmp_path):
    path = written(env(tmp_path), b"archive")
    ca.set_aside(ca.ClassArchive(path))
    assert not path.exists()


# -- issue 41: a planted folder, file or symlink is never mapped ------------------------------

OTHER_UID = 4242
"""A user who is not us (chown needs root: those cases are skipped otherwise)."""
as_root = pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")


def planted_archive(folder: Path, environ: dict[str, str]) -> Path:
    """A whole archive under the name this installation maps, in ``folder``."""
    name = ca.archive_name(environ)
    path = folder / f"{name}-5.jsa"
    path.write_bytes(b"12345")
    path.chmod(0o444)
    return path


def refused(environ: dict[str, str], caplog: pytest.LogCaptureFixture, what: str) -> None:
    with caplog.at_level(logging.WARNING, logger=ca.__name__):
        assert ca.class_archive(environ) is None
    assert what in caplog.text, caplog.text


@as_root
def test_a_folder_of_another_user_is_not_used(tmp_path, caplog):
    folder = tmp_path / "jvm"
    folder.mkdir(mode=0o755)
    planted_archive(folder, env(tmp_path))
    os.chown(folder, OTHER_UID, OTHER_UID)
    refused(env(tmp_path), caplog, f"{folder}: owned by uid {OTHER_UID}")


def test_a_folder_others_may_write_is_not_used(tmp_path, caplog):
    folder = tmp_path / "jvm"
    folder.mkdir()
    planted_archive(folder, env(tmp_path))
    folder.chmod(0o777)
    refused(env(tmp_path), caplog, f"{folder}: mode 0777")


def test_a_folder_that_is_a_symlink_is_not_followed(tmp_path, caplog):
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir(mode=0o755)
    planted_archive(elsewhere, env(tmp_path))
    (tmp_path / "jvm").symlink_to(elsewhere)
    refused(env(tmp_path), caplog, f"{tmp_path / 'jvm'}: a symlink")


@as_root
def test_an_archive_of_another_user_is_not_mapped_nor_deleted(tmp_path, caplog):
    folder = tmp_path / "jvm"
    folder.mkdir(mode=0o755)
    path = planted_archive(folder, env(tmp_path))
    os.chown(path, OTHER_UID, OTHER_UID)
    refused(env(tmp_path), caplog, f"{path}: owned by uid {OTHER_UID}")
    assert path.exists()


def test_an_archive_others_may_write_is_not_mapped(tmp_path, caplog):
    folder = tmp_path / "jvm"
    folder.mkdir(mode=0o755)
    path = planted_archive(folder, env(tmp_path))
    path.chmod(0o666)
    refused(env(tmp_path), caplog, f"{path}: mode 0666")


def test_an_archive_that_is_a_symlink_is_not_followed(tmp_path, caplog):
    folder = tmp_path / "jvm"
    folder.mkdir(mode=0o755)
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir()
    target = planted_archive(elsewhere, env(tmp_path))
    (folder / target.name).symlink_to(target)
    refused(env(tmp_path), caplog, f"{folder / target.name}: a symlink")
    assert target.exists()
