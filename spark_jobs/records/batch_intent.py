"""One provider batch as a partition asked for it: the record its journal
(``snapshots/batch_journal.py``) stores and batch mode (``enrichers/model_endpoint/
batch_calls.py``) re-attaches by, between the two layers."""

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
