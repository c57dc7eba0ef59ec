"""The namespace lease between two real holders on a real local store: a run that waits
says for whom, since when and for how long, and keeps saying it while it waits."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from datetime import UTC, datetime

import pytest

from spark_jobs.snapshots import LeaseError, NamespaceKey, SnapshotStore

KEY = NamespaceKey("d", "t", "2026-11-20T00:00:00+00:00")


def utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def lease_file(store: SnapshotStore) -> dict:
    with open(f"{store.namespace_path(KEY)}/_lease.json") as handle:
        return json.load(handle)


def waiting_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]


def test_a_waiting_run_names_the_holder_its_renewal_expiry_and_wait(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="spark_jobs.snapshots.lease")
    store = SnapshotStore(str(tmp_path))
    first = store.lease(KEY, "first", ttl_s=120)
    first.acquire(0)
    held = lease_file(store)
    second = store.lease(KEY, "second", ttl_s=120)
    waiter = threading.Thread(
        target=second.acquire, kwargs={"wait_s": 300, "poll_s": 0.05, "report_s": 0.2}
    )
    waiter.start()
    try:
        deadline = time.monotonic() + 60
        while len(waiting_lines(caplog)) < 3:  # the announcement and two progress lines
            assert time.monotonic() < deadline, waiting_lines(caplog)
            time.sleep(0.05)
    finally:
        first.release()
        waiter.join(60)
    assert second.holds() and not first.holds()
    announced, *progress = waiting_lines(caplog)
    assert announced.startswith(
        "run first holds this namespace: waiting up to 300s (--lease-wait) for it to finish "
        f"or its lease to expire; last renewed {utc(held['renewed_at'])} ("
    )
    assert f"expires {utc(held['expires_at'])} (in 1" in announced  # about 120 s from now
    assert store.namespace_path(KEY) in announced
    for line in progress:
        assert line.startswith("still waiting for run first: ")
        assert "s of 300s (--lease-wait); last renewed " + utc(held["renewed_at"]) in line
        assert f"expires {utc(held['expires_at'])}" in line


def test_a_wait_that_runs_out_fails_naming_the_holder_and_its_lease(tmp_path):
    store = SnapshotStore(str(tmp_path))
    store.lease(KEY, "first", ttl_s=120).acquire(0)
    held = lease_file(store)
    with pytest.raises(LeaseError) as raised:
        store.lease(KEY, "second").acquire(0.2, poll_s=0.05)
    message = str(raised.value)
    assert message.startswith(f"another run (first) holds {store.namespace_path(KEY)}")
    assert f"last renewed {utc(held['renewed_at'])}" in message
    assert f"expires {utc(held['expires_at'])}" in message
    assert message.endswith("waited 0.2s for it to finish (--lease-wait)")


def test_a_lease_written_without_its_renewal_time_still_explains_the_wait(tmp_path):
    """A lease of an earlier version (owner and expiry only) is read, not refused."""
    store = SnapshotStore(str(tmp_path))
    store.lease(KEY, "first", ttl_s=120).acquire(0)
    path = f"{store.namespace_path(KEY)}/_lease.json"
    expires = time.time() + 120
    with open(path, "w") as handle:
        json.dump({"owner": "first", "expires_at": expires}, handle)
    with pytest.raises(LeaseError, match="last renewed at an unknown time, expires"):
        store.lease(KEY, "second").acquire(0.1, poll_s=0.05)


def write_lease(store: SnapshotStore, content: str | bytes) -> None:
    path = f"{store.namespace_path(KEY)}/_lease.json"
    with open(path, "wb") as handle:
        handle.write(content if isinstance(content, bytes) else content.encode())


@pytest.mark.parametrize(
    "expires_at",
    [
        *("Infinity", "NaN", "1e300", '"1e12"', "null", "true"),
        # Named: an id with the time in it differs between pytest-xdist's workers.
        pytest.param(str(time.time() + 30 * 86400), id="in-30-days"),
    ],
)
def test_a_crafted_expiry_counts_as_expired_and_never_blocks_a_run(tmp_path, caplog, expires_at):
    store = SnapshotStore(str(tmp_path))
    store.lease(KEY, "first").acquire(0)
    write_lease(store, f'{{"owner": "crafted", "expires_at": {expires_at}}}')
    second = store.lease(KEY, "second")
    assert not second.live()
    second.acquire(0)  # at once: no wait for --lease-wait
    assert second.holds()
    assert "treating the lease" in caplog.text
    assert re.search(r"as expired: (expires_at|not JSON .*is not a finite number)", caplog.text)


def test_an_oversized_lease_is_refused_unread(tmp_path, caplog):
    store = SnapshotStore(str(tmp_path))
    store.lease(KEY, "first").acquire(0)
    padding = " " * 10_000
    write_lease(store, f'{{"owner": "big", "expires_at": {time.time() + 60}{padding}}}')
    assert store.lease(KEY, "second").read() is None
    assert "as expired: over 4096 bytes" in caplog.text


def test_a_lease_of_the_longest_ttl_is_believed_even_from_a_clock_a_little_ahead(tmp_path):
    store = SnapshotStore(str(tmp_path))
    store.lease(KEY, "first").acquire(0)
    write_lease(store, json.dumps({"owner": "first", "expires_at": time.time() + 3600 + 60}))
    assert store.lease(KEY, "second").live()


def test_an_owner_with_a_newline_reaches_logs_and_errors_escaped(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="spark_jobs.snapshots.lease")
    store = SnapshotStore(str(tmp_path))
    store.lease(KEY, "first").acquire(0)
    owner = "x\n2026-11-24 10:00:00 INFO enrich_job: forged\x1b[2J"
    write_lease(store, json.dumps({"owner": owner, "expires_at": time.time() + 60}))
    with pytest.raises(LeaseError) as raised:
        store.lease(KEY, "second").acquire(0.1, poll_s=0.05)
    assert "another run (x\\n2026-11-24 10:00:00 INFO enrich_job: forged\\x1b[2J)" in str(
        raised.value
    )
    assert "\n" not in str(raised.value) and "\x1b" not in caplog.text
    assert "run x\\n2026" in caplog.text


def test_work_done_while_a_lease_settles_is_returned_once_the_lease_is_held(tmp_path):
    store = SnapshotStore(str(tmp_path))
    lease = store.lease(KEY, "first")
    seen = []

    def read_input() -> str:
        seen.append(lease_file(store)["owner"])  # the lease is written before it runs
        return "the input"

    assert lease.acquire(0, meanwhile=read_input) == "the input"
    assert seen == ["first"] and lease.holds()


def test_work_done_for_a_race_lost_is_done_again_holding_the_lease(tmp_path):
    store = SnapshotStore(str(tmp_path))
    lease = store.lease(KEY, "first")
    reads = []

    def read_input() -> int:
        if not reads:  # another run writes its lease after this one's (it wins the race)
            now = time.time()
            rival = {"owner": "rival", "expires_at": now + 0.2, "renewed_at": now}
            path = f"{store.namespace_path(KEY)}/_lease.json"
            with open(path, "w") as handle:
                json.dump(rival, handle)
        reads.append(len(reads) + 1)
        return reads[-1]

    assert lease.acquire(30, poll_s=0.05, meanwhile=read_input) == 2  # after the rival's expiry
    assert lease.holds() and reads == [1, 2]


def test_work_that_fails_while_a_lease_settles_lets_the_lease_go(tmp_path):
    store = SnapshotStore(str(tmp_path))
    lease = store.lease(KEY, "first")

    def read_input() -> None:
        raise ValueError("no such input")

    with pytest.raises(ValueError, match="no such input"):
        lease.acquire(0, meanwhile=read_input)
    assert lease.read() is None  # the next run need not wait for its expiry
