"""An API on loopback that answers every call with what it received and keeps it: a test
of the job (a separate process) sees the exact values the job sent, byte for byte."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from aiohttp import web

from .http_support import ThreadedServer


class EchoApi(ThreadedServer):
    """``POST /echo/<path>`` answers ``{"path": <path decoded>, "got": <JSON body>}``;
    ``calls`` holds the same for every call, in arrival order. Runs in its own thread
    and event loop while the ``with`` block lasts."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    async def _answer(self, request: web.Request) -> web.Response:
        path = unquote(request.raw_path.split("/echo/", 1)[-1])
        body = await request.json() if request.can_read_body else None
        call = {"path": path, "got": body}
        self.calls.append(call)
        return web.json_response(call)
