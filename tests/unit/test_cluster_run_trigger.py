"""The deferred Airflow operator's trigger and its driver-status client, against a real
HTTP server on loopback that answers as a standalone master's REST status endpoint does
(``/v1/submissions/status/<id>``), and a real snapshot store holding a progress record.
The real master answers the same in tests/integration/test_airflow_cluster_mode.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from aiohttp import web

from enrichment_airflow.cluster_run_trigger import ClusterRunTrigger
from enrichment_airflow.driver_status import (
    MAX_STATUS_BYTES,
    DriverStatusError,
    StandaloneRestStatus,
    standalone_rest_endpoints,
    status_client,
)
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.progress import PartitionEntry, ProgressRecord
from tests.integration.http_support import serve

KEY = NamespaceKey("enrich_customers", "enrich", "2024-01-01T00:00:00+00:00")
DRIVER = "driver-20261124192329-0000"


def master(states: Iterator[str]):
    """A REST status endpoint answering the next of ``states`` per call (``?`` for a
    driver it does not know)."""

    async def handler(request: web.Request) -> web.Response:
        assert request.path == f"/v1/submissions/status/{DRIVER}"
        state = next(states)
        if state == "?":
            return web.json_response(
                {"success": False, "message": f"Driver {DRIVER} not found", "submissionId": DRIVER}
            )
        return web.json_response({"success": True, "driverState": state, "submissionId": DRIVER})

    return handler


def record(done: int) -> ProgressRecord:
    entry = PartitionEntry(0, 3, done, 1200, done, 0, 4, None, 1, "a0", run_id="r1")
    return ProgressRecord("r1", 1, 4, 1200, (entry,))


async def test_standalone_status_asks_each_master_in_turn():
    async with serve(master(iter(["RUNNING", "FINISHED"]))) as url:
        dead = "http://127.0.0.1:9"  # nothing listens on the discard port
        client = status_client(StandaloneRestStatus([dead, url]).to_spec())
        running, finished = await client.state(DRIVER), await client.state(DRIVER)
    assert (running.name, running.active, running.succeeded) == ("RUNNING", True, False)
    assert (finished.name, finished.active, finished.succeeded) == ("FINISHED", False, True)


async def test_a_driver_the_master_does_not_know_is_an_error_saying_so():
    async with serve(master(iter(["?"]))) as url:
        with pytest.raises(DriverStatusError, match=f"Driver {DRIVER} not found"):
            await StandaloneRestStatus([url]).state(DRIVER)


async def endless(request: web.Request) -> web.StreamResponse:
    """A status endpoint whose answer never ends (chunked, no length)."""
    response = web.StreamResponse()
    await response.prepare(request)
    while True:
        await response.write(b'{"success": true, "driverState": "RUNNING", "pad": "' + b"x" * 8192)


async def oversized(request: web.Request) -> web.Response:
    """One whole answer, its length announced, just over the cap."""
    pad = "x" * MAX_STATUS_BYTES
    return web.json_response({"success": True, "driverState": "RUNNING", "pad": pad})


async def nested(request: web.Request) -> web.Response:
    """Under the cap, but nested deeper than the JSON parser recurses."""
    return web.Response(body=b"[" * (MAX_STATUS_BYTES // 2))


@pytest.mark.parametrize("answer", [endless, oversized])
async def test_a_status_answer_over_the_cap_is_an_error_read_no_further(answer):
    """The triggerer's memory and loop are shared by every deferred task: reading stops
    at ``MAX_STATUS_BYTES``, at once, not at the answer's end or the 30 s timeout."""
    async with serve(answer) as url:
        started = time.monotonic()
        with pytest.raises(DriverStatusError) as caught:
            await StandaloneRestStatus([url]).state(DRIVER)
    assert f"status answer larger than {MAX_STATUS_BYTES} bytes" in str(caught.value)
    assert time.monotonic() - started < 5


async def test_a_status_answer_nested_too_deeply_is_an_error_not_a_crash():
    async with serve(nested) as url:
        with pytest.raises(DriverStatusError, match="nested too deeply"):
            await StandaloneRestStatus([url]).state(DRIVER)


def test_rest_endpoints_of_a_standalone_master_and_of_an_ha_pair():
    assert standalone_rest_endpoints("spark://m:6066") == ["http://m:6066"]
    assert standalone_rest_endpoints("spark://a:7077,b:7077", "https", 16066) == [
        "https://a:16066",
        "https://b:16066",
    ]
    with pytest.raises(ValueError, match="not a standalone master: 'yarn'"):
        standalone_rest_endpoints("yarn")


def trigger(url: str, root: str, max_missed: int = 3) -> ClusterRunTrigger:
    made = ClusterRunTrigger(
        driver_id=DRIVER,
        run_id="r1",
        status=StandaloneRestStatus([url]).to_spec(),
        snapshot_root=root,
        namespace=[KEY.dag_id, KEY.task_id, KEY.interval_start],
        poll_interval_s=0.01,
        max_missed=max_missed,
    )
    classpath, kwargs = made.serialize()  # the triggerer rebuilds it from these
    assert classpath == "enrichment_airflow.cluster_run_trigger.ClusterRunTrigger"
    return ClusterRunTrigger(**kwargs)


async def test_the_trigger_logs_progress_and_fires_once_when_the_driver_finished(tmp_path, capsys):
    store = SnapshotStore(str(tmp_path))
    store.write_progress_record(KEY, record(480))
    states = iter(["SUBMITTED", "RUNNING", "RUNNING", "FINISHED"])
    async with serve(master(states)) as url:
        events = [event async for event in trigger(url, str(tmp_path)).run()]
    assert [e.payload for e in events] == [
        {
            "status": "success",
            "driver_id": DRIVER,
            "run_id": "r1",  # execute_complete needs nothing but the event
            "driver_state": "FINISHED",
            "message": f"driver {DRIVER} finished",
        }
    ]
    log = capsys.readouterr().out  # Airflow's structured log, as the task log shows it
    assert log.count("progress: 480 / 1 200 committed, epoch 3, 4 in flight") == 1
    assert f"driver {DRIVER} is RUNNING" in log and f"driver {DRIVER} is FINISHED" in log


async def test_the_trigger_fails_for_a_killed_driver_and_for_a_master_it_cannot_ask(tmp_path):
    async with serve(master(iter(["RUNNING", "KILLED"]))) as url:
        [killed] = [event async for event in trigger(url, str(tmp_path)).run()]
    assert killed.payload["status"] == "failed" and killed.payload["driver_state"] == "KILLED"
    async with serve(master(iter(["?"] * 3))) as url:
        [lost] = [event async for event in trigger(url, str(tmp_path), max_missed=3).run()]
    assert lost.payload["status"] == "failed" and lost.payload["driver_state"] == "UNREACHABLE"
    assert killed.payload["run_id"] == lost.payload["run_id"] == "r1"
    assert "not found" in lost.payload["message"]
