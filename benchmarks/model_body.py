"""The chat body ``make bench-model`` gives every contender, taken apart for the frameworks
that build the body themselves (Daft's ``prompt()``, Bespoke Curator): the model, the
prompt template, the generation parameters, and the answer's JSON schema as the pydantic
model they take in its place.

The recipe and Ray Data send the body as it is; these two send what they make of the pieces,
so the closer the pieces, the closer the calls. Imports nothing of the project's: it runs in
the benchmark environments (``.venv-bench``, ``.venv-curator``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any

import pydantic

JSON_TYPES: dict[str, type] = {"string": str, "number": float, "integer": int, "boolean": bool}
"""The schema's scalar types as Python types (the answer schema has no nested objects)."""


@dataclass(frozen=True)
class ChatBody:
    model: str
    prompt: str
    """The user message, ``{title}`` standing for the record's title."""
    generation: dict[str, Any]
    """Everything else but the schema: ``max_tokens``..."""
    schema: dict[str, Any]


def chat_body(text: str) -> ChatBody:
    """The body of ``benchmarks.model_endpoint.chat_body()`` as passed on a command line."""
    body = dict(json.loads(text))
    (message,) = body.pop("messages")
    schema = body.pop("response_format")["json_schema"]["schema"]
    return ChatBody(body.pop("model"), message["content"], body, schema)


def answer_model(schema: dict[str, Any]) -> type[pydantic.BaseModel]:
    """The pydantic model of an object schema of scalars and enums: what Daft's
    ``return_format`` and Curator's ``response_format`` take instead of the schema. An enum
    is its scalar type with the ``enum`` written into the schema: Daft 0.7 cannot type a
    ``Literal`` field (its ``prompt()`` then panics casting the answer to a string), and an
    ``Enum`` class would put a ``$ref`` where the harness's schema has the ``enum``."""
    if schema.get("type") != "object":
        raise ValueError(f"the answer schema is not an object: {schema!r}")
    required = set(schema.get("required", ()))
    fields: dict[str, Any] = {}
    for name, field in schema["properties"].items():
        if field.get("type") not in JSON_TYPES:
            raise ValueError(f"answer field {name!r} has a type this model cannot take: {field!r}")
        kind: Any = JSON_TYPES[field["type"]]
        if "enum" in field:  # in the schema sent, as the harness's; not a Literal (see above)
            kind = Annotated[kind, pydantic.Field(json_schema_extra={"enum": field["enum"]})]
        fields[name] = (kind, ...) if name in required else (kind | None, None)
    return pydantic.create_model("Output", **fields)
