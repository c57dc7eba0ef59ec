"""How a request that no cache answered reaches the API, and its answer becomes output.

Two strategies, as Beam separates its ``Caller`` from what wraps it: :class:`SingleCalls`
sends one request per record (answering from the response cache across runs when there
is one; a model's batch mode makes each a row of a provider batch instead);
:class:`BatchCalls` parks each record's key until a batch request is due and hands every
caller the item for its own key. :class:`HttpEnricher` picks one when it is built and
never asks which it holds: its LRU cache, in-flight sharing and counters are the same for
both. :class:`ResponseMapping` turns an answer into the record's fields for either.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, Protocol, TypeVar

from .batch_config import BatchConfig
from .batching import Batcher
from .config import HttpEnricherConfig
from .errors import EnrichmentError, InvalidResponseError, NotFoundError, snippet
from .json_paths import CONVERTERS, ConversionError, compile_path, extract
from .request_keys import BatchKeys, CallKeys
from .response_field import ResponseField
from .sender import RequestSender
from .templates import UrlTemplate

Output = dict[str, Any]
AnswerMapping = Callable[[bytes, str, Callable[[str], str]], Output]
"""(raw 2xx body, where it came from, redact) -> the record's output fields."""

UrlT = TypeVar("UrlT", str, None)


class StoredResponses(Protocol):
    """Raw successful answers kept across runs (``spark_jobs.partition_runner.response_cache``)."""

    def get(self, method: str, url: str, body: str | None) -> bytes | None: ...

    def put(self, method: str, url: str, body: str | None, payload: bytes) -> None: ...


class Calls(Protocol[UrlT]):
    """One way of reaching the API. ``UrlT`` is what its keys give as a record's URL:
    a ``str`` for a call of its own, None when the record joins a batch."""

    @property
    def target(self) -> str:
        """The URL (template) it calls, for the enricher's repr."""
        ...

    @property
    def keys(self) -> Callable[[Mapping[str, Any]], tuple[Hashable, UrlT, str | None]]:
        """``(key, url, body)`` of a record; the key dedups and caches its answer."""
        ...

    batches_sent: int
    stored_hits: int

    def open(self) -> None: ...

    async def close(self) -> None: ...

    def fetch(self, key: Hashable, url: UrlT, body: str | None) -> Awaitable[Output]:
        """The output for one request; raises an :class:`EnrichmentError`."""
        ...


class FieldMapping:
    """The record's typed output fields out of a JSON document (``response_fields``):
    the HTTP enricher's for an answer, and a user's function's for what it returned.
    A value its column cannot hold is an :class:`InvalidResponseError` naming the field
    (``json_paths.py``), redacted with ``redact``."""

    def __init__(self, fields: Mapping[str, ResponseField], redact: Callable[[str], str]) -> None:
        self._fields = [
            (name, spec.path, compile_path(spec.path), CONVERTERS[spec.type])
            for name, spec in fields.items()
        ]
        self._redact = redact

    def output(self, document: Any, where: str) -> Output:
        output = {}
        for name, path, steps, convert in self._fields:
            value = extract(document, steps)
            if value is not None:
                try:
                    value = convert(value)
                except ConversionError as exc:
                    raise InvalidResponseError(
                        self._redact(f"response field {name} ({path}) from {where}: {exc}")
                    ) from None
            output[name] = value
        return output


class ResponseMapping(FieldMapping):
    """The fields out of an answer, and the ``not_found`` policy; errors are redacted as
    the sender redacts."""

    def __init__(self, config: HttpEnricherConfig, redact: Callable[[str], str]) -> None:
        super().__init__(config.response_fields, redact)
        self._method = config.method
        self._not_found_fails = config.not_found == "fail"
        self._output_names = tuple(config.response_fields)

    def not_found(self, message: str) -> Output:
        if self._not_found_fails:
            raise NotFoundError(self._redact(message))
        return dict.fromkeys(self._output_names)

    def mapped(self, payload: bytes, where: str, redact: Callable[[str], str]) -> Output:
        """The default :data:`AnswerMapping`: the fields out of a JSON body."""
        return self.output(self.parse(payload, where), where)

    def parse(self, payload: bytes, url: str) -> Any:
        try:
            return json.loads(payload)
        except ValueError:
            raise InvalidResponseError(
                self._redact(
                    f"invalid JSON from {self._method} {url}: {snippet(payload, self._redact)!r}"
                )
            ) from None
        except RecursionError:
            raise InvalidResponseError(
                self._redact(f"JSON from {self._method} {url} is nested too deeply to parse")
            ) from None


