"""The pure parts of ``make bench-model``'s contenders: the harness's body as the pieces
Daft and Curator take, what counts as a dead letter or a prompt paid again in their
answers, and a contender that is not installed reported as such."""

from __future__ import annotations

import json
import sys

import pydantic
import pytest

from benchmarks.model_body import answer_model, chat_body
from benchmarks.model_endpoint import (
    CONTENDERS,
    SCHEMA,
    not_installed,
    record_prompts_paid_again,
    table,
    unanswered,
)
from benchmarks.model_endpoint import chat_body as harness_body


def test_the_body_comes_apart_into_the_harness_prompt_parameters_and_schema() -> None:
    body = chat_body(json.dumps(harness_body()))
    assert (body.model, body.prompt) == ("demo", "Classify this message: {title}")
    assert body.generation == {"max_tokens": 40}
    assert body.schema == SCHEMA


def test_the_answer_model_sends_the_harness_schema_and_reads_its_answers() -> None:
    model = answer_model(SCHEMA)
    sent = model.model_json_schema()
    assert sent["required"] == ["label", "score"]
    assert sent["properties"]["label"] == {
        "enum": ["spam", "ham", "other"],
        "title": "Label",
        "type": "string",
    }
    assert sent["properties"]["score"]["type"] == "number"
    assert model(label="ham", score=0.5).model_dump() == {"label": "ham", "score": 0.5}
    with pytest.raises(pydantic.ValidationError):
        model(label="ham")  # score is required


def test_an_answer_schema_the_model_cannot_take_is_named() -> None:
    nested = {"type": "object", "properties": {"tags": {"type": "array"}}}
    with pytest.raises(ValueError, match="'tags'"):
        answer_model(nested)
    with pytest.raises(ValueError, match="not an object"):
        answer_model({"type": "string"})


def test_a_null_answer_and_a_missing_row_are_both_dead_letters() -> None:
    assert unanswered(['{"label": "ham"}', None, {"label": "spam"}], records=3) == 1
    assert unanswered(['{"label": "ham"}'], records=3) == 2  # Curator leaves failed rows out


def test_only_records_prompts_count_as_paid_again_in_any_form_they_are_sent() -> None:
    calls = {
        "Classify this message: message number 1": 2,
        "[{'type': 'text', 'text': 'Classify this message: message number 2'}]": 3,
        "Classify this message: message number 3": 1,
        "": 2,  # Curator's rate-limit probe, once per run
        "Jason is 25 years old.": 2,  # Curator's structured-output check
    }
    assert record_prompts_paid_again(calls) == 2


def test_a_contender_that_is_not_installed_says_why_and_is_reported() -> None:
    assert not_installed(sys.executable, "json", "bench-venv") is None
    missing = not_installed(sys.executable, "no_such_module_here", "bench-venv")
    assert missing is not None and "cannot import no_such_module_here" in missing
    assert "ModuleNotFoundError" in missing
    absent = not_installed("/nonexistent/bin/python", "json", "bench-venv-curator")
    assert absent == "no environment at /nonexistent/bin/python (make bench-venv-curator builds it)"
    rows = table({CONTENDERS["curator"].name: {"not_installed": absent}}).splitlines()
    assert rows[2].startswith(f"| Bespoke Curator | not installed: {absent} |")
    assert len(rows) == 3  # the contenders not chosen have no row
