"""Many embeddings inputs a request, each record still answered, cached and failed alone.

OpenAI's ``/v1/embeddings`` (and Azure OpenAI's, vLLM's, Text Embeddings Inference's
OpenAI route) takes a list of inputs and answers ``data[]``, each item with the ``index``
of its input, and one ``usage`` for them all. The operator still calls the enricher once
per record; the HTTP enricher's :class:`~spark_jobs.enrichers.batching.Batcher` gathers
the records' inputs into requests of at most ``inputs_a_request`` inputs summing to at
most ``tokens_a_request`` estimated tokens (``ModelConfig``), and
:class:`EmbeddingBatches` hands each record the answer to its own input:

* **per record, as if asked alone**: an input's share of the answer becomes the answer a
  request of that input alone gets (its vector at ``index`` 0, its share of the usage);
  the record's output is read from it (``ModelAnswers``) and the cross-run cache keeps it
  under the record's own request key. So an input paid in a batch answers a run that
  sends one input a request, and the other way round; the in-run dedup, the resumed
  partition's paid answers and the snapshots stay per record; a batch of one input is
  sent as that record's own request.
* **one request, the sum of its tokens**: the pacing admits the request once (one
  request of the rate, its inputs' tokens) and its ``usage`` settles it and the ledger.
  A record's ``prompt_tokens`` is that usage shared out by the inputs' estimates, the
  largest remainders rounded up, so the records add up to the provider's count; it is
  the count of the input alone whenever the estimate counts as the provider does. The
  answer may be as large as ``max_response_bytes`` an input (each input's answer capped
  as when asked alone): 2 048 vectors of 1 536 floats are about 60 MiB of JSON.
* **a refusal is the input's**: a 400, 413 or 422 to a request of several inputs (one
  input empty or too long for the model) splits it in halves, each sent again, the first
  before the second, down to single inputs sent as their records' own requests: only
  the input at fault becomes a dead letter, with the error it gets alone, for about
  2 log2(n) more requests. A refusal of every input alike (a parameter the model does not
  take) costs up to 2n - 1 requests for n records; as those records fail alike, one
  after the other, the systemic-failure stop ends the run within its threshold. Any other
  failure (throttled, a server error, no answer, a spent budget) is each record's of that
  request, and each is retried on its own, joining a later request.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from ..batching import Batcher
from ..calls import AnswerMapping, Output, ResponseMapping, SingleCalls, StoredResponses
from ..config import HttpEnricherConfig
from ..errors import ClientStatusError, EnrichmentError, InvalidResponseError, snippet
from ..sender import RequestSender
from .answers import ModelAnswers, usage
from .config import ModelConfig
from .pacing import LIMIT_SHARE
from .tokens import estimate_tokens

SPLIT_STATUSES = frozenset({400, 413, 422})
"""Refusals of a request that may be one input's fault: the request is split to find it."""

Outcomes = dict["EmbeddingInput", Output | Exception]


@dataclass(frozen=True)
class EmbeddingInput:
    """One record's input waiting for its request, known (and deduplicated) by the
    record's own request key."""

    key: Hashable
    url: str = field(compare=False)
    body: str = field(compare=False)
    """The record's own request, one input: what it is sent as alone."""
    text: str = field(compare=False)
    tokens: int = field(compare=False)


def embedding_batches(model: ModelConfig, partitions: int) -> EmbeddingBatchesFactory | None:
    """How a model run's records reach an embeddings endpoint many to a request; None
    when each goes alone (not embeddings, or ``inputs_per_request: 1``). A request's
    tokens stay within the partition's share of a configured ``tokens_per_minute``."""
    if model.inputs_a_request <= 1:
        return None
    tokens = model.tokens_a_request
    if model.tokens_per_minute:
        tokens = min(tokens, max(1, int(model.tokens_per_minute * LIMIT_SHARE / partitions)))
    return EmbeddingBatchesFactory(model, tokens)


@dataclass(frozen=True)
class EmbeddingBatchesFactory:
    """The HTTP enricher's ``CallsFactory`` for :class:`EmbeddingBatches`."""

    model: ModelConfig
    tokens_a_request: int

    def __call__(
        self,
        config: HttpEnricherConfig,
        sender: RequestSender,
        mapping: ResponseMapping,
        stored: StoredResponses | None,
        answers: AnswerMapping | None,
    ) -> EmbeddingBatches:
        """``answers`` maps a record sent alone; a batched answer is split by the
        model's own :class:`ModelAnswers`."""
        single = SingleCalls(config, sender, mapping, stored, answers)
        keeps = stored is not None
        split = ModelAnswers(self.model)
        return EmbeddingBatches(self.model, self.tokens_a_request, single, split, keeps)


