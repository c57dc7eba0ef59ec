"""An API on loopback that answers every call with what it received and keeps it: a test
of the job (a separate process) sees the exact values the job sent, byte for byte."""

from __future__ import annotations

import asyncio
import threading
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from .http_support import serve


class EchoApi:
    """``POST /echo/<path>`` answers ``{"path": <path decoded>, "got": <JSON body>}``;
    ``calls`` holds the same for every call, in arrival order. Runs in its own thread
    and event loop while the ``with`` block lasts."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.url = ""
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)

    async def _answer(self, request: web.Request) -> web.Response:
        path = unquote(request.raw_path.split("/echo/", 1)[-1])
        body = await request.json() if request.can_read_body else None
        call = {"path": path, "got": body}
        self.calls.append(call)
        return web.json_response(call)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with serve(self._answer) as url:
            self.url = url
            self._started.set()
            await self._stop.wait()

    def __enter__(self) -> EchoApi:
        self._thread.start()
        if not self._started.wait(30):
            raise RuntimeError("echo API did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
