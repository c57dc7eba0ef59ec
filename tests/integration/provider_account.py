"""A provider account on loopback, for tests of the job and of Airflow (separate
processes): OpenAI's answers for an account without credit and for a rate limit."""

from __future__ import annotations

import time
from collections import Counter

from aiohttp import web

from .http_support import ThreadedServer

QUOTA = "You exceeded your current quota, please check your plan and billing details."
SPENT = {
    "message": QUOTA,
    "type": "insufficient_quota",
    "param": None,
    "code": "insufficient_quota",
}
RATE = {
    "message": "Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 3, Used 3",
    "type": "requests",
    "param": None,
    "code": "rate_limit_exceeded",
}


class ProviderAccount(ThreadedServer):
    """``GET /customers/<id>`` as a provider serves one account: ``429 insufficient_quota``
    (OpenAI's body) to every call while ``spent``, a customer otherwise; ``rate_limited``
    first calls of each record answer ``429 rate_limit_exceeded`` first. Runs in its own
    thread and event loop while the ``with`` block lasts; ``calls`` counts by record,
    ``first_call`` is when the first arrived (monotonic)."""

    def __init__(self, *, spent: bool, rate_limited: int = 0) -> None:
        super().__init__()
        self.spent, self.rate_limited = spent, rate_limited
        self.calls: Counter[str] = Counter()
        self.first_call: float | None = None

    async def _answer(self, request: web.Request) -> web.Response:
        key = request.path.rsplit("/", 1)[-1]
        self.first_call = self.first_call or time.monotonic()
        self.calls[key] += 1
        if self.spent:
            return web.json_response({"error": SPENT}, status=429)
        if self.calls[key] <= self.rate_limited:
            return web.json_response({"error": RATE}, status=429, headers={"Retry-After": "0"})
        return web.json_response({"id": key, "name": f"n-{key}", "score": 1.0})