class EmbeddingBatches:
    """The HTTP enricher's ``Calls`` for embeddings: records' inputs gathered into
    requests, each record answered with its own input's share."""

    def __init__(
        self,
        model: ModelConfig,
        tokens_a_request: int,
        single: SingleCalls,
        answers: ModelAnswers,
        keeps: bool,
    ) -> None:
        """``single``: how a record is sent and kept alone; ``keeps``: whether its
        answers are kept across runs (then each input's is written as its own answer)."""
        self.keys = single.keys
        self.target = single.target
        self._model = model
        self._tokens = tokens_a_request
        self._single = single
        self._sender = single.sender
        self._mapping = single.mapping
        self._answers = answers
        self._keeps = keeps
        self._batcher: Batcher[EmbeddingInput, Output] | None = None
        self.batches_sent = 0

    @property
    def stored_hits(self) -> int:
        return self._single.stored_hits

    def open(self) -> None:
        self._batcher = Batcher(
            self._send,
            self._model.inputs_a_request,
            self._model.input_wait_s,
            weight=_tokens,
            max_weight=self._tokens,
        )

    async def close(self) -> None:
        if self._batcher is not None:
            await self._batcher.aclose()

    async def fetch(self, key: Hashable, url: str, body: str | None) -> Output:
        output = self._single.stored_answer(url, body)
        if output is not None:
            return output
        if self._batcher is None:
            raise RuntimeError("use the enricher inside 'async with HttpEnricher(...)'")
        assert body is not None  # a model run always sends its body template
        text = str(json.loads(body)["input"])
        item = EmbeddingInput(key, url, body, text, estimate_tokens(text))
        return await self._batcher.submit(item)

    async def _send(self, inputs: list[EmbeddingInput]) -> Outcomes:
        """Each input's outcome; inputs of different URLs (a templated endpoint) apart."""
        by_url: dict[str, list[EmbeddingInput]] = {}
        for item in inputs:
            by_url.setdefault(item.url, []).append(item)
        outcomes: Outcomes = {}
        for group in by_url.values():
            await self._answer(group, outcomes)
        return outcomes

    async def _answer(self, inputs: list[EmbeddingInput], outcomes: Outcomes) -> None:
        """The outcomes of ``inputs`` into ``outcomes``: one request for them all, or its
        halves after a refusal that may be one input's, the first half before the second
        (a refusal of all alike then fails its records one after the other)."""
        try:
            if len(inputs) == 1:
                outcomes[inputs[0]] = await self._single.call(inputs[0].url, inputs[0].body)
            else:
                outcomes.update(await self._request(inputs))
        except ClientStatusError as error:
            if len(inputs) == 1 or error.status not in SPLIT_STATUSES:
                outcomes.update(dict.fromkeys(inputs, error))
                return
            half = len(inputs) // 2
            await self._answer(inputs[:half], outcomes)
            await self._answer(inputs[half:], outcomes)
        except Exception as error:  # every input of this request shares it; each retries
            outcomes.update(dict.fromkeys(inputs, error))

    async def _request(self, inputs: list[EmbeddingInput]) -> Outcomes:
        """One request of all ``inputs`` (the first one's body, its input a list)."""
        url = inputs[0].url
        body = json.loads(inputs[0].body)
        body["input"] = [item.text for item in inputs]
        self.batches_sent += 1
        encoded = json.dumps(body, separators=(",", ":"))
        status, payload = await self._sender.request(
            "POST", url, encoded, allow_404=True, answers=len(inputs)
        )
        if status == 404:
            return {item: self._not_found(f"HTTP 404 from POST {url}") for item in inputs}
        return self._shared_out(inputs, payload, f"POST {url}")

    def _not_found(self, message: str) -> Output | Exception:
        try:
            return self._mapping.not_found(message)
        except EnrichmentError as error:
            return error

    def _shared_out(self, inputs: list[EmbeddingInput], payload: bytes, where: str) -> Outcomes:
        """Each input's answer as a request of its own would have had it, kept and read."""
        redact = self._sender.redact
        try:
            document = json.loads(payload)
        except (ValueError, RecursionError):
            text = snippet(payload, redact)
            raise InvalidResponseError(redact(f"invalid JSON from {where}: {text!r}")) from None
        vectors = _vectors(document, where, redact)
        counted = usage(document, "embeddings")
        shares = shares_of(counted[0], [i.tokens for i in inputs]) if counted else None
        outcomes: Outcomes = {}
        for index, item in enumerate(inputs):
            at = f"{where} (input {index} of {len(inputs)})"
            try:
                tokens = None if shares is None else shares[index]
                own = _own_answer(document, vectors.get(index), tokens, at)
                if self._keeps:  # as the answer to the record's own request
                    kept = _encoded(own, at)
                    outcomes[item] = self._single.kept(item.url, item.body, kept, at)
                else:  # the same output, without writing and parsing it again
                    outcomes[item] = self._answers.of_document(own, payload, at, redact)
            except EnrichmentError as error:
                outcomes[item] = error
        return outcomes


def _tokens(item: EmbeddingInput) -> int:
    return item.tokens


def _vectors(document: Any, where: str, redact: Any) -> dict[int, Any]:
    """The answer's ``data[]`` items by their ``index``."""
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list):
        raise InvalidResponseError(redact(f"no data[] in the answer from {where}"))
    return {
        item["index"]: item.get("embedding")
        for item in data
        if isinstance(item, dict) and type(item.get("index")) is int
    }


def _own_answer(document: Any, vector: Any, tokens: int | None, where: str) -> dict[str, Any]:
    """The answer to one input alone: its vector as ``data[0]``, its tokens as usage."""
    if vector is None:
        raise InvalidResponseError(f"no data[] item for the input in the answer from {where}")
    answer: dict[str, Any] = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": vector}],
        "model": document.get("model"),
    }
    if tokens is not None:
        answer["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
    return answer


def _encoded(answer: dict[str, Any], where: str) -> bytes:
    try:
        return json.dumps(answer, separators=(",", ":")).encode()
    except (ValueError, RecursionError):  # a vector nested too deeply to write
        raise InvalidResponseError(f"an unreadable embedding in the answer from {where}") from None


def shares_of(total: int, weights: list[int]) -> list[int]:
    """``total`` shared out in proportion to ``weights`` (evenly when all are 0), in whole
    numbers that add up to it: the largest remainders are rounded up."""
    if not any(weights):
        weights = [1] * len(weights)
    whole = sum(weights)
    shares = [total * w // whole for w in weights]
    by_remainder = sorted(range(len(weights)), key=lambda i: -(total * weights[i] % whole))
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares
