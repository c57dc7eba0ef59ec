"""The command that writes the driver JVM's class archive (``session/write_class_archive.py``),
before any JVM starts: a folder not the user's alone is refused, a killed writer's partial
file removed. (Writing and mapping with real JVMs: tests/integration/test_class_archive.py.)"""

from __future__ import annotations

import os
import time

import pytest

from spark_jobs.enrichers.private_dir import UnsafeFolder
from spark_jobs.session import write_class_archive as wca
from spark_jobs.session.class_archive import SETTING


@pytest.fixture
def no_jvm(monkeypatch):
    """Fails the test if the command launches a JVM."""

    def launch(*args: object) -> None:
        raise AssertionError(f"a JVM was launched: {args}")

    monkeypatch.setattr(wca, "_launch", launch)


@pytest.mark.parametrize("plant", ["open to others", "a symlink"])
def test_a_folder_not_the_users_alone_is_refused_before_any_jvm(
    tmp_path, monkeypatch, no_jvm, plant
):
    folder = tmp_path / "jvm"
    if plant == "a symlink":
        (tmp_path / "planted").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "planted")
    else:
        folder.mkdir()
        folder.chmod(0o777)
    monkeypatch.setenv(SETTING, str(folder))
    with pytest.raises(UnsafeFolder, match=f"{folder}: (mode 0777|a symlink)"):
        wca.write_now()
    assert wca.main() == 1


def test_turned_off_it_writes_nothing(monkeypatch, no_jvm):
    monkeypatch.setenv(SETTING, "off")
    assert "is off" in wca.write_now()


def test_a_killed_writers_partial_archive_is_removed_a_live_ones_kept(tmp_path):
    dead, live = tmp_path / "spark-x.1.partial", tmp_path / "spark-x.2.partial"
    dead.write_bytes(b"half")
    live.write_bytes(b"half")
    old = time.time() - wca.STALE_PARTIAL_S - 60
    os.utime(dead, (old, old))
    wca._remove_stale_partials(tmp_path)
    assert not dead.exists() and live.exists()
