"""A provider batch as its batch API describes it, read from the API's own JSON: what
batch mode (``enrichers/model_endpoint/batch_protocols.py``) follows a batch by, and what
the Airflow trigger a deferred batch run waits on (``plugins/.../batch_wait_trigger.py``)
polls, in one parser per provider. Standard library only: the triggerer imports it.

* OpenAI's Batch API: ``GET {base}/batches/{id}``, ``status`` (``validating``,
  ``in_progress``, ``finalizing``, then ``completed``, ``expired``, ``cancelled`` or
  ``failed``), ``request_counts`` ``{total, completed, failed}``.
* Anthropic's Message Batches: ``GET {base}/messages/batches/{id}``,
  ``processing_status`` (``in_progress``, ``canceling``, then ``ended``), and
  ``request_counts`` ``{processing, succeeded, errored, canceled, expired}``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The key of the batch metadata naming its intent (OpenAI keeps metadata).
METADATA_KEY = "enrich_intent"
#: Each provider's words for a batch that ended.
OPENAI_ENDED = frozenset({"completed", "expired", "cancelled", "failed"})
ANTHROPIC_ENDED = frozenset({"ended"})


@dataclass(frozen=True)
class BatchState:
    """A batch as the provider describes it now."""

    id: str
    ended: bool
    status: str
    total: int
    intent: str | None = None
    """The intent its metadata names (OpenAI); None where the API keeps none."""
    results: tuple[str, ...] = ()
    """Where its answers are read, once ended."""
    problem: str | None = None
    """Why the provider refused the whole batch (OpenAI ``failed``)."""
    done: int = 0
    failed: int = 0
    """Its requests answered, and those errored, expired or cancelled, so far."""

    def progress(self) -> str:
        return f"{self.status}: {self.done} of {self.total} done, {self.failed} failed"


def batches_url(endpoint: str, api: str) -> str:
    """The batch API's collection URL for the online ``endpoint`` of a model of ``api``
    (``chat``, ``embeddings``, ``anthropic``): ``.../v1/batches`` or
    ``.../v1/messages/batches``; ValueError when the endpoint is not one of them."""
    if api == "anthropic":
        return _base(endpoint, "/messages") + "/messages/batches"
    return _base(endpoint, "/chat/completions" if api == "chat" else "/embeddings") + "/batches"


def _base(url: str, path: str) -> str:
    if not url.endswith(path):
        raise ValueError(f"model.mode batch: the endpoint {url} does not end in {path}")
    return url[: -len(path)]


def openai_state(batch: dict[str, Any], files_url: str) -> BatchState:
    """An OpenAI batch object; its output and error files read under ``files_url``."""
    status = str(batch.get("status"))
    files = (batch.get("output_file_id"), batch.get("error_file_id"))
    errors = (batch.get("errors") or {}).get("data") or []
    counts = batch.get("request_counts") or {}
    problem = None
    if status == "failed":
        problem = "; ".join(str(e.get("message")) for e in errors) or "the batch failed"
    return BatchState(
        str(batch["id"]),
        status in OPENAI_ENDED,
        status,
        _count(counts.get("total")),
        (batch.get("metadata") or {}).get(METADATA_KEY),
        tuple(f"{files_url}/{f}/content" for f in files if f),
        problem,
        _count(counts.get("completed")),
        _count(counts.get("failed")),
    )


def anthropic_state(batch: dict[str, Any]) -> BatchState:
    """An Anthropic Message Batch object."""
    counts = batch.get("request_counts") or {}
    total = sum(_count(n) for n in counts.values())
    status = str(batch.get("processing_status"))
    ended = status in ANTHROPIC_ENDED
    results = (str(batch["results_url"]),) if ended and batch.get("results_url") else ()
    failed = sum(_count(counts.get(k)) for k in ("errored", "expired", "canceled"))
    done = _count(counts.get("succeeded"))
    return BatchState(str(batch["id"]), ended, status, total, None, results, None, done, failed)


def state_parser(api: str, base: str) -> Callable[[dict[str, Any]], BatchState]:
    """The parser of ``api``'s batch objects, whose collection is at ``base``
    (:func:`batches_url`)."""
    if api == "anthropic":
        return anthropic_state
    files_url = base.removesuffix("/batches") + "/files"
    return lambda batch: openai_state(batch, files_url)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
