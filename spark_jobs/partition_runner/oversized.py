"""Values too large for a snapshot become dead letters, so every commit stays readable.

A cut's header holds the queue's completed-but-not-emitted entries with their values (in
ordered mode, every record finished behind a slow one). Hostile records, or a hostile API,
once made 400 values of 170 KB into a 68 MB commit that its own reader refused (over
``MAX_DOCUMENT_BYTES``): every resume fell back and paid again. Half of the header's
limit is shared out over the operator's queue instead: a record whose values are larger
than its share fails with :class:`ValueTooLargeError`, naming the limit, before its value
enters the queue (the partition goes on). Error texts are bounded by the operator, and a
cut's rows too large to sit inline in a commit go to segment files (``snapshots/writer.py``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from spark_jobs.enrichers import PermanentError
from spark_jobs.snapshots.documents import MAX_DOCUMENT_BYTES


class ValueTooLargeError(PermanentError):
    """A record's enrichment values are larger than a snapshot may hold per record."""


def value_limit(queue_capacity: int) -> int:
    """Bytes of JSON one record's values may take: half of a commit header's limit over
    the entries the queue may hold (83 886 at the default queue of 400)."""
    return MAX_DOCUMENT_BYTES // (2 * queue_capacity)


def bounded(
    call: Callable[[int], Awaitable[dict[str, Any]]], queue_capacity: int
) -> Callable[[int], Awaitable[dict[str, Any]]]:
    """``call``, failing a record whose values are over :func:`value_limit`."""
    limit = value_limit(queue_capacity)

    async def checked(index: int) -> dict[str, Any]:
        values = await call(index)
        size = len(json.dumps(values, separators=(",", ":"), default=str).encode())
        if size > limit:
            raise ValueTooLargeError(
                f"the enrichment values of this record take {size} bytes, over the snapshot "
                f"limit of {limit} bytes per record (64 MiB / 2 / queue capacity "
                f"{queue_capacity}; a smaller --queue-capacity raises it)"
            )
        return values

    return checked
