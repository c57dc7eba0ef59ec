"""Shared by the operator's tests: an async function that measures its own concurrency."""

from __future__ import annotations

import asyncio
from typing import Any


class ConcurrencyProbe:
    """``await probe(record)`` returns ``record`` after ``seconds``; ``peak`` is the most
    calls that were running at once."""

    def __init__(self, seconds: float = 0.01) -> None:
        self.seconds = seconds
        self.running = 0
        self.peak = 0

    async def __call__(self, record: Any) -> Any:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.running -= 1
        return record
