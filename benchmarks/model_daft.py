"""Daft's ``prompt()`` (``daft.functions.ai``) against the demo model endpoint, configured as
its documentation shows for an OpenAI-compatible server: an ``OpenAIProvider`` with
``base_url``, the Chat Completions API (``use_chat_completions=True``; the Responses API
is Daft's default, and the endpoint, like most OpenAI-compatible servers, serves chat).

``.venv-bench/bin/python -m benchmarks.model_daft --base-url U --input I --output O --body B
--calls-in-flight C --attempts A`` runs in the benchmark environment (Daft is not one of
the project's dependencies).

Daft's native runner, one process. The same calls in flight as the job's in all, ``C``:
``concurrency=C`` (Daft's ``max_concurrency`` for an async function) holds only across
morsels, and a morsel's rows are all sent at once (``asyncio.gather``), so the morsel is
``C`` rows too. With Daft's default morsel (131 072 rows) every record of the benchmark is
sent at once whatever ``concurrency`` says (96 records: all 96 calls within 10 ms, with
``concurrency`` 2 or 16; with 8-row morsels, about 3 and 17 in flight). Daft knows no
rate limit: the OpenAI client it
builds retries a 429 after ``Retry-After`` (``max_retries``, ``A`` - 1 of them: the
recipe's attempts), and a row whose attempts run out is kept with a null answer
(``on_error="log"``) instead of failing the run. The answer schema goes as
``return_format`` (a pydantic model of it; the client sends it as a strict JSON schema).
No resume: a rerun after a kill prompts every row again.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.model_body import answer_model, chat_body

API_KEY = "bench-model-loopback"
"""The OpenAI client wants a key; the loopback endpoint reads none."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.model_daft")
    for flag in ("--base-url", "--input", "--output", "--body"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--calls-in-flight", type=int, required=True)
    parser.add_argument("--attempts", type=int, required=True, help="tries per row")
    args = parser.parse_args(argv)
    import daft
    from daft.ai.openai.provider import OpenAIProvider
    from daft.functions import format
    from daft.functions.ai import prompt

    daft.set_execution_config(default_morsel_size=args.calls_in_flight)
    body = chat_body(args.body)
    before, after = body.prompt.split("{title}")
    provider = OpenAIProvider(name="bench-model", base_url=args.base_url, api_key=API_KEY)
    answer = prompt(
        format(before + "{}" + after, daft.col("title")),  # the template has no other braces
        return_format=answer_model(body.schema),
        provider=provider,
        model=body.model,
        use_chat_completions=True,
        concurrency=args.calls_in_flight,
        max_retries=args.attempts - 1,
        on_error="log",
        **body.generation,
    )
    frame = daft.read_json(f"{args.input}/*.jsonl").with_column("answer", answer)
    frame.select("id", "title", "answer").write_parquet(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
