"""Real HTTP servers on loopback for the enricher tests: a one-handler aiohttp server and
the demo API with a session for its control endpoints."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

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
