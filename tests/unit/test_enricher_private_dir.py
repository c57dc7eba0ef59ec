"""The private folder of the rate files (``enrichers/private_dir.py``): made ``0700`` and
this user's; refused, saying why, when it is another's, open to others, a symlink or a
file; a planted file in it (a symlink, another's file, one open to others, a hard link) is
replaced with a warning naming it and never written through; Spark's local dir is
preferred. The tests run as root where they can chown a file to another uid; another
user's process racing a replacement cannot be simulated here."""

from __future__ import annotations

import logging
import os
import stat

import pytest

from spark_jobs.enrichers.private_dir import (
    FOLDER_PREFIX,
    PrivateFolder,
    UnsafeFolder,
    base_folder,
    executor_folder,
)

OTHER_UID = 4242
"""A user who is not us (chown needs root: those cases are skipped otherwise)."""
as_root = pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_folder_is_made_private_and_opened_again(tmp_path):
    path = tmp_path / "rates"
    PrivateFolder.open(path).close()
    info = os.lstat(path)
    assert stat.S_ISDIR(info.st_mode) and mode(path) == 0o700 and info.st_uid == os.getuid()
    folder = PrivateFolder.open(path)  # as the executor's next worker does
    fd = folder.open_file("schedule")
    assert mode(path / "schedule") == 0o600
    os.close(fd)
    folder.close()


def test_a_folder_open_to_others_is_refused_naming_it(tmp_path):
    path = tmp_path / "rates"
    path.mkdir(mode=0o700)
    path.chmod(0o777)
    with pytest.raises(UnsafeFolder, match=rf"{path}: mode 0777 lets others in.*uid"):
        PrivateFolder.open(path)


def test_a_folder_others_may_read_is_refused_unless_they_may(tmp_path):
    """The class archives' folder (``session/class_archive.py``): others may read, not write."""
    path = tmp_path / "shared"
    path.mkdir()
    path.chmod(0o755)
    with pytest.raises(UnsafeFolder, match="mode 0755 lets others in"):
        PrivateFolder.open(path)
    folder = PrivateFolder.open(path, others_may_read=True)
    (path / "archive").write_bytes(b"x")
    (path / "archive").chmod(0o444)
    assert folder.names() == ["archive"] and folder.untrusted("archive") is None
    (path / "archive").chmod(0o664)
    assert folder.untrusted("archive") == "mode 0664 lets others in"
    assert folder.untrusted("absent") is None
    folder.close()
    path.chmod(0o775)
    with pytest.raises(UnsafeFolder, match="mode 0775"):
        PrivateFolder.open(path, others_may_read=True)


@as_root
def test_a_folder_of_another_user_is_refused(tmp_path):
    path = tmp_path / "rates"
    path.mkdir(mode=0o700)
    os.chown(path, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeFolder, match=f"owned by uid {OTHER_UID}"):
        PrivateFolder.open(path)


def test_a_symlink_or_a_file_where_the_folder_goes_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "linked").symlink_to(target)
    with pytest.raises(UnsafeFolder, match="linked: a symlink"):
        PrivateFolder.open(tmp_path / "linked")
    (tmp_path / "plain").write_text("a file")
    with pytest.raises(UnsafeFolder, match="plain: a file"):
        PrivateFolder.open(tmp_path / "plain")
    assert list(target.iterdir()) == []


def _plant_symlink(folder_path, victim):
    (folder_path / "schedule").symlink_to(victim)


def _plant_open_file(folder_path, victim):
    (folder_path / "schedule").write_bytes(b"planted")
    (folder_path / "schedule").chmod(0o666)


def _plant_hard_link(folder_path, victim):
    os.link(victim, folder_path / "schedule")


def _plant_foreign_file(folder_path, victim):
    (folder_path / "schedule").write_bytes(b"planted")
    (folder_path / "schedule").chmod(0o600)
    os.chown(folder_path / "schedule", OTHER_UID, OTHER_UID)


@pytest.mark.parametrize(
    ("plant", "problem"),
    [
        (_plant_symlink, "a symlink"),
        (_plant_open_file, "mode 0666 lets others in"),
        (_plant_hard_link, "2 hard links"),
        pytest.param(_plant_foreign_file, f"owned by uid {OTHER_UID}", marks=as_root),
    ],
)
def test_a_planted_file_is_replaced_with_a_warning_never_written_through(
    tmp_path, caplog, plant, problem
):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    victim.chmod(0o600)
    folder = PrivateFolder.open(tmp_path / "rates")
    plant(tmp_path / "rates", victim)
    with caplog.at_level(logging.WARNING):
        fd = folder.open_file("schedule")
    os.write(fd, b"ours")
    os.close(fd)
    assert victim.read_bytes() == b"keep me"
    planted = tmp_path / "rates" / "schedule"
    info = os.lstat(planted)
    assert stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and mode(planted) == 0o600
    assert planted.read_bytes() == b"ours"
    assert [r.getMessage() for r in caplog.records] == [
        f"{planted}: {problem}, not ours to trust; replacing it"
    ]
    folder.close()


def test_a_planted_file_is_never_opened_for_reading_either(tmp_path):
    """``open_existing`` (a neighbour's slot lock, looked at each tick) neither follows
    a symlink nor creates what is absent."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"")
    victim.chmod(0o600)
    folder = PrivateFolder.open(tmp_path / "rates")
    (tmp_path / "rates" / "slot-0").symlink_to(victim)
    assert folder.open_existing("slot-0") is None
    assert folder.open_existing("slot-1") is None
    assert not (tmp_path / "rates" / "slot-1").exists()
    folder.close()


def test_a_folder_where_a_file_goes_is_refused(tmp_path):
    folder = PrivateFolder.open(tmp_path / "rates")
    (tmp_path / "rates" / "schedule").mkdir()
    with pytest.raises(UnsafeFolder, match="schedule: a folder where a file goes"):
        folder.open_file("schedule")
    folder.close()


def test_sparks_local_dir_is_preferred_to_the_temp_folder(tmp_path, monkeypatch):
    local = tmp_path / "blockmgr-1"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{tmp_path / 'gone'},{local},{tmp_path}")
    assert base_folder() == local  # the first that is a folder
    folder = executor_folder("schedule", "api")
    assert folder is not None
    root = local / f"{FOLDER_PREFIX}{os.getuid()}"
    assert folder.path.parent == root and mode(root) == 0o700 and mode(folder.path) == 0o700
    folder.close()
