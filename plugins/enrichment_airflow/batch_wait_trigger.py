"""The trigger a deferred batch run waits on in Airflow's triggerer: the provider's batches.

A model run in batch mode (``model_mode="batch"``) with ``deferrable=True`` runs the job
with ``--detach-batches``: it submits the batches, commits its snapshots and exits with
status 8. The task then defers on this trigger, holding no worker slot and no Spark
executor while the provider works, and the trigger polls, every ``poll_interval_s``:

* which batches the namespace waits for (``batches_waited_for``: the batch journals the
  partitions wrote; a batch they saw end is not asked about), then
* each such batch's state, ``GET {batches_url}/{id}``, parsed by the provider's own
  parser (``spark_jobs.records.batch_state``), its progress logged to the task log when
  it changed (``batch batch_abc: in_progress: 120 of 300 done, 3 failed``).

It fires ``success`` once every batch has ended, and the operator runs the job again,
which reads the rows and publishes (or, when an expired batch's requests went into a new
batch, defers again). A batch the provider refuses to show (401, 403, 404: a revoked key,
another account) fires ``failed`` with the provider's words; a transient failure (5xx,
429, a connection error) is logged and asked again at the next poll, however long the
batch runs (the provider's own 24 h window bounds it).

The key is read from the API connection inside :meth:`run`, in the triggerer: the
serialized trigger (stored in Airflow's database) names the connection and its fields,
never a secret. Headers go only to ``batches_url``, which must lie under the
connection's own base URL; a batch id from the (hostile) journal that is not a plain
token is skipped with a warning.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent
from fsspec.core import url_to_fs

from enrichment_airflow.enrichment_hook import EnrichmentApiHook
from spark_jobs.records.batch_state import BatchState, state_parser
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.snapshots.batch_journal import batches_waited_for

#: What a provider's batch id looks like (``batch_abc123``, ``msgbatch_01...``).
BATCH_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")
#: The most of an answer read: a batch object is a few kB.
MAX_ANSWER_BYTES = 2**20
#: Statuses that no poll can change: the key or the batch is not this account's.
REFUSED = frozenset({401, 403, 404})


class BatchUnavailable(Exception):
    """The provider refuses to show a batch (``REFUSED``): waiting cannot help."""


class BatchWaitTrigger(BaseTrigger):
    """Wait until every batch the namespace's partitions submitted has ended.

    :param api_conn_id: the API connection whose key reads the batches.
    :param bearer_token: the operator's ``bearer_token`` (a connection field, ``none`` or
        ``auto``), resolved by ``EnrichmentApiHook`` as for the job.
    :param secret_headers: header name -> connection field (the operator's).
    :param headers: headers that are no secret (``anthropic-version``).
    :param batches_url: the batch API's collection (``.../v1/batches``,
        ``.../v1/messages/batches``), under the connection's base URL.
    :param api: the model's ``api`` (``chat``, ``embeddings``, ``anthropic``).
    :param snapshot_root: the snapshot root the job writes to (any fsspec URL).
    :param namespace: ``(dag_id, task_id, interval_start)`` of the run's namespace.
    :param poll_interval_s: seconds between two polls.
    """

    def __init__(
        self,
        *,
        api_conn_id: str,
        bearer_token: str,
        secret_headers: Mapping[str, str],
        headers: Mapping[str, str],
        batches_url: str,
        api: str,
        snapshot_root: str,
        namespace: list[str] | tuple[str, ...],
        poll_interval_s: float,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # see ClusterRunTrigger
        self.api_conn_id, self.bearer_token = api_conn_id, bearer_token
        self.secret_headers, self.headers = dict(secret_headers), dict(headers)
        self.batches_url, self.api = batches_url.rstrip("/"), api
        self.snapshot_root, self.namespace = snapshot_root, tuple(namespace)
        self.poll_interval_s = poll_interval_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "api_conn_id": self.api_conn_id,
                "bearer_token": self.bearer_token,
                "secret_headers": self.secret_headers,
                "headers": self.headers,
                "batches_url": self.batches_url,
                "api": self.api,
                "snapshot_root": self.snapshot_root,
                "namespace": list(self.namespace),
                "poll_interval_s": self.poll_interval_s,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        import aiohttp  # in the triggerer only: the DAG parse and the web server never

        headers = await asyncio.to_thread(self._headers)
        parse = state_parser(self.api, self.batches_url)
        seen: dict[str, str] = {}  # each batch's progress line, as last logged
        ended: set[str] = set()
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
            while True:
                waited = await asyncio.to_thread(self._waited_for)
                try:
                    for batch_id in (b for b in waited if b not in ended):
                        state = await self._state(session, batch_id, parse)
                        if state is None:
                            continue
                        if seen.get(batch_id) != state.progress():
                            seen[batch_id] = state.progress()
                            self.log.info("batch %s: %s", batch_id, state.progress())
                        if state.ended:
                            ended.add(batch_id)
                except BatchUnavailable as refused:
                    yield _event("failed", str(refused))
                    return
                if ended.issuperset(waited):
                    yield _event("success", f"{len(waited)} provider batches ended")
                    return
                await asyncio.sleep(self.poll_interval_s)

    def _headers(self) -> dict[str, str]:
        """The API's headers, its secrets read from the connection (blocking)."""
        hook = EnrichmentApiHook(self.api_conn_id)
        if not self.batches_url.startswith(hook.base_url + "/"):
            raise ValueError(
                f"batches_url {self.batches_url} is not under the base URL of connection "
                f"{self.api_conn_id!r}: its key is not sent there"
            )
        return {**self.headers, **hook.secret_header_values(self.bearer_token, self.secret_headers)}

    def _waited_for(self) -> list[str]:
        """The namespace's batches not seen ending, their ids checked (blocking)."""
        store = SnapshotStore(self.snapshot_root)
        fs, _ = url_to_fs(self.snapshot_root)
        found = batches_waited_for(fs, store.namespace_path(NamespaceKey(*self.namespace)))
        for bad in (b for b in found if not BATCH_ID.fullmatch(b)):
            self.log.warning("skipping a journal's batch id that is no id: %r", bad[:80])
        return [b for b in found if BATCH_ID.fullmatch(b)]

    async def _state(self, session: Any, batch_id: str, parse: Any) -> BatchState | None:
        """The batch's state; None after a transient failure (logged)."""
        import aiohttp

        url = f"{self.batches_url}/{batch_id}"
        try:
            async with session.get(url, allow_redirects=False) as response:
                payload = await response.content.read(MAX_ANSWER_BYTES)
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as error:
            self.log.warning("batch %s: %r; asking again", batch_id, error)
            return None
        text = payload[:500].decode("utf-8", "replace")
        if status in REFUSED:
            raise BatchUnavailable(f"batch {batch_id}: HTTP {status} from the provider: {text}")
        if status != 200:
            self.log.warning("batch %s: HTTP %d: %s; asking again", batch_id, status, text)
            return None
        try:
            state: BatchState = parse(json.loads(payload))
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            self.log.warning(
                "batch %s: an answer that is no batch (%s); asking again", batch_id, error
            )
            return None
        return state


def _event(status: str, message: str) -> TriggerEvent:
    return TriggerEvent({"status": status, "message": message})
