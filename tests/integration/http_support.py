"""Real HTTP servers on loopback for the enricher tests: a one-handler aiohttp server and
the demo API with a session for its control endpoints."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Self

import aiohttp
from aiohttp import web

from demo.api import run_demo_api
from demo.faults import DemoConfig

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serve(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """``handler`` answers every path on a free loopback port (over TLS with ``tls``);
    yields the base URL."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls).start()
        scheme = "https" if tls is not None else "http"
        yield f"{scheme}://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def demo(**knobs: Any) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    """The demo API and a session for its control endpoints (/stats, /faults)."""
    async with run_demo_api(DemoConfig(**knobs)) as base_url:
        async with aiohttp.ClientSession(base_url) as control:
            yield base_url, control


async def server_stats(control: aiohttp.ClientSession) -> dict[str, Any]:
    async with control.get("/stats") as response:
        return await response.json()


class ThreadedServer:
    """A loopback server of ``_answer`` in its own thread and event loop while the
    ``with`` block lasts, for tests of a job or Airflow run in separate processes;
    ``url`` is its base URL once started."""

    def __init__(self) -> None:
        self.url = ""
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)

    async def _answer(self, request: web.Request) -> web.Response:
        raise NotImplementedError

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with serve(self._answer) as url:
            self.url = url
            self._started.set()
            await self._stop.wait()

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._started.wait(30):
            raise RuntimeError(f"{type(self).__name__} did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
