"""The demo API against a real aiohttp client over loopback.

Most tests start the server in-process with ``run_demo_api`` on a free port; one runs
``python -m demo.api`` as a subprocess, because the port-in-use message and exit code
only exist there.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from demo.api import build_app, main, run_demo_api
from demo.customers import customer_record
from demo.faults import DemoConfig, FaultInjector, Outcome, planned_outcome

REPO_ROOT = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def serve(**knobs: Any) -> AsyncIterator[aiohttp.ClientSession]:
    """A demo server with ``knobs`` and a client session whose paths are relative to it."""
    async with run_demo_api(DemoConfig(**knobs)) as base_url:
        async with aiohttp.ClientSession(base_url) as session:
            yield session


async def status_of(session: aiohttp.ClientSession, path: str, **kwargs: Any) -> int:
    async with session.get(path, **kwargs) as response:
        await response.read()
        return response.status


async def json_of(session: aiohttp.ClientSession, method: str, path: str, **kwargs: Any) -> Any:
    async with session.request(method, path, **kwargs) as response:
        return await response.json()


async def test_same_id_gives_the_same_body_on_every_server() -> None:
    async with serve() as first, serve() as second:
        bodies = [
            await json_of(first, "GET", "/customers/c000042"),
            await json_of(first, "GET", "/customers/c000042"),
            await json_of(second, "GET", "/customers/c000042"),
        ]
        other = await json_of(first, "GET", "/customers/c000043")
    assert bodies[0] == bodies[1] == bodies[2] == customer_record("c000042")
    assert bodies[0]["id"] == "c000042"
    assert set(bodies[0]) == {"id", "name", "segment", "score", "country", "address"}
    assert isinstance(bodies[0]["score"], float)
    assert "city" in bodies[0]["address"]
    assert other != bodies[0]


async def test_batch_keeps_request_order_and_marks_missing_ids() -> None:
    ids = ["c3", "missing-1", "c1", "c3"]
    async with serve() as session:
        body = await json_of(session, "POST", "/customers/batch", json={"ids": ids})
        single = await json_of(session, "GET", "/customers/c1")
    results = body["results"]
    assert [r["id"] for r in results] == ids
    assert results[2] == single
    assert results[0] == results[3] == customer_record("c3")
    assert results[1] == {"id": "missing-1", "error": "not found"}


async def test_missing_id_is_404() -> None:
    async with serve() as session:
        assert await status_of(session, "/customers/missing-7") == 404
        assert await status_of(session, "/customers/present-7") == 200


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"ids": "c1"}', b'{"ids": [1]}'])
async def test_malformed_batch_is_400(body: bytes) -> None:
    async with serve() as session, session.post("/customers/batch", data=body) as response:
        assert response.status == 400


async def test_error_rate_one_answers_500() -> None:
    async with serve(error_rate=1.0) as session:
        assert [await status_of(session, f"/customers/c{i}") for i in range(5)] == [500] * 5


async def test_rate_429_sends_retry_after() -> None:
    async with serve(rate_429=1.0, retry_after_s=7) as session:
        async with session.get("/customers/c1") as response:
            assert response.status == 429
            assert response.headers["Retry-After"] == "7"


async def test_outage_by_request_count() -> None:
    async with serve(outage_after_requests=2, outage_requests=3) as session:
        statuses = [await status_of(session, "/customers/c1") for _ in range(6)]
    assert statuses == [200, 200, 503, 503, 503, 200]


async def test_outage_by_time() -> None:
    async with serve(outage_start_s=0.3, outage_duration_s=0.4) as session:
        started = time.monotonic()
        before = await status_of(session, "/customers/c1")
        await asyncio.sleep(0.45 - (time.monotonic() - started))
        during = await status_of(session, "/customers/c1")
        await asyncio.sleep(0.9 - (time.monotonic() - started))
        after = await status_of(session, "/customers/c1")
    assert (before, during, after) == (200, 503, 200)


async def test_dropped_connection_is_a_client_connection_error() -> None:
    async with serve(drop_rate=1.0) as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await status_of(session, "/customers/c1")
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.post("/customers/batch", json={"ids": ["c2"]})
        stats = await json_of(session, "GET", "/stats")
    # aiohttp silently retries an idempotent GET once after a disconnect; a POST it does not.
    assert stats["by_status"] == {"dropped": 3}
    assert stats["per_key"] == {"c1": 2, "c2": 1}


async def test_slow_body_sends_headers_first_then_takes_the_configured_time() -> None:
    async with serve(slow_body_rate=1.0, slow_body_s=0.4) as session:
        started = time.monotonic()
        async with session.get("/customers/c1") as response:
            headers_after = time.monotonic() - started
            body = await response.json()
        body_after = time.monotonic() - started
    assert response.status == 200
    assert body == customer_record("c1")
    assert headers_after < 0.2
    assert body_after >= 0.4


async def test_fixed_latency_delays_every_answer() -> None:
    async with serve(latency_ms=200) as session:
        started = time.monotonic()
        assert await status_of(session, "/customers/c1") == 200
    assert time.monotonic() - started >= 0.2


async def test_random_faults_depend_on_seed_key_and_attempt_not_on_order() -> None:
    keys = [f"/customers/k{i}" for i in range(20)]

    async def fates(seed: int, order: list[str]) -> dict[tuple[str, int], int]:
        async with serve(error_rate=0.5, seed=seed) as session:
            return {
                (key, attempt): await status_of(session, key)
                for attempt in range(2)
                for key in order
            }

    forward = await fates(11, keys)
    assert set(forward.values()) == {200, 500}
    assert await fates(11, keys[::-1]) == forward
    assert await fates(12, keys) != forward


async def test_bearer_token_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO_API_TEST_TOKEN", "s3cret")
    async with serve(token_env="DEMO_API_TEST_TOKEN") as session:
        async with session.get("/customers/c1") as response:
            assert response.status == 401
            assert response.headers["WWW-Authenticate"] == "Bearer"
        wrong = {"Authorization": "Bearer nope"}
        right = {"Authorization": "Bearer s3cret"}
        assert await status_of(session, "/customers/c1", headers=wrong) == 401
        assert await status_of(session, "/customers/c1", headers=right) == 200
        async with session.post("/customers/batch", json={"ids": ["c1"]}) as response:
            assert response.status == 401
        assert await status_of(session, "/health") == 200


def test_token_env_must_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEMO_API_TEST_TOKEN", raising=False)
    with pytest.raises(ValueError, match="DEMO_API_TEST_TOKEN"):
        build_app(DemoConfig(token_env="DEMO_API_TEST_TOKEN"))


async def test_stats_count_requests_and_keys_and_reset() -> None:
    async with serve() as session:
        for path in ["/customers/a", "/customers/a", "/customers/b", "/customers/missing-x"]:
            await status_of(session, path)
        await json_of(session, "POST", "/customers/batch", json={"ids": ["a", "c"]})
        await status_of(session, "/health")
        stats = await json_of(session, "GET", "/stats")
        reset = await json_of(session, "POST", "/stats/reset")
        after = await json_of(session, "GET", "/stats")
    per_second = stats.pop("per_second")
    assert sum(n for second in per_second.values() for n in second.values()) == 5
    assert stats == {
        "total": 5,
        "per_key": {"a": 3, "b": 1, "missing-x": 1, "c": 1},
        "by_status": {"200": 4, "404": 1},
    }
    assert reset == after == {"total": 0, "per_key": {}, "by_status": {}, "per_second": {}}


async def test_faults_can_be_changed_and_healed_at_runtime() -> None:
    async with serve() as session:
        assert await status_of(session, "/customers/c1") == 200

        broken = await json_of(session, "POST", "/faults", json={"error_rate": 1.0})
        assert broken["knobs"]["error_rate"] == 1.0
        assert await status_of(session, "/customers/c1") == 500

        async with session.delete("/faults") as response:
            assert response.status == 200
        assert await status_of(session, "/customers/c1") == 200

        # A new fault epoch starts with each change, so the window counts from here.
        outage = {"outage_after_requests": 0, "outage_requests": 2}
        await json_of(session, "POST", "/faults", json=outage)
        statuses = [await status_of(session, "/customers/c1") for _ in range(3)]
        assert statuses == [503, 503, 200]

        for bad in [{"error_rate": 2}, {"no_such_knob": 1}, {"token_env": "X"}, [1]]:
            async with session.post("/faults", json=bad) as response:
                assert response.status == 400
        current = await json_of(session, "GET", "/faults")
        assert current["knobs"]["outage_requests"] == 2


async def test_fault_attempts_fail_a_records_first_calls_then_let_it_succeed() -> None:
    async with serve(error_rate=1.0, fault_attempts=2) as session:
        statuses = [await status_of(session, "/customers/c1") for _ in range(4)]
    assert statuses == [500, 500, 200, 200]


async def test_permanent_faults_hit_every_call_of_their_record() -> None:
    async with serve(bad_request_rate=1.0, fault_attempts=1) as session:
        statuses = [await status_of(session, "/customers/c1") for _ in range(3)]
    assert statuses == [400, 400, 400]
    async with serve(cut_json_rate=1.0) as session:
        async with session.get("/customers/c1") as response:
            body = await response.read()
            assert response.status == 200 and response.content_length == len(body)
    assert customer_record("c1")["name"].encode() in body and not body.endswith(b"}")


def test_planned_outcome_tells_in_advance_what_the_server_decides() -> None:
    config = DemoConfig(
        reset_rate=0.1, stall_rate=0.1, bad_request_rate=0.05, fault_attempts=1, seed=3
    )
    injector = FaultInjector(config)
    keys = [f"GET /customers/k{i} k{i}" for i in range(500)]
    for attempt in range(2):
        decided = [injector.decide(key).outcome for key in keys]
        assert decided == [planned_outcome(config, key, attempt) for key in keys]
    first = [planned_outcome(config, key, 0) for key in keys]
    assert {Outcome.OK, Outcome.RESET, Outcome.STALL, Outcome.BAD_REQUEST} == set(first)
    assert all(planned_outcome(config, key, 1) in (Outcome.OK, Outcome.BAD_REQUEST) for key in keys)


def test_help_works(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--error-rate", "--stall-rate", "--bad-chunk-rate", "--fault-attempts"):
        assert flag in out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_health(url: str, server: subprocess.Popen[str], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"demo.api exited early: {server.stderr.read() if server.stderr else ''}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"demo.api did not become healthy within {timeout_s}s")


@pytest.mark.slow
def test_cli_serves_and_refuses_a_port_in_use() -> None:
    port = _free_port()
    command = [sys.executable, "-m", "demo.api", "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(command, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_health(f"http://127.0.0.1:{port}/health", server)
        second = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    finally:
        server.terminate()
        _, server_log = server.communicate(timeout=60)
    assert second.returncode == 2
    assert second.stderr == f"demo.api: port {port} on 127.0.0.1 is already in use\n"
    assert server.returncode == 0
    assert server_log.splitlines() == [
        f"demo.api: listening on http://127.0.0.1:{port}; all knobs off"
    ]
