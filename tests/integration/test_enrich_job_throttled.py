"""A job whose every call is throttled says so in its progress lines (Spark ``local[2]``, a
loopback API that answers as OpenAI documents a rate limit), then completes once the API
recovers: every record once, no dead letter."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from aiohttp import web

from .job_support import job_args, kill_group, read_output, start_job, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 200
PROGRESS_S = 1.0
#: OpenAI's answer to a request over the rate limit (its error-codes guide): 429, no
#: Retry-After, the code ``rate_limit_exceeded`` in the body.
RATE_LIMITED = {
    "error": {
        "message": "Rate limit reached for requests. Please try again in 200ms.",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}


class ThrottledApi:
    """Answers 429 to every call until :meth:`recover`; counts the calls of each kind."""

    def __init__(self) -> None:
        self.throttling = True
        self.first_429: float | None = None
        self.answered: dict[str, int] = {}

    async def handle(self, request: web.Request) -> web.Response:
        if self.throttling:
            self.first_429 = self.first_429 or time.monotonic()
            return web.json_response(RATE_LIMITED, status=429)
        key = request.match_info["id"]
        self.answered[key] = self.answered.get(key, 0) + 1
        return web.json_response({"name": f"name {key}", "score": 1.5})

    def recover(self) -> None:
        self.throttling = False


@contextmanager
def serving(api: ThrottledApi) -> Iterator[str]:
    """``api`` on a free loopback port, in a thread of its own; yields the base URL."""
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_get("/customers/{id}", api.handle)
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def test_a_throttled_job_says_what_its_calls_get_then_completes_once(tmp_path):
    keys = [f"k{i:04d}" for i in range(ROWS)]
    write_input(tmp_path / "in" / "part.jsonl", keys)
    api = ThrottledApi()
    lines: list[tuple[float, str]] = []
    with serving(api) as url:
        args = job_args(tmp_path, url, "--partitions", "2", "--capacity", "8")
        job = start_job([*args, "--progress-interval", str(PROGRESS_S), "--timeout", "120"])
        reader = threading.Thread(
            target=lambda: lines.extend((time.monotonic(), line) for line in job.stdout),
            daemon=True,
        )
        reader.start()
        try:
            deadline = time.monotonic() + 60
            named = None
            while named is None and job.poll() is None and time.monotonic() < deadline:
                named = next((seen for seen in list(lines) if _names_429(seen[1])), None)
                time.sleep(0.1)
            api.recover()
            job.wait(timeout=300)
            reader.join(timeout=30)
        finally:
            if job.poll() is None:
                kill_group(job)
    output = "".join(line for _, line in lines)
    assert named is not None, output[-3000:]
    assert job.returncode == 0, output[-3000:]
    assert api.first_429 is not None
    # Two progress intervals, one snapshot interval (0.5 s) and a line's own delay.
    assert named[0] - api.first_429 <= 2 * PROGRESS_S + 0.5 + 4.0, named[1]
    assert "0 of 200 records committed" in named[1]
    data, dead, summary = read_output(tmp_path / "out")
    assert sorted(row["id"] for row in data) == keys and dead == []
    assert summary["enriched"] == ROWS and summary["dead_letters"] == 0


def _names_429(line: str) -> bool:
    return (
        "progress: epoch" in line
        and "all " in line
        and "answered 429 rate_limit_exceeded; retrying" in line
    )
