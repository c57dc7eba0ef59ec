"""Batch mode (``model.mode: batch``): a partition's requests reach the model through its provider's
batch API, at half the price, and each record still gets its own answer.

The records go through the HTTP enricher as online (its LRU cache, in-flight sharing and the cross-
run response cache keyed by method, URL and body, the mode not in the key: an answer paid in either
mode answers the other); only the send differs. A request no cache answered is parked
(``batching.Batcher``) until a batch is full (``model.batch_size``, within the provider's request
and byte limits) or ``model.batch_wait_s`` after its first request; its ``custom_id`` is the
request's key (``request_key``). Each batch is recorded in the partition's journal
(``snapshots/batch_journal.py``, handed in by the partition runner: this layer does not import the
snapshots) before anything is sent, and its id once the create call answers; then it is polled every
``model.batch_poll_s`` (a wait that does not count against the record's timeout) until it ends, and
each record gets its row: the answer mapped as online (``ModelAnswers``), an error of the online
call's class (a 4xx row is a ``ClientStatusError`` dead letter, a 5xx one is retried), or, for a
request the batch never ran (expired, cancelled), a retry that sends it in a new batch (or, with
``model.batch_resend: online``, as a call of its own).

With ``--detach-batches`` (the Airflow operator's deferral) a batch not ended at its first
look raises :class:`BatchRunning` for each of its records: the partition stops once every
record is answered or waits so, and a later run reads the rows.

Resuming: a record asks first the batches its ``custom_id`` is in, oldest first, and only then a new
one. A batch whose id was not recorded (a kill between the create call and its answer) is searched
for among the batches the provider lists above the newest one it listed before the create call:
OpenAI's by the intent in its ``metadata``; Anthropic's, which keep none, by their request count,
the oldest unclaimed first, and accepted only if its results hold exactly the intent's
``custom_id``s (else its requests are sent again).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, TypeVar

from spark_jobs.asyncwait import untimed
from spark_jobs.records.batch_intent import BatchIntent, BatchProgress
from spark_jobs.records.batch_state import BatchState

from ..batching import Batcher
from ..calls import AnswerMapping, ResponseMapping, SingleCalls, StoredResponses
from ..config import HttpEnricherConfig
from ..errors import (
    BatchRunning,
    ClientStatusError,
    EnrichmentError,
    RetryableError,
    ServerError,
    snippet,
)
from ..request_keys import request_key
from ..sender import RequestSender
from .batch_protocols import BatchHttp, BatchProtocol, RowOutcome, protocol_for
from .config import ModelConfig
from .pacing import ModelPacing

logger = logging.getLogger(__name__)

T = TypeVar("T")
SEARCH_PAGES = 50
"""The most pages of batches a search for an unrecorded one reads."""


class BatchJournal(Protocol):
    """Where a partition's batches are recorded (``snapshots/batch_journal.py``): blocking
    I/O, called from a thread."""

    def intents(self) -> list[BatchIntent]: ...
    def record_intent(self, custom_ids: list[str], newest_before: str | None) -> BatchIntent: ...
    def record_batch(self, intent: BatchIntent, batch_id: str) -> BatchIntent: ...
    def record_progress(self, intent: BatchIntent, progress: BatchProgress) -> None: ...


@dataclass
class BatchMode:
    """What batch mode needs beside the enricher's own: the model, the partition's
    journal, the pacing that counts the answers' tokens and cost, and whether the run
    detaches from batches still running (``--detach-batches``) rather than wait."""

    config: ModelConfig
    journal: BatchJournal
    pacing: ModelPacing
    detach: bool = False

    @property
    def calls(self) -> partial[ProviderBatchCalls]:
        """The enricher's calls in batch mode (``HttpEnricher(calls=...)``)."""
        return partial(ProviderBatchCalls, mode=self)


@dataclass
class _Followed:
    """One batch this attempt knows of, and the task that reads its rows."""

    intent: BatchIntent
    lines: list[bytes] | None = None
    """Its requests, until its create call has been made."""
    reserved: int = 0
    task: asyncio.Task[dict[str, RowOutcome]] | None = None


@dataclass
class _Known:
    """The journal's batches by ``custom_id``, and how far each record has asked them."""

    by_custom_id: dict[str, list[_Followed]] = field(default_factory=dict)
    asked: dict[str, int] = field(default_factory=dict)
    batch_ids: set[str] = field(default_factory=set)
    batches: list[_Followed] = field(default_factory=list)

    def add(self, followed: _Followed) -> None:
        self.batches.append(followed)
        for custom_id in followed.intent.custom_ids:
            self.by_custom_id.setdefault(custom_id, []).append(followed)
        if followed.intent.batch_id is not None:
            self.batch_ids.add(followed.intent.batch_id)


