"""Faults below HTTP: answers a well-behaved server never sends, written to the socket.

aiohttp's response objects can only produce valid HTTP, so these faults write raw bytes
to the transport (or abort it) and then hand aiohttp a response to a connection that is
already closed, which it silently discards. Each is what a flaky upstream or a broken
proxy really does, and each needs a different defence in the client:

* ``dropped``: the connection closes with no byte sent (an empty reply);
* ``reset``: a TCP RST instead of an answer;
* ``stall``: status line and headers, then silence on an open connection;
* ``bad_chunk``: chunked headers, then bytes that are not a chunk; left open;
* ``truncated``: half the body its ``Content-Length`` announces, then closed.

And one valid answer sent too slowly: ``trickle`` (``slow_body_rate``).

The open-connection faults hold the connection until the client gives up, up to
``HOLD_OPEN_S``, as a stuck upstream would.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable

from aiohttp import web

from demo.faults import Outcome

#: Longest time a stalled answer keeps its connection open waiting for the client to leave.
HOLD_OPEN_S = 120.0
_POLL_S = 0.05
#: Pieces a slow body (``slow_body_rate``) is sent in.
SLOW_BODY_CHUNKS = 10

WireFault = Callable[[web.Request, web.Response], Awaitable[web.StreamResponse]]


def _head(status_line: str, headers: dict[str, str]) -> bytes:
    lines = [status_line, *(f"{name}: {value}" for name, value in headers.items()), "", ""]
    return "\r\n".join(lines).encode("latin-1")


async def _hold_open(request: web.Request) -> None:
    """Wait until the client closes the connection (or ``HOLD_OPEN_S`` passes)."""
    transport = request.transport
    waited = 0.0
    while transport is not None and not transport.is_closing() and waited < HOLD_OPEN_S:
        await asyncio.sleep(_POLL_S)
        waited += _POLL_S
    if transport is not None:
        transport.close()


def _write(request: web.Request, data: bytes) -> None:
    if request.transport is not None and not request.transport.is_closing():
        request.transport.write(data)


async def dropped(request: web.Request, response: web.Response) -> web.StreamResponse:
    if request.transport is not None:
        request.transport.close()
    return response  # aiohttp finds the transport closed and sends nothing


async def reset(request: web.Request, response: web.Response) -> web.StreamResponse:
    transport = request.transport
    if transport is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:  # linger 0: close() sends RST instead of FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    return response


async def stall(request: web.Request, response: web.Response) -> web.StreamResponse:
    body = response.body
    assert isinstance(body, bytes)
    head = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    _write(request, _head("HTTP/1.1 200 OK", head))
    await _hold_open(request)
    return response


async def bad_chunk(request: web.Request, response: web.Response) -> web.StreamResponse:
    head = {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    _write(request, _head("HTTP/1.1 200 OK", head) + b"zz-not-a-chunk-size\r\n{garbage")
    await _hold_open(request)
    return response


async def truncated(request: web.Request, response: web.Response) -> web.StreamResponse:
    body = response.body
    assert isinstance(body, bytes)
    head = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    _write(request, _head("HTTP/1.1 200 OK", head) + body[: len(body) // 2])
    await asyncio.sleep(0)  # let the half body leave before the FIN
    if request.transport is not None:
        request.transport.close()
    return response


WIRE_FAULTS: dict[Outcome, WireFault] = {
    Outcome.DROP: dropped,
    Outcome.RESET: reset,
    Outcome.STALL: stall,
    Outcome.BAD_CHUNK: bad_chunk,
    Outcome.TRUNCATED: truncated,
}


async def trickle(
    request: web.Request, response: web.Response, duration_s: float
) -> web.StreamResponse:
    """Send the headers now and the body over ``duration_s``, like an overloaded upstream.

    This is what exercises a client's total/read timeouts as opposed to connect timeouts.
    """
    body = response.body
    assert isinstance(body, bytes)  # json_response always holds encoded bytes
    stream = web.StreamResponse(status=response.status, headers=response.headers)
    stream.content_length = len(body)
    await stream.prepare(request)
    size = -(-len(body) // SLOW_BODY_CHUNKS)  # ceiling division
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    try:
        for chunk in chunks:
            await asyncio.sleep(duration_s / len(chunks))
            await stream.write(chunk)
    except ConnectionResetError:
        pass  # the client gave up (typically its own timeout); nothing left to do
    return stream
