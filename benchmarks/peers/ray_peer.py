"""Ray Data as a peer: ``map_batches`` with an async callable class on an actor pool.

``.venv-bench/bin/python -m benchmarks.peers.ray_peer --url U --capacity C --input I
--output O [--checkpoint-dir D]`` runs in the benchmark environment (Ray is not one of the
project's dependencies). A local Ray with 2 CPUs, an actor pool of 2 (as Spark's 2
partitions, half a CPU each), each actor with one aiohttp session and a semaphore of
``C`` shared by the batches it runs at once (Ray runs several batches of an async UDF
concurrently). The same Parquet input, the same three fields, written with
``write_parquet``.

``--checkpoint-dir`` turns on Ray Data's own checkpointing
(``DataContext.checkpoint_config``, keyed on ``id``): a rerun skips the rows whose
output blocks were written.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from benchmarks.peers.fields import item_url, pick

BATCH_ROWS = 1_000
#: Two actors on Ray's 2 CPUs would leave none for the read and write tasks (the job
#: hangs); half a CPU each leaves one, as Spark's JVM reads beside its 2 task slots.
ACTOR_CPUS = 0.5


class Enrich:
    def __init__(self, base_url: str, capacity: int) -> None:
        self.base_url = base_url
        self.capacity = capacity
        self.session: Any = None
        self.semaphore: asyncio.Semaphore | None = None

    async def _one(self, key: str) -> tuple[str, str, float]:
        assert self.semaphore is not None
        async with self.semaphore, self.session.get(item_url(self.base_url, key)) as response:
            response.raise_for_status()
            return pick(await response.json())

    async def __call__(self, batch: pa.Table) -> pa.Table:
        if self.session is None:  # in the actor's event loop, on first use
            import aiohttp

            connector = aiohttp.TCPConnector(limit=self.capacity, limit_per_host=self.capacity)
            self.session = aiohttp.ClientSession(connector=connector)
            self.semaphore = asyncio.Semaphore(self.capacity)
        keys = batch.column("id").to_pylist()
        answers = await asyncio.gather(*(self._one(k) for k in keys))
        names, cities, scores = zip(*answers, strict=True)
        return (
            batch.append_column("name", pa.array(names))
            .append_column("city", pa.array(cities))
            .append_column("score", pa.array(scores, pa.float64()))
        )


@contextmanager
def local_ray(cpus: float, checkpoint_dir: str | None) -> Iterator[None]:
    """A local Ray of ``cpus`` logical CPUs, quiet (no dashboard, no progress bars), with
    Ray Data's checkpointing keyed on ``id`` in ``checkpoint_dir`` when given; shut down
    on leaving."""
    import ray
    import ray.data

    ray.init(num_cpus=cpus, include_dashboard=False, object_store_memory=10**9, log_to_driver=False)
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        if checkpoint_dir:
            from ray.data.checkpoint import CheckpointConfig

            context.checkpoint_config = CheckpointConfig(
                id_column="id", checkpoint_path=checkpoint_dir
            )
        yield
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.ray_peer")
    parser.add_argument("--url", required=True)
    parser.add_argument("--capacity", type=int, required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--records", type=int, required=True, help="rows in the input")
    parser.add_argument("--checkpoint-dir")
    args = parser.parse_args(argv)
    import ray.data

    with local_ray(2, args.checkpoint_dir):
        # Blocks of about Spark's Arrow batch size, so both actors get work.
        blocks = max(2, args.records // 10_000)
        dataset = ray.data.read_parquet(args.input, override_num_blocks=blocks)
        enriched = dataset.map_batches(
            Enrich,
            fn_constructor_args=(args.url, args.capacity),
            compute=ray.data.ActorPoolStrategy(size=2),
            num_cpus=ACTOR_CPUS,
            batch_size=BATCH_ROWS,
            batch_format="pyarrow",
        )
        enriched.write_parquet(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
