"""Example user enrichment functions for ``--enricher demo.functions:NAME``.

They show the contract of a user function (``async def fn(record: dict) -> document``,
the document then mapped through ``--response-field`` paths) and give tests a
deterministic enrichment without HTTP: same record, same answer.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any


def _score(key: str) -> float:
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32


async def lookup(record: dict[str, Any]) -> dict[str, Any]:
    """Answers at once: a score derived from the record's ``id``."""
    key = str(record["id"])
    return {
        "id": key,
        "score": round(_score(key), 6),
        "tier": "gold" if _score(key) > 0.8 else "std",
    }


async def slow_lookup(record: dict[str, Any]) -> dict[str, Any]:
    """Like :func:`lookup` after 10 ms; ids starting with ``slow`` take 300 ms, and 3 s in
    a Spark task's first attempt: a straggler that a speculative copy overtakes however
    slowly the machine starts it (speculation tests)."""
    key = str(record["id"])
    delay = 0.01
    if key.startswith("slow"):
        delay = 3.0 if _first_task_attempt() else 0.3
    await asyncio.sleep(delay)
    return await lookup(record)


def _first_task_attempt() -> bool:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context is None or context.attemptNumber() == 0
