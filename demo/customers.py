"""The demo API's customers: synthetic records that depend only on their id.

Deterministic across processes and runs, so a test or a demo can check enriched output
against :func:`customer_record` without keeping a copy of what the server sent.
"""

from __future__ import annotations

import random
from typing import Any

from demo.faults import stable_seed

_SEGMENTS = ("consumer", "smb", "enterprise", "public_sector")
_FIRST_NAMES = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken")
_LAST_NAMES = ("Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen")
_CITIES = {
    "DE": ("Berlin", "Hamburg", "Munich"),
    "FR": ("Paris", "Lyon", "Marseille"),
    "GB": ("London", "Manchester", "Leeds"),
    "US": ("New York", "Chicago", "Austin"),
    "JP": ("Tokyo", "Osaka", "Sapporo"),
}


def customer_record(customer_id: str) -> dict[str, Any]:
    """Synthetic customer data that depends only on the id (stable across processes)."""
    rng = random.Random(stable_seed("customer", customer_id))
    country = rng.choice(sorted(_CITIES))
    return {
        "id": customer_id,
        "name": f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}",
        "segment": rng.choice(_SEGMENTS),
        "score": round(rng.random(), 4),
        "country": country,
        "address": {
            "city": rng.choice(_CITIES[country]),
            "postcode": f"{rng.randrange(10**5):05d}",
        },
    }


def lookup(customer_id: str) -> dict[str, Any] | None:
    """The record for ``customer_id``; None (a 404) for ids starting with ``missing``."""
    return None if customer_id.startswith("missing") else customer_record(customer_id)