class ProviderBatchCalls(SingleCalls):
    """``SingleCalls`` whose send is a row of a provider batch."""

    def __init__(
        self,
        config: HttpEnricherConfig,
        sender: RequestSender,
        mapping: ResponseMapping,
        stored: StoredResponses | None,
        answers: AnswerMapping | None,
        mode: BatchMode,
    ) -> None:
        if not config.coalesce:  # a row is handed to one caller: identical ones must share
            raise ValueError("model.mode batch: http.coalesce must stay on")
        super().__init__(config, sender, mapping, stored, answers)
        self._mode, self._poll_s = mode, mode.config.batch_poll_s
        self._protocol: BatchProtocol = protocol_for(mode.config, self.target)
        self._known: _Known | None = None
        self._loading: asyncio.Lock | None = None
        self._bodies: dict[str, str] = {}
        self._batcher: Batcher[str, None] | None = None
        self._http: BatchHttp | None = None
        self.batches_sent = 0

    def open(self) -> None:
        session = self.sender.session
        assert session is not None  # the sender opens first
        self._http = BatchHttp(session, self.sender.redact)
        limits, wait_s = self._protocol.limits, self._mode.config.batch_wait_s
        self._batcher = Batcher(self._create, limits.requests, wait_s)

    async def close(self) -> None:
        if self._batcher is not None:
            await self._batcher.aclose()
        batches = self._known.batches if self._known is not None else []
        tasks = [f.task for f in batches if f.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _send(self, url: str, body: str | None) -> tuple[int, bytes]:
        custom_id = request_key(self._method, url, body)
        async with untimed():
            found = await self._row(custom_id, body or "")
        if found is None:  # its batches ended without running it: a call of its own
            return await super()._send(url, body)
        outcome, batch_id = found
        if outcome.status == 200:
            return 200, outcome.payload
        where = f"row {custom_id[:12]} of batch {batch_id}"
        message = self.sender.redact(
            f"HTTP {outcome.status} in {where}: {snippet(outcome.payload, self.sender.redact)!r}"
        )
        status = outcome.status or 500
        if status >= 500 or status == 429:
            raise ServerError(message, status=status)
        raise ClientStatusError(message, status=status)

    async def _row(self, custom_id: str, body: str) -> tuple[RowOutcome, str] | None:
        """The record's row out of the batches that hold its request, a new one last;
        None once they ended without running it and ``model.batch_resend`` is online."""
        known, sent = await self._load(), False
        while True:
            batches = known.by_custom_id.get(custom_id, [])
            index = known.asked.get(custom_id, 0)
            if index == len(batches):
                if batches and self._mode.config.batch_resend == "online":
                    return None
                if sent:
                    raise RetryableError(
                        f"the batch of {custom_id[:12]} ended without running it "
                        "(expired or cancelled): it goes into a new batch"
                    )
                assert self._batcher is not None
                self._bodies[custom_id] = body
                await self._batcher.submit(custom_id)  # returns once its batch is recorded
                sent = True
                continue
            followed = batches[index]
            rows = await asyncio.shield(self._read(followed))  # a failure: asked again
            known.asked[custom_id] = index + 1
            outcome = rows.pop(custom_id, None)
            if outcome is not None and outcome.status is not None:
                return outcome, followed.intent.batch_id or "?"

    def _read(self, followed: _Followed) -> asyncio.Task[dict[str, RowOutcome]]:
        """The task reading ``followed``'s rows, started again if the last one failed."""
        task = followed.task
        if task is None or (task.done() and not task.cancelled() and task.exception()):
            task = followed.task = asyncio.get_running_loop().create_task(self._run(followed))
        return task

    async def _load(self) -> _Known:
        if self._known is None:
            if self._loading is None:
                self._loading = asyncio.Lock()
            async with self._loading:
                if self._known is None:
                    known = _Known()
                    for intent in await asyncio.to_thread(self._mode.journal.intents):
                        known.add(_Followed(intent))
                    self._known = known
        return self._known

    # -- a new batch ---------------------------------------------------------------------

    async def _create(self, custom_ids: list[str]) -> dict[str, None]:
        """The Batcher's send: record and start the batches of ``custom_ids`` (split by the
        provider's byte limit); their rows are read by the records themselves."""
        known = await self._load()
        bodies = {c: self._bodies.pop(c) for c in custom_ids}
        lines = [(c, self._protocol.line(c, body)) for c, body in bodies.items()]
        for chunk in _chunks(lines, self._protocol.limits.bytes):
            ids = [c for c, _ in chunk]
            reserved = await self._mode.pacing.reserve_batch([bodies[c] for c in ids])
            newest = await self._newest()
            intent = await asyncio.to_thread(self._mode.journal.record_intent, ids, newest)
            followed = _Followed(intent, [line for _, line in chunk], reserved)
            known.add(followed)
            self._read(followed)
            self.batches_sent += 1
        return dict.fromkeys(custom_ids)

    async def _newest(self) -> str | None:
        """The newest batch the provider lists now: where a search for the next stops."""
        states, _ = await self._retrying(lambda: self._protocol.page(self._api, None))
        return states[0].id if states else None

    @property
    def _api(self) -> BatchHttp:
        assert self._http is not None
        return self._http

    # -- following a batch ---------------------------------------------------------------

    async def _run(self, followed: _Followed) -> dict[str, RowOutcome]:
        """The rows of ``_batch_rows``, its reservation settled by what they cost."""
        rows = await self._batch_rows(followed)
        answered = [r.payload for r in rows.values() if r.status == 200]
        self._mode.pacing.settle_batch(followed.reserved, answered)
        followed.reserved = 0
        return rows

    async def _batch_rows(self, followed: _Followed) -> dict[str, RowOutcome]:
        """Create the batch if it is new, find it if its id was lost, wait for its end and
        read its rows (none: every request is sent again)."""
        intent, lines = followed.intent, followed.lines
        by_count, batch_id = False, intent.batch_id
        if intent.batch_id is None and lines is not None:
            followed.lines = None  # created once: after a failure, searched for
            try:
                batch_id = await self._protocol.create(self._api, intent.token, lines)
            except ClientStatusError as refused:  # the provider refused it: no batch
                body = json.dumps({"error": str(refused)}).encode()
                return dict.fromkeys(intent.custom_ids, RowOutcome(refused.status, body))
            except EnrichmentError as error:
                logger.warning(
                    "batch %s: the create call failed (%s): searching", intent.token, error
                )
                batch_id, by_count = await self._search(intent)
        elif intent.batch_id is None:
            batch_id, by_count = await self._search(intent)
        if batch_id is None:
            return {}
        if intent.batch_id is None:
            followed.intent = intent = await asyncio.to_thread(
                self._mode.journal.record_batch, intent, batch_id
            )
            assert self._known is not None
            self._known.batch_ids.add(batch_id)
        rows = await self._rows(await self._ended(batch_id, intent), intent)
        if by_count and set(rows) != set(intent.custom_ids):
            logger.warning(
                "batch %s is not the one of intent %s: sent again", batch_id, intent.token
            )
            return {}
        return rows

    async def _ended(self, batch_id: str, intent: BatchIntent) -> BatchState:
        """The batch once it ended; its progress in the log and the journal (the snapshot
        page's) whenever its status or counts change. A run that detaches raises
        :class:`BatchRunning` for a batch that has not ended: a later run reads it."""
        seen = None
        while True:
            state = await self._retrying(lambda: self._protocol.state(self._api, batch_id))
            if state.progress() != seen:
                seen = state.progress()
                logger.info("batch %s: %s", batch_id, seen)
                progress = BatchProgress(
                    batch_id, state.status, state.total, state.done, state.failed, time.time()
                )
                try:
                    await asyncio.to_thread(self._mode.journal.record_progress, intent, progress)
                except OSError as error:  # what the page shows only: the batch goes on
                    logger.warning("batch %s: its progress was not recorded: %s", batch_id, error)
            if state.ended:
                return state
            if self._mode.detach:
                raise BatchRunning(f"batch {batch_id} is still running: {seen}")
            await asyncio.sleep(self._poll_s)

    async def _rows(self, state: BatchState, intent: BatchIntent) -> dict[str, RowOutcome]:
        if state.problem is not None:  # refused whole: each row a dead letter saying why
            body = json.dumps({"error": state.problem}).encode()
            return dict.fromkeys(intent.custom_ids, RowOutcome(400, body))
        rows = await self._retrying(lambda: self._protocol.results(self._api, state))
        wanted = set(intent.custom_ids)
        return {c: r for c, r in rows.items() if c in wanted}

    async def _search(self, intent: BatchIntent) -> tuple[str | None, bool]:
        """The batch of ``intent`` among those listed above ``intent.newest_before``, and
        whether it was matched by its request count alone (an API without metadata)."""
        assert self._known is not None
        after, candidates = None, []
        for _ in range(SEARCH_PAGES):
            states, after = await self._retrying(partial(self._protocol.page, self._api, after))
            for state in states:
                if state.id == intent.newest_before:
                    after = None
                    break
                if state.intent == intent.token:
                    return state.id, False
                by_count = not self._protocol.keeps_metadata
                unclaimed = by_count and state.id not in self._known.batch_ids
                if unclaimed and state.total == len(intent.custom_ids):
                    candidates.append(state.id)
            if after is None:
                break
        return (candidates[-1], True) if candidates else (None, False)  # the oldest first

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, again after ``batch_poll_s`` while it fails transiently: the batch
        keeps running meanwhile, and giving up would send its requests again."""
        while True:
            try:
                return await call()
            except RetryableError as error:
                logger.warning("batch API: %s; asking again in %.0f s", error, self._poll_s)
                await asyncio.sleep(self._poll_s)


def _chunks(lines: list[tuple[str, bytes]], limit: int) -> list[list[tuple[str, bytes]]]:
    """``lines`` in runs of at most ``limit`` bytes (with the separators the batch adds)."""
    chunks: list[list[tuple[str, bytes]]] = [[]]
    size = 0
    for item in lines:
        if chunks[-1] and size + len(item[1]) + 2 > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += len(item[1]) + 2
    return [chunk for chunk in chunks if chunk]
