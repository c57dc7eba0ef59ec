"""One provider batch as a partition asked for it: the record its journal
(``snapshots/batch_journal.py``) stores and batch mode (``enrichers/model_endpoint/
batch_calls.py``) re-attaches by, between the two layers; and how far the provider has
run it, as last seen (what the snapshot page shows while the provider works)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchIntent:
    """One batch as this partition asked for it."""

    token: str
    """Its name here, and the ``metadata`` a provider that keeps one holds (OpenAI)."""
    custom_ids: tuple[str, ...]
    newest_before: str | None
    """The newest batch the provider listed before the create call: a search for this
    one looks at the batches listed above it only."""
    batch_id: str | None = None
    """The provider's id, once its create call answered."""


@dataclass(frozen=True)
class BatchProgress:
    """A batch as its partition last saw it at the provider: its status and counts."""

    batch_id: str
    status: str
    """The provider's word (``in_progress``, ``completed``, ``expired``, ``ended``, ...)."""
    total: int
    done: int
    """Requests answered."""
    failed: int
    """Requests errored, expired or cancelled."""
    seen_at: float
    """When (epoch seconds) the partition read it."""
