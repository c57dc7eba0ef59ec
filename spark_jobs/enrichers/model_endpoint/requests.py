"""The request a model endpoint gets for a record, as the HTTP enricher's body template.

The body is a ``BodyTemplate`` (``templates.py``): the prompt and system strings keep
their ``{field}`` placeholders, every other string (model name, parameters, the schema's
descriptions) is literal, its braces escaped. So a record is rendered exactly as URLs
and bodies are, and the rendered body (model, parameters, prompt) is what the in-run
dedup, the resumed partition's paid answers and the cross-run cache key on: the same
prompt is paid once, a changed one is paid again.

Every placeholder of a prompt is asked as text (``{field!s}``), a lone one too: a
prompt of ``"{field}"`` would otherwise send the column's typed value, and a list column
becomes the API's content blocks (an ``image_url``, another file's ``file_id``); a list,
struct or map value is a dead letter (``FieldValueError``) instead, a number its text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..templates import parse_template
from .config import ModelConfig


def literal(node: Any) -> Any:
    """``node`` with the braces of its strings escaped: no placeholder in it."""
    if isinstance(node, str):
        return node.replace("{", "{{").replace("}", "}}")
    if isinstance(node, Mapping):
        return {literal(key): literal(value) for key, value in node.items()}
    if isinstance(node, list):
        return [literal(value) for value in node]
    return node


def as_text(template: str, what: str) -> str:
    """``template`` with each of its placeholders asked as text (``{field!s}``)."""
    return "".join(
        literal(text) + (f"{{{field}!s}}" if field is not None else "")
        for text, field, _ in parse_template(template, what)
    )


def body_template(config: ModelConfig) -> dict[str, Any]:
    """The JSON body with the record's placeholders, for ``config.api``."""
    parameters = literal(dict(config.parameters))
    model = literal(config.model)
    prompt = as_text(config.prompt, "model.prompt")
    system = as_text(config.system, "model.system") if config.system is not None else None
    if config.api == "embeddings":
        return {"model": model, "input": prompt, **parameters}
    user = {"role": "user", "content": prompt}
    if config.api == "anthropic":
        body = {"model": model, "messages": [user], **parameters}
        if system is not None:
            body["system"] = system
        return body
    messages = [user]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    body = {"model": model, "messages": messages, **parameters}
    if config.output_schema is not None and config.response_format:
        schema = {"name": "output", "strict": True, "schema": literal(config.output_schema)}
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    return body


def headers(config: ModelConfig) -> dict[str, str]:
    """Plain headers the API needs besides the key."""
    if config.api == "anthropic":
        return {"anthropic-version": config.anthropic_version}
    return {}


def request_options(config: ModelConfig, options: Mapping[str, Any]) -> dict[str, Any]:
    """The HTTP enricher's options for calling the model, over the job's ``options``
    (the endpoint as ``url_template``, timeouts, the key's source): a POST of the body
    template, the API's headers, ``requests_per_minute`` as the request rate, and for a
    self-hosted server (no limits, a queue) the concurrency its latency allows."""
    method = str(options.get("method") or "POST").upper()
    if method != "POST":
        raise ValueError(f"method: a model endpoint is called with POST, got {method}")
    if options.get("body_template") is not None:
        raise ValueError("body_template: the model section builds the body (model.prompt)")
    found: dict[str, Any] = {
        "method": "POST",
        "body_template": body_template(config),
        "headers": {**dict(options.get("headers") or {}), **headers(config)},
    }
    if config.provider == "self-hosted" and "concurrency" not in options:
        found["concurrency"] = "latency"
    if config.requests_per_minute:  # the lower of it and --requests-per-second
        rate, given = config.requests_per_minute / 60.0, options.get("requests_per_second")
        found["requests_per_second"] = min(rate, given) if given else rate
    return found
