"""Ray Data's ``HttpRequestProcessorConfig`` (``ray.data.llm``) against the demo model
endpoint: the issue's first peer, configured as its documentation shows.

``.venv-bench/bin/python -m benchmarks.model_ray --url U --input I --output O --body B
--capacity C --qps Q --records N --max-retries M [--checkpoint-dir D]`` runs in the benchmark
environment (Ray is not one of the project's dependencies; ``ray.data.llm`` needs
``pydantic`` beside ``ray[data]``, and no GPU stack for the HTTP processor).

The same calls in flight as the job's 2 partitions of ``C``: 2 actors (``concurrency=2``),
each running ``C`` batches at once (``RAY_DATA_DEFAULT_ASYNC_BATCH_UDF_MAX_CONCURRENCY``,
4 by default); Ray's HTTP stage sends a batch's requests one after another, so that is
``C`` calls in flight per actor. Ray knows no token limit: ``qps`` paces each batch on
its own (not the actors together), and a 429 is retried after ``base * 2**n`` seconds
(``Retry-After`` is not read), at most ``max_retries`` times; a row whose retries run
out fails the whole run (the HTTP processor has no ``should_continue_on_error``).

``--checkpoint-dir`` turns on Ray Data's checkpointing (``DataContext.checkpoint_config``,
keyed on ``id``), so a rerun after a kill skips the rows of the output blocks written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from benchmarks.peers.ray_peer import local_ray

BATCH_ROWS = 16
"""Rows per batch: small enough that each actor has many batches to run at once."""
BLOCK_ROWS = 100
"""Rows per block: Ray's unit of checkpointing (a kill keeps the blocks written) and of
an actor's task."""
LOGICAL_CPUS = 4
"""CPUs a local Ray counts on the machine's 2 cores: the two actors and the checkpoint
filter hold one each, and the read and write tasks need one more (with 2 the run stalls)."""


def build(url: str, body: dict[str, Any], qps: int, retries: int) -> Any:
    from ray.data.llm import HttpRequestProcessorConfig, build_processor

    config = HttpRequestProcessorConfig(
        url=url,
        concurrency=2,
        batch_size=BATCH_ROWS,
        qps=qps,
        max_retries=retries,
        base_retry_wait_time_in_s=1,
    )
    template = json.dumps(body)

    def payload(row: dict[str, Any]) -> dict[str, Any]:
        title = json.dumps(row["title"])[1:-1]  # a JSON string's inside
        return {"payload": json.loads(template.replace("{title}", title))}

    def answer(row: dict[str, Any]) -> dict[str, Any]:
        text = row["http_response"]["choices"][0]["message"]["content"]
        return {"id": row["id"], "title": row["title"], "answer": text}

    return build_processor(config, preprocess=payload, postprocess=answer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.model_ray")
    for flag in ("--url", "--input", "--output", "--body"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--capacity", type=int, required=True, help="calls in flight per actor")
    parser.add_argument("--qps", type=int, required=True, help="Ray's qps (per batch)")
    parser.add_argument("--records", type=int, required=True, help="rows in the input")
    parser.add_argument("--max-retries", type=int, required=True, help="Ray's max_retries")
    parser.add_argument("--checkpoint-dir")
    args = parser.parse_args(argv)
    os.environ["RAY_DATA_DEFAULT_ASYNC_BATCH_UDF_MAX_CONCURRENCY"] = str(args.capacity)
    import ray.data

    with local_ray(LOGICAL_CPUS, args.checkpoint_dir):
        processor = build(args.url, json.loads(args.body), args.qps, args.max_retries)
        blocks = max(2, args.records // BLOCK_ROWS)
        dataset = ray.data.read_json(args.input, override_num_blocks=blocks)
        processor(dataset).write_parquet(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
