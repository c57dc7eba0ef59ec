"""The neutral API every peer calls: a fixed delay, a small JSON answer, a request counter.

``python -m benchmarks.peers.server --port P --delay-ms D`` (stdlib asyncio + aiohttp,
uvloop when importable, so it runs in either benchmark environment). It knows nothing of
the job: no faults, no per-key stats, the same cheap body for every id, so what differs
between peers is the client side only.

``GET /items/{id}`` sleeps ``delay`` then answers ``{"id", "name", "address": {"city"},
"score"}``. ``GET /stats`` gives ``requests`` (answered), ``first`` (arrival of the first
request) and ``last`` (answer of the last one), in ``time.monotonic()`` seconds of this
process: throughput at the server is ``requests / (last - first)``, which leaves out the
peers' start-up. ``POST /stats/reset`` zeroes them between cells.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from aiohttp import web


class Counter:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.first: float | None = None
        self.last: float | None = None


def make_app(delay_s: float) -> web.Application:
    counter = Counter()

    async def item(request: web.Request) -> web.Response:
        if counter.first is None:
            counter.first = time.monotonic()
        await asyncio.sleep(delay_s)
        key = request.match_info["id"]
        counter.requests += 1
        counter.last = time.monotonic()
        # Cheap on purpose: the server's CPU is shared with the peers on 2 cores.
        return web.Response(
            text=f'{{"id":"{key}","name":"n-{key}","address":{{"city":"c{len(key)}"}},'
            f'"score":0.5}}',
            content_type="application/json",
        )

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(
            {"requests": counter.requests, "first": counter.first, "last": counter.last}
        )

    async def reset(_: web.Request) -> web.Response:
        counter.reset()
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/items/{id}", item)
    app.router.add_get("/stats", stats)
    app.router.add_post("/stats/reset", reset)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(
        make_app(args.delay_ms / 1000),
        host="127.0.0.1",
        port=args.port,
        print=None,
        access_log=None,
        backlog=4096,
    )


if __name__ == "__main__":
    main()
