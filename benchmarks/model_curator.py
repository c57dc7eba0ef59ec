"""Bespoke Curator (``bespokelabs-curator``) against the demo model endpoint, in online mode
with its OpenAI backend pointed at the endpoint (``base_url``), configured as its
documentation shows.

``.venv-curator/bin/python -m benchmarks.model_curator --base-url U --input I --output O
--body B --calls-in-flight C --requests-per-minute R --tokens-per-minute T --cache-dir D``
runs in Curator's own environment (its pins clash with Ray Data's).

Curator's own limiter is given the endpoint's limits per minute (``max_requests_per_minute``,
``max_tokens_per_minute``) and the calls in flight (``max_concurrent_requests``); it
reserves each call's prompt tokens plus an output estimate (4 096 for a model litellm does
not know) and frees the difference when the answer comes. Before the records it sends two
calls of its own: a bodiless one to read the rate-limit headers, and a structured-output
check ("Jason is 25 years old."), as it does against any ``base_url``. A failed call is
retried at once (``max_retries``, Curator's default 10; ``Retry-After`` is not read), and
a row whose retries run out is left out of the answers (``require_all_responses=False``)
instead of failing the run.

Resume: Curator's cache, in ``D`` (a fresh folder per run, so runs are comparable): it
writes each answer as it comes, and a rerun over the same rows sends only those without.
Every outside call but the endpoint's is off: telemetry, litellm's price list, tiktoken's
download (litellm ships the encoding Curator counts with).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.model_body import answer_model, chat_body

API_KEY = "bench-model-loopback"
"""Curator wants a key; the loopback endpoint reads none."""
OFFLINE = {
    "TELEMETRY_ENABLED": "false",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "HF_HUB_OFFLINE": "1",
    "CURATOR_DISABLE_RICH_DISPLAY": "1",
}
"""Set before Curator is imported: nothing leaves the machine but the endpoint's calls."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.model_curator")
    for flag in ("--base-url", "--input", "--output", "--body", "--cache-dir"):
        parser.add_argument(flag, required=True)
    for flag in ("--calls-in-flight", "--requests-per-minute", "--tokens-per-minute"):
        parser.add_argument(flag, type=int, required=True)
    args = parser.parse_args(argv)
    os.environ.update(OFFLINE)
    from litellm.litellm_core_utils import tokenizers

    os.environ["TIKTOKEN_CACHE_DIR"] = str(Path(tokenizers.__file__).parent)
    from bespokelabs import curator

    body = chat_body(args.body)
    template = body.prompt

    class Classify(curator.LLM):
        def prompt(self, row: dict[str, Any]) -> str:
            return template.replace("{title}", row["title"])

        def parse(self, row: dict[str, Any], answer: Any) -> dict[str, Any]:
            return {"id": row["id"], "title": row["title"], "answer": answer.model_dump_json()}

    classify = Classify(
        model_name=body.model,
        response_format=answer_model(body.schema),
        backend="openai",
        generation_params=body.generation,
        backend_params={
            "base_url": args.base_url,
            "api_key": API_KEY,
            "max_requests_per_minute": args.requests_per_minute,
            "max_tokens_per_minute": args.tokens_per_minute,
            "max_concurrent_requests": args.calls_in_flight,
            "require_all_responses": False,
        },
    )
    rows = [
        json.loads(line)
        for path in sorted(Path(args.input).glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line
    ]
    answers = classify(rows, working_dir=args.cache_dir)
    answers.dataset.to_parquet(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
