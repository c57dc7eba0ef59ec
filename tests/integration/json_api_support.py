"""A JSON API on loopback that wants an API key in ``X-Api-Key``, for tests that run it
from another process (the Spark job, Airflow): it serves from a background thread and
records what every call carried."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web

PATH = "/v1/geocode"


class KeyedJsonApi:
    """``POST /v1/geocode`` with the right ``X-Api-Key`` answers
    ``{"result": {"lat": .., "lon": .., "query": <the body>}}``; a wrong key gets 401.
    ``calls`` holds each call's headers and JSON body."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.calls: list[dict[str, Any]] = []
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def __enter__(self) -> KeyedJsonApi:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post(PATH, self._geocode)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def _stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _geocode(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append({"headers": dict(request.headers), "body": body})
        if request.headers.get("X-Api-Key") != self.key:
            return web.json_response({"error": "bad key"}, status=401)
        lat = 50 + len(str(body)) % 10
        return web.json_response({"result": {"lat": lat, "lon": 8.5, "query": body}})