class SingleCalls:
    """One request per record, answered from ``stored`` (across runs) when it can be."""

    batches_sent = 0  # never batches

    def __init__(
        self,
        config: HttpEnricherConfig,
        sender: RequestSender,
        mapping: ResponseMapping,
        stored: StoredResponses | None,
        answers: AnswerMapping | None,
    ) -> None:
        self.keys = CallKeys(config)
        self.target = str(config.url_template)
        self._method = config.method
        self._sender = sender
        self._mapping = mapping
        self._stored = stored
        self._answers: AnswerMapping = answers or mapping.mapped
        self.stored_hits = 0

    def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def fetch(self, key: Hashable, url: str, body: str | None) -> Output:
        stored = self._stored
        payload = stored.get(self._method, url, body) if stored is not None else None
        if payload is not None:
            self.stored_hits += 1
            return self._answers(payload, url, self._sender.redact)
        status, payload = await self._send(url, body)
        if status == 404:
            return self._mapping.not_found(f"HTTP 404 from {self._method} {url}")
        output = self._answers(payload, url, self._sender.redact)
        if stored is not None:  # only answers that mapped cleanly are kept
            stored.put(self._method, url, body, payload)
        return output

    def _send(self, url: str, body: str | None) -> Awaitable[tuple[int, bytes]]:
        """The answer no cache had, as (status, body): a call of its own (a row of a
        provider batch in ``model_endpoint/batch_calls.py``)."""
        return self._sender.request(self._method, url, body, allow_404=True)


class BatchCalls:
    """Records join batch requests (``BatchConfig``): one POST of many keys, each caller
    answered with the result item for its own key (see ``batching.py``)."""

    stored_hits = 0  # batching keeps no answers across runs (the enricher refuses a store)

    def __init__(
        self,
        config: HttpEnricherConfig,
        batch: BatchConfig,
        sender: RequestSender,
        mapping: ResponseMapping,
    ) -> None:
        self.keys = BatchKeys(config)
        self.target = batch.url_template
        self._batch = batch
        self._url = UrlTemplate(batch.url_template, "batch_url_template").fill({})
        self._results_path = compile_path(batch.results_path)
        self._sender = sender
        self._mapping = mapping
        self._batcher: Batcher[Any, Output] | None = None
        self.batches_sent = 0

    def open(self) -> None:
        self._batcher = Batcher(self._send, self._batch.size, self._batch.max_wait_s)

    async def close(self) -> None:
        if self._batcher is not None:
            await self._batcher.aclose()

    def fetch(self, key: Hashable, url: None, body: str | None) -> Awaitable[Output]:
        if self._batcher is None:
            raise RuntimeError("use the enricher inside 'async with HttpEnricher(...)'")
        return self._batcher.submit(key)

    async def _send(self, keys: list[Any]) -> dict[Any, Output | Exception]:
        batch, url = self._batch, self._url
        body = json.dumps({batch.request_key: keys}, separators=(",", ":"))
        self.batches_sent += 1
        _, payload = await self._sender.request("POST", url, body, allow_404=False)
        items = extract(self._mapping.parse(payload, url), self._results_path)
        if not isinstance(items, list):
            raise InvalidResponseError(
                self._sender.redact(
                    f"no result list at {batch.results_path} in the response from "
                    f"POST {url}: {snippet(payload, self._sender.redact)!r}"
                )
            )
        id_field, error_field = batch.result_id_field, batch.error_field
        by_id = {
            str(item[id_field]): item
            for item in items
            if isinstance(item, dict) and id_field in item
        }
        outcomes: dict[Any, Output | Exception] = {}
        for key in keys:
            item = by_id.get(str(key))
            where = f"the batch item for {key!r}"
            try:
                if item is None or (error_field is not None and error_field in item):
                    outcomes[key] = self._mapping.not_found(f"{where} from POST {url} is missing")
                else:
                    outcomes[key] = self._mapping.output(item, where)
            except EnrichmentError as error:
                outcomes[key] = error
        return outcomes
