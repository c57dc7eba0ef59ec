"""Demo enrichment API: a deterministic customer lookup service with injectable faults.

The enrichment pipeline needs an upstream to call in demos, tests and benchmarks that
is (a) deterministic, so enriched output can be checked, and (b) breakable on demand,
so retries, throttling, outages and resumption can be shown working. Run it with
``python -m demo.api --port 8080 [knobs]`` or in-process with :func:`run_demo_api`.

Endpoints:

* ``GET /customers/{id}`` - synthetic record, identical for the same id on every run;
  ids starting with ``missing`` give 404.
* ``POST /customers/batch`` with ``{"ids": [...]}`` - ``{"results": [...]}`` in request
  order; unknown ids appear in place as ``{"id": ..., "error": "not found"}``.
* ``GET /stats``, ``POST /stats/reset`` - what the customer endpoints have seen.
* ``GET /faults``, ``POST /faults`` (knob overrides), ``DELETE /faults`` (back to the
  startup knobs) - break and heal a running server.
* ``GET /health`` - liveness, never counted, never faulted, never authenticated.

Auth (``--token-env``) and faults apply to the customer endpoints only: the control
endpoints belong to the test harness, not to the simulated upstream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import hmac
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

from aiohttp import web

from demo.api_options import describe_knobs
from demo.api_options import parser as options_parser
from demo.customers import lookup
from demo.faults import DemoConfig, FaultInjector, Outcome
from demo.rate_limit import RateLimit, WindowCounter
from demo.request_stats import Stats
from demo.wire_faults import WIRE_FAULTS as _WIRE_FAULTS
from demo.wire_faults import trickle

logger = logging.getLogger("demo.api")

# A customer handler parses the request and answers it as a healthy server would; the
# shared wrapper then applies auth, faults and stats. It returns the ids the request
# asked for (for per-key stats and the fault key) with that healthy response.
Answer = tuple[list[str], web.Response]
AnswerFn = Callable[[web.Request], Awaitable[Answer]]


@dataclasses.dataclass
class _State:
    """Per-app mutable state; ``faults`` is replaced whenever the knobs change."""

    startup_config: DemoConfig
    token: str | None
    faults: FaultInjector
    stats: Stats
    rate_limit: WindowCounter | None = None


_STATE = web.AppKey("demo_state", _State)


def build_app(config: DemoConfig, rate_limit: RateLimit | None = None) -> web.Application:
    """The demo API as an aiohttp application, under a hard rate limit if given.

    Raises ValueError when ``config.token_env`` names an unset or empty variable: a
    server that silently accepted everything would hide a broken demo setup.
    """
    app = web.Application()
    counter = WindowCounter(rate_limit) if rate_limit is not None else None
    state = _State(config, _expected_token(config), FaultInjector(config), Stats(), counter)
    app[_STATE] = state
    app.router.add_get("/health", _health)
    app.router.add_get("/customers/{id}", _customer_endpoint(_get_customer))
    app.router.add_post("/customers/batch", _customer_endpoint(_post_batch))
    app.router.add_get("/stats", _get_stats)
    app.router.add_post("/stats/reset", _reset_stats)
    app.router.add_get("/faults", _get_faults)
    app.router.add_post("/faults", _post_faults)
    app.router.add_delete("/faults", _delete_faults)
    return app


def _expected_token(config: DemoConfig) -> str | None:
    """Read the token from the environment: command lines are visible to every local user."""
    if config.token_env is None:
        return None
    token = os.environ.get(config.token_env)
    if not token:
        raise ValueError(f"environment variable {config.token_env} (from --token-env) is not set")
    return token


async def _health(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _get_customer(request: web.Request) -> Answer:
    customer_id = request.match_info["id"]
    record = lookup(customer_id)
    if record is None:
        return [customer_id], web.json_response(
            {"id": customer_id, "error": "not found"}, status=404
        )
    return [customer_id], web.json_response(record)


async def _post_batch(request: web.Request) -> Answer:
    try:
        payload = await request.json()
    except ValueError:
        payload = None
    ids = payload.get("ids") if isinstance(payload, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return [], web.json_response({"error": 'body must be {"ids": [string, ...]}'}, status=400)
    results = [lookup(i) or {"id": i, "error": "not found"} for i in ids]
    return ids, web.json_response({"results": results})


def _customer_endpoint(answer: AnswerFn) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Wrap a customer handler with auth, the rate limit, then the request's fate, then
    stats. A request over the rate limit is answered at once, like auth's refusals."""

    async def handler(request: web.Request) -> web.StreamResponse:
        state = request.app[_STATE]
        if not _authorized(request, state.token):
            state.stats.record(401, ())
            return web.json_response(
                {"error": "missing or invalid bearer token"},
                status=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        allowed, quota = state.rate_limit.admit() if state.rate_limit else (True, {})
        if not allowed:
            state.stats.record(429, ())
            return web.json_response({"error": "rate limit"}, status=429, headers=quota)
        ids, response = await answer(request)
        config = state.faults.config  # the knobs may change while this request sleeps
        fate = state.faults.decide(" ".join([request.method, request.path, *ids]))
        if fate.latency_s:
            await asyncio.sleep(fate.latency_s)
        if fate.outcome in _WIRE_FAULTS:
            state.stats.record(fate.outcome.value, ids)
            return await _WIRE_FAULTS[fate.outcome](request, response)
        if fate.outcome is Outcome.OUTAGE:
            response = web.json_response({"error": "service unavailable"}, status=503)
        elif fate.outcome is Outcome.THROTTLE:
            response = web.json_response(
                {"error": "too many requests"},
                status=429,
                headers={"Retry-After": str(config.retry_after_s)},
            )
        elif fate.outcome is Outcome.ERROR:
            response = web.json_response({"error": "internal server error"}, status=500)
        elif fate.outcome is Outcome.BAD_REQUEST:
            response = web.json_response({"error": "bad request"}, status=400)
        elif fate.outcome is Outcome.CUT_JSON:
            body = response.body
            assert isinstance(body, bytes)
            response = web.Response(body=body[: len(body) // 2], content_type="application/json")
        response.headers.update(quota)
        state.stats.record(response.status, ids)
        if fate.outcome is Outcome.SLOW_BODY:
            return await trickle(request, response, config.slow_body_s)
        return response

    return handler


def _authorized(request: web.Request, token: str | None) -> bool:
    if token is None:
        return True
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    # compare_digest: the time taken must not reveal how much of the token matched.
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.encode(), token.encode())


async def _get_stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[_STATE].stats.snapshot())


async def _reset_stats(request: web.Request) -> web.Response:
    stats = request.app[_STATE].stats
    stats.reset()
    return web.json_response(stats.snapshot())


async def _get_faults(request: web.Request) -> web.Response:
    return web.json_response({"knobs": request.app[_STATE].faults.config.knobs()})


async def _post_faults(request: web.Request) -> web.Response:
    """Apply knob overrides on top of the current knobs; starts a new fault epoch."""
    state = request.app[_STATE]
    try:
        overrides = await request.json()
        if not isinstance(overrides, dict):
            raise ValueError("body must be a JSON object of knob overrides")
        config = state.faults.config.with_overrides(overrides)
    except ValueError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    return _set_faults(state, config)


async def _delete_faults(request: web.Request) -> web.Response:
    """Heal the server: back to the knobs it was started with."""
    state = request.app[_STATE]
    return _set_faults(state, state.startup_config)


def _set_faults(state: _State, config: DemoConfig) -> web.Response:
    state.faults = FaultInjector(config)
    logger.info("knobs changed: %s", describe_knobs(config))
    return web.json_response({"knobs": config.knobs()})


@asynccontextmanager
async def run_demo_api(
    config: DemoConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    rate_limit: RateLimit | None = None,
) -> AsyncIterator[str]:
    """Serve the demo API in the running event loop; yields the base URL.

    ``port=0`` lets the OS pick a free port, so parallel tests never collide.
    """
    async with _serving(build_app(config, rate_limit), host, port) as base_url:
        yield base_url


@asynccontextmanager
async def _serving(app: web.Application, host: str, port: int) -> AsyncIterator[str]:
    # No access log: one line per request would drown the pipeline's own output.
    # A short shutdown timeout: in-flight demo requests are not worth waiting for.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        bound_port = runner.addresses[0][1]
        base_url = f"http://{f'[{host}]' if ':' in host else host}:{bound_port}"
        logger.info("listening on %s; %s", base_url, describe_knobs(app[_STATE].startup_config))
        yield base_url
    finally:
        await runner.cleanup()


async def _serve_until_signalled(app: web.Application, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with _serving(app, host, port):
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 for bad arguments or an unusable port)."""
    parser = options_parser()
    args = vars(parser.parse_args(argv))
    host, port = args.pop("host"), args.pop("port")
    rate, headers = args.pop("rate_limit"), args.pop("rate_limit_headers")
    try:
        app = build_app(DemoConfig(**args), RateLimit(rate, headers) if rate else None)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    try:
        asyncio.run(_serve_until_signalled(app, host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            print(f"demo.api: port {port} on {host} is already in use", file=sys.stderr)
        else:
            reason = exc.strerror or exc
            print(f"demo.api: cannot listen on {host}:{port}: {reason}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
