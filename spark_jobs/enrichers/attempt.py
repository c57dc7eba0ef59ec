"""One HTTP attempt under its own deadlines, reading at most a capped body.

aiohttp offers a total timeout and a socket-read timeout, but not the four deadlines an
attempt against a misbehaving upstream needs, and by default none at all for a body that
stops arriving. Here each phase has its own, all on one :class:`Deadline` moved along as
the attempt advances (moving it later per chunk allocates no timer):

* connect: ``connect_timeout`` (aiohttp's ``sock_connect``);
* first byte: ``first_byte_timeout`` from the start until the response headers;
* stall: ``read_timeout`` of silence while the body arrives;
* total: ``total_timeout`` for the whole attempt, whatever the phase.

The body is read chunk by chunk and decompressed here rather than by aiohttp, so the
``max_response_bytes`` cap counts decompressed bytes and stops a gzip bomb after the cap,
not after it has filled the worker's memory.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import aiohttp
from yarl import URL

from spark_jobs.asyncwait import Deadline

from .rate_headers import QuotaHint, TokenQuota, quota_hint, retry_delay, token_quotas
from .stragglers import AttemptProgress, StragglerWatch

#: What the client accepts; the decoder below handles exactly these.
ACCEPT_ENCODING = "gzip, deflate"
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


_TIMEOUT_MESSAGES = {
    "first byte": "no response headers within first_byte_timeout",
    "stall": "the body stalled for read_timeout",
    "total": "no complete response within total_timeout",
    "straggler": "silent, after the partition's input had ended, past the straggler limit",
}


@dataclass(frozen=True)
class AttemptLimits:
    """The per-attempt deadlines (seconds, None for none) and the body size cap."""

    first_byte: float | None
    stall: float | None
    total: float | None
    max_bytes: int


@dataclass(frozen=True)
class Reply:
    """A complete HTTP answer, and what it says of the limits: each group of its
    rate-limit headers parsed once (``rate_headers.py``), when first asked, however many
    of the sender, the rate controller and a model's pacing read it."""

    status: int
    payload: bytes
    headers: Mapping[str, str]
    """All response headers (case-insensitive), for the rate-limit fields."""

    @cached_property
    def quota_hint(self) -> QuotaHint | None:
        """The request quota its headers state."""
        return quota_hint(self.headers)

    @cached_property
    def token_quotas(self) -> dict[str, TokenQuota]:
        """Each token limit its headers state."""
        return token_quotas(self.headers)

    @cached_property
    def retry_delay(self) -> float | None:
        """When a refused answer says to try again (its headers, or its body's words)."""
        return retry_delay(self.headers, self.payload)


class AttemptTimeout(Exception):
    """A deadline of the attempt passed; the message names the option that set it."""

    def __init__(self, phase: str, seconds: float) -> None:
        super().__init__(f"{_TIMEOUT_MESSAGES[phase]} ({seconds:g}s)")
        self.phase = phase


class BodyTooLarge(Exception):
    """The (decompressed) body passed ``max_bytes``; reading stopped there."""


class UnsupportedEncoding(Exception):
    """The server used a Content-Encoding the client never offered."""


async def send(
    session: aiohttp.ClientSession,
    method: str,
    url: str | URL,
    body: str | None,
    limits: AttemptLimits,
    stragglers: StragglerWatch | None,
) -> Reply:
    """Send once and read the whole answer, or raise: an aiohttp error, AttemptTimeout,
    BodyTooLarge or UnsupportedEncoding. ``stragglers`` (None: off) may cut it early."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    end = start + limits.total if limits.total is not None else None
    phase, phase_s = "first byte", limits.first_byte
    timer = Deadline(_earliest(end, start, limits.first_byte))
    progress, answered = None, False
    try:
        async with timer:
            if stragglers is not None:
                progress = stragglers.begin(timer, start)
            # Sent exactly as built: yarl would otherwise resolve dot segments.
            target = URL(url, encoded=True) if isinstance(url, str) else url
            # Never followed here: a hop would carry the secret headers to whatever
            # host it names, outside the rate limit and budget (``redirects.py``).
            request = session.request(method, target, data=body, allow_redirects=False)
            async with request as response:
                phase, phase_s = "stall", limits.stall
                decoder = _decoder(response.headers.get("Content-Encoding"))
                payload = await _read_capped(
                    response.content, decoder, limits, timer, progress, end
                )
                headers, answered = response.headers, True
                return Reply(response.status, payload, headers)
    except TimeoutError:
        if not timer.expired():
            raise
        if progress is not None and progress.cut_after is not None:
            raise AttemptTimeout("straggler", progress.cut_after) from None
        if end is not None and loop.time() >= end - 0.001:
            raise AttemptTimeout("total", limits.total or 0.0) from None
        raise AttemptTimeout(phase, phase_s or 0.0) from None
    finally:
        if stragglers is not None and progress is not None:
            stragglers.end(progress, answered)


async def _read_capped(
    content: aiohttp.StreamReader,
    decoder: zlib._Decompress | None,
    limits: AttemptLimits,
    timer: Deadline,
    progress: AttemptProgress | None,
    end: float | None,
) -> bytes:
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    size = 0
    cap = limits.max_bytes
    while True:
        now = loop.time()
        if progress is not None:
            progress.heard(now)  # the headers, then each chunk
        timer.move(_earliest(end, now, limits.stall))
        chunk = await content.readany()
        if not chunk:
            break
        if decoder is not None:
            chunk = decoder.decompress(chunk, cap - size + 1)
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge(f"more than max_response_bytes ({cap} bytes, decompressed)")
        chunks.append(chunk)
    if decoder is not None:
        tail = decoder.flush()
        size += len(tail)
        if size > cap:
            raise BodyTooLarge(f"more than max_response_bytes ({cap} bytes, decompressed)")
        chunks.append(tail)
    return b"".join(chunks)


def _decoder(encoding: str | None) -> zlib._Decompress | None:
    if encoding is None or encoding.strip().lower() in ("", "identity"):
        return None
    wbits = _WBITS.get(encoding.strip().lower())
    if wbits is None:
        raise UnsupportedEncoding(f"Content-Encoding {encoding!r} was not offered")
    return zlib.decompressobj(wbits)


def _earliest(end: float | None, now: float, seconds: float | None) -> float | None:
    """The sooner of the attempt's end and ``now + seconds`` (None: no deadline)."""
    phase_end = now + seconds if seconds is not None else None
    if end is None:
        return phase_end
    return end if phase_end is None else min(end, phase_end)
