"""Hostile answers through the real partition runner, writer and reader, with a real API
on loopback: a value no column can hold (an integer beyond 64 bits, a lone surrogate, a
usage of 10**19 tokens, a number beyond any float, an answer of the wrong shape) is a
dead letter of its record alone, of the documented class, and the rest of the partition
commits. Before, such a value failed the Arrow conversion of the next output batch, and
with it the task and every retry of it (each paying the calls again)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
from aiohttp import web

from spark_jobs.enrichers import ResponseField
from spark_jobs.enrichers.model_endpoint import ModelConfig
from spark_jobs.partition_runner import PartitionRunner, PartitionTask
from spark_jobs.snapshots import NamespaceKey, SnapshotStore
from spark_jobs.spec.job_spec import JobSpec

from .http_support import ThreadedServer

INPUT = pa.schema([("id", pa.string())])
IDS = [f"k{i:02d}" for i in range(24)]


class HostileApi(ThreadedServer):
    """Answers a call for record ``k07`` (the last word of its path, or of a chat
    request's prompt) with ``answers["k07"]``, raw JSON text as a hostile server or a
    coaxed model writes it; every other record with ``good``."""

    def __init__(self, answers: Mapping[str, str], good: str) -> None:
        super().__init__()
        self.answers, self.good = answers, good

    async def _answer(self, request: web.Request) -> web.Response:
        if request.can_read_body:
            record = (await request.json())["messages"][-1]["content"].split()[-1]
        else:
            record = request.path.rsplit("/", 1)[-1]
        text = self.answers.get(record, self.good)
        return web.Response(text=text, content_type="application/json")


def one_partition(tmp_path: Path, url: str, **options: Any) -> JobSpec:
    """A job of one partition at a queue of 16, cutting often: many commits to read."""
    return JobSpec(
        input="unused",
        output="unused",
        key_column="id",
        snapshot_dir=str(tmp_path),
        url_template=url,
        partitions=1,
        capacity=4,
        snapshot_interval=0.01,
        **options,
    )


def run_partition(tmp_path: Path, job: JobSpec, outputs: pa.Schema) -> list[dict[str, Any]]:
    """The rows one partition runner gives Spark; its last commit holds them too."""
    schema = pa.schema([*INPUT, *outputs, ("_error", pa.string()), ("_attempts", pa.int64())])
    part = SnapshotStore(job.snapshot_dir).partition(NamespaceKey("d", "t", "i"), 0)
    rows = [{"id": key} for key in IDS]
    batches = [pa.RecordBatch.from_pylist(rows[i : i + 6], schema=INPUT) for i in (0, 6, 12, 18)]
    task = PartitionTask(0, "a1", len(rows), "fp", "r")
    out = [
        row
        for batch in PartitionRunner(job, part, schema).run(batches, task)
        for row in batch.to_pylist()
    ]
    final = part.latest()  # the reader accepts what the writer wrote
    dead = sum(row["_error"] is not None for row in out)
    assert final is not None and final.stats["finished"] is True
    assert (final.committed_rows, final.dead_letter_rows) == (len(rows) - dead, dead)
    return out


def dead_letters(out: list[dict[str, Any]]) -> dict[str, str]:
    return {row["id"]: row["_error"] for row in out if row["_error"] is not None}


def test_hostile_field_values_are_dead_letters_of_their_records_only(tmp_path: Path) -> None:
    hostile = {
        "k03": '{"n": 1e30, "label": "a"}',  # an integer beyond 64 bits, written as a float
        "k05": '{"n": 10000000000000000000, "label": "a"}',  # 10**19
        "k08": '{"n": 1, "label": "\\ud800"}',  # a lone surrogate
        "k13": '{"n": 1, "meta": {"\\udfff": 1}}',  # one in a json field's key
        "k17": '{"n": 1, "score": 1' + "0" * 400 + "}",  # beyond any float (OverflowError)
    }
    good = '{"n": 7, "label": "fine", "score": 0.5, "meta": {"a": [1]}}'
    fields = {"n": "int", "label": "string", "score": "float", "meta": "json"}
    paths = {name: ResponseField(f"$.{name}", kind) for name, kind in fields.items()}
    with HostileApi(hostile, good) as api:
        job = one_partition(tmp_path, api.url + "/item/{id}", response_fields=paths)
        types = {
            "int": pa.int64(),
            "string": pa.string(),
            "float": pa.float64(),
            "json": pa.string(),
        }
        out = run_partition(tmp_path, job, pa.schema([(n, types[k]) for n, k in fields.items()]))

    dead = dead_letters(out)
    assert set(dead) == set(hostile)
    assert all(error.startswith("InvalidResponseError: response field ") for error in dead.values())
    assert "outside the 64-bit range" in dead["k03"] and "outside the 64-bit range" in dead["k05"]
    assert "lone surrogate U+D800" in dead["k08"] and "lone surrogate U+DFFF" in dead["k13"]
    assert "expected a number" in dead["k17"]
    enriched = [row for row in out if row["_error"] is None]
    assert len(enriched) == len(IDS) - len(hostile)
    assert all(row["n"] == 7 and row["meta"] == '{"a":[1]}' for row in enriched)


def _chat(content: Any, prompt_tokens: int = 5) -> str:
    message = {"role": "assistant", "content": content}
    return json.dumps(
        {
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 2},
        }
    )


def test_hostile_model_answers_are_dead_letters_of_their_class(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "label": {"type": "string"}},
        "required": ["n", "label"],
    }
    hostile = {
        "k02": _chat('{"n": 1e30, "label": "a"}'),  # coaxed by the record's text
        "k09": _chat('{"n": 1, "label": "ok"}', prompt_tokens=10**19),
        "k10": _chat('{"n": 1, "label": "\\ud800"}'),
        "k21": json.dumps({"choices": [{"message": "not an object"}]}),  # was AttributeError
    }
    model = {"model": "m", "prompt": "Classify {id}", "output_schema": schema}
    with HostileApi(hostile, _chat('{"n": 3, "label": "ok"}')) as api:
        job = one_partition(tmp_path, api.url + "/v1/chat/completions", model=model)
        types = ModelConfig.from_dict(model).output_types()
        out = run_partition(tmp_path, job, pa.schema(list(types.items())))

    dead = dead_letters(out)
    assert set(dead) == set(hostile)
    assert dead["k02"].startswith("InvalidOutputError: not of output_schema: $.n: the integer")
    assert dead["k09"].startswith("InvalidResponseError: a usage of 10000000000000000000 tokens")
    assert dead["k10"].startswith("InvalidOutputError: not of output_schema: $.label: a string")
    assert dead["k21"].startswith("InvalidResponseError: no choices[0].message (an object)")
    enriched = [row for row in out if row["_error"] is None]
    assert len(enriched) == len(IDS) - len(hostile)
    assert all((row["n"], row["label"], row["prompt_tokens"]) == (3, "ok", 5) for row in enriched)
