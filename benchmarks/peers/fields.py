"""What every peer extracts from an answer, and the output it writes: equal work for all."""

from __future__ import annotations

from typing import Any

#: The job's ``--response-field`` flags for the same three values.
JOB_FIELDS = ("name=$.name", "city=$.address.city", "score=$.score:float")


def pick(data: dict[str, Any]) -> tuple[str, str, float]:
    return data["name"], data["address"]["city"], float(data["score"])


def item_url(base_url: str, key: str) -> str:
    return f"{base_url}/items/{key}"


_SESSION: Any = None


def get_sync(base_url: str, key: str, pool_size: int) -> tuple[str, str, float]:
    """One blocking call through one ``requests`` session per Python worker, its pool as
    large as the threads that share it (what a careful user of a thread pool writes)."""
    global _SESSION
    if _SESSION is None:
        import requests

        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=pool_size)
        session.mount("http://", adapter)
        _SESSION = session
    response = _SESSION.get(item_url(base_url, key), timeout=30)
    response.raise_for_status()
    return pick(response.json())
