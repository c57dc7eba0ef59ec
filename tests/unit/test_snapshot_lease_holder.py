"""A lease whose holder's process has exited on this machine is taken over at once; one
whose holder may still run (alive, stopped, elsewhere, or not ours to inspect) waits for
its expiry. Real processes: a child that takes the lease, then is killed or stopped."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from spark_jobs.snapshots import LeaseError, NamespaceKey, SnapshotStore
from spark_jobs.snapshots.lease import Holder, Lease, has_exited, this_process
from spark_jobs.snapshots.progress import stall_of

KEY = NamespaceKey("d", "t", "2026-11-20T00:00:00+00:00")
ROOT = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.lease import this_process
key = NamespaceKey("d", "t", "2026-11-20T00:00:00+00:00")
holder = this_process() if sys.argv[2] == "holder" else None
SnapshotStore(sys.argv[1]).lease(key, "killed", 600, holder).acquire(0)
print("held", flush=True)
time.sleep(600)
"""

pytestmark = pytest.mark.skipif(this_process() is None, reason="needs Linux's /proc")


@contextmanager
def holding_child(root: Path, holder: str = "holder") -> Iterator[subprocess.Popen[str]]:
    """A child process that holds the namespace's lease (TTL 600 s) until killed, naming
    itself in it unless ``holder`` is ``"none"`` (as a Spark Connect client's lease)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", HOLD, str(root), holder]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        yield child
    finally:
        child.kill()
        child.wait(60)


def lease_path(store: SnapshotStore) -> Path:
    return Path(store.namespace_path(KEY)) / "_lease.json"


def write_holder(store: SnapshotStore, holder: object) -> None:
    now = time.time()
    lease = {"owner": "other", "expires_at": now + 600, "renewed_at": now, "holder": holder}
    lease_path(store).write_text(json.dumps(lease))


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
def test_the_lease_of_a_killed_run_on_this_host_is_taken_over_at_once(tmp_path, caplog, reaped):
    store = SnapshotStore(str(tmp_path))
    second = store.lease(KEY, "second", ttl_s=600)
    with holding_child(tmp_path) as child:
        with pytest.raises(LeaseError, match=r"another run \(killed\)"):
            second.acquire(0)  # alive: its lease holds
        assert json.loads(lease_path(store).read_text())["holder"]["pid"] == child.pid
        child.send_signal(signal.SIGKILL)
        if reaped:
            child.wait(60)
        else:  # killed, not yet waited for by its parent
            while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
                time.sleep(0.01)
        assert not second.live()
        second.acquire(0)  # at once, 600 s before the killed run's lease expires
    assert second.holds()
    assert (
        f"taking over the lease of run killed: its process (PID {child.pid} on this host) "
        "has exited, last renewed"
    ) in caplog.text


def test_a_lease_that_names_no_holder_only_expires(tmp_path):
    """A Spark Connect client's: its tasks go on on the server after it dies."""
    store = SnapshotStore(str(tmp_path))
    with holding_child(tmp_path, holder="none") as child:
        child.send_signal(signal.SIGKILL)
        child.wait(60)
        assert "holder" not in json.loads(lease_path(store).read_text())
        with pytest.raises(LeaseError, match=r"another run \(killed\)"):
            store.lease(KEY, "second").acquire(0)


def test_a_stopped_holder_keeps_its_lease(tmp_path):
    """A SIGSTOPped driver may wake up: only its lease's expiry lets another run in."""
    store = SnapshotStore(str(tmp_path))
    with holding_child(tmp_path) as child:
        child.send_signal(signal.SIGSTOP)
        while psutil.Process(child.pid).status() != psutil.STATUS_STOPPED:
            time.sleep(0.01)
        with pytest.raises(LeaseError, match=r"another run \(killed\)"):
            store.lease(KEY, "second").acquire(0)


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


@pytest.mark.parametrize(
    "change",
    [{"host": "another-host"}, {"boot": "another-boot"}, {"pid_namespace": "pid:[1]"}],
    ids=["another-host", "another-boot", "another-pid-namespace"],
)
def test_a_holder_elsewhere_is_never_judged_dead(tmp_path, change):
    """A process table that is not the holder's proves nothing: its lease waits."""
    store = SnapshotStore(str(tmp_path))
    store.lease(KEY, "first").acquire(0)
    here = this_process()
    assert here is not None
    gone = dataclasses.replace(here, pid=_dead_pid())
    assert has_exited(gone)
    write_holder(store, {**gone.to_json(), **change})
    with pytest.raises(LeaseError, match=r"another run \(other\)"):
        store.lease(KEY, "second").acquire(0)


def test_a_reused_pid_is_told_by_its_start_time(tmp_path):
    here = this_process()
    assert here is not None
    assert not has_exited(here)
    assert has_exited(dataclasses.replace(here, started=here.started + 1))


@pytest.mark.parametrize(
    "holder",
    [
        "1234",
        {"host": "h", "boot": "b", "pid_namespace": "n", "pid": "1", "started": 1},
        {"host": "h", "boot": "b", "pid_namespace": "n", "pid": True, "started": 1},
        {"host": "", "boot": "b", "pid_namespace": "n", "pid": 1, "started": 1},
        {"host": "h" * 300, "boot": "b", "pid_namespace": "n", "pid": 1, "started": 1},
        {"host": "h", "boot": "b", "pid_namespace": "n", "pid": -1, "started": 1},
        {"host": "h", "boot": "b", "pid_namespace": "n", "pid": 0, "started": 1},
        {"host": "h", "boot": "b", "pid_namespace": "n", "pid": 2**80, "started": 1},
    ],
)
def test_a_crafted_holder_is_ignored_and_the_lease_believed(tmp_path, holder):
    """Implausible holder fields make the lease one without a holder: it still holds
    until it expires (a crafted lease gains nothing it could not by its expiry)."""
    store = SnapshotStore(str(tmp_path))
    store.lease(KEY, "first").acquire(0)
    write_holder(store, holder)
    second = store.lease(KEY, "second")
    assert second.read() is not None and second.read().holder is None  # type: ignore[union-attr]
    assert Holder.from_json(holder) is None
    assert second.live()


def test_a_forked_child_names_itself_not_its_parent():
    parent = this_process()
    assert parent is not None and parent.pid == os.getpid()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own PID and start time, not the parent's cached ones
        child = this_process()
        os.write(write, json.dumps(child.to_json() if child else None).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = Holder.from_json(json.loads(os.read(read, 4096)))
    assert child is not None and child.pid == pid and child != parent


def test_a_page_reader_tells_a_dead_holder_interrupted_not_stalled():
    """The snapshot page and the Storage tab (``stall_of``): a lease silent for 50 s of
    its 60 s TTL is a stall while its holder lives, and no longer in force once it died."""
    now = time.time()
    here = this_process()
    assert here is not None
    alive = Lease("run", now + 10, now - 50, here)
    dead = dataclasses.replace(alive, holder=dataclasses.replace(here, pid=_dead_pid()))
    assert alive.in_force(now) and stall_of(None, alive, now) is not None
    assert not dead.in_force(now) and stall_of(None, dead, now) is None
