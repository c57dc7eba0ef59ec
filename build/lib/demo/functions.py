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
    """Like :func:`lookup` after 10 ms; ids starting with ``slow`` take 300 ms (a straggler
    partition for speculation tests)."""
    key = str(record["id"])
    await asyncio.sleep(0.3 if key.startswith("slow") else 0.01)
    return await lookup(record)
