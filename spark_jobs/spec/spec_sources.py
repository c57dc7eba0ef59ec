"""Where a job's options come from: a ``--spec`` file and the command line, merged.

Flags win over the spec file; HTTP enricher settings may sit at the top level of the
spec file or in its ``http:`` section, as they do on the command line; flags given as
text (JSON, ``NAME=VALUE``) become the values the spec file would hold. ``job_cli.py``
defines the flags; this module only merges what they and the file say.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from spark_jobs.spec.http_options import ATTEMPT_DEADLINE_SHARES
from spark_jobs.spec.input_options import check_input_options, parse_input_option
from spark_jobs.spec.option_values import parse_response_field
from spark_jobs.spec.spec_error import SpecError

# Flags that are HTTP enricher settings: they travel in ``http``, like the spec file's.
HTTP_FLAGS = (
    "method",
    "body_template",
    "headers",
    "secret_headers",
    "token_env",
    "requests_per_second",
    *ATTEMPT_DEADLINE_SHARES,
    "max_response_bytes",
    "hedge_after",
    "resend_stragglers",
    "follow_redirects",
)


def merge_options(args: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The spec's values from parsed flags (``args``, consumed) over the ``--spec`` file
    they name, and that file's path (None without one)."""
    values: dict[str, Any] = {}
    spec_path = args.pop("spec", None)
    _parse_http_flags(args)
    if spec_path:
        values.update(load_spec_file(spec_path))
    http = dict(values.get("http") or {})
    for http_option in HTTP_FLAGS:  # top level in a spec file too, as on the command line
        for source in (values, args):
            if http_option in source:
                http[http_option] = source.pop(http_option)
    if http:
        values["http"] = http
    if "response_fields" in args:
        args["response_fields"] = dict(parse_response_field(f) for f in args["response_fields"])
    if "input_options" in args:  # over the spec file's, option by option
        flags = dict(parse_input_option(o) for o in args["input_options"])
        args["input_options"] = {**check_input_options(values.get("input_options", {})), **flags}
    if "iceberg_catalog" in args:  # over the spec file's, property by property
        pairs = [item.partition("=") for item in args["iceberg_catalog"]]
        if any(not name or not equals for name, equals, _ in pairs):
            raise SpecError("--iceberg-catalog: expected KEY=VALUE (e.g. type=rest)")
        flags = {name: value for name, _, value in pairs}
        args["iceberg_catalog"] = {**values.get("iceberg_catalog", {}), **flags}
    values.update(args)
    return values, spec_path


def _parse_http_flags(args: dict[str, Any]) -> None:
    """The HTTP flags given as text (JSON, ``NAME=VALUE``) as the spec file's values."""
    for dest in ("body_template", "model"):
        if dest in args:
            try:
                args[dest] = json.loads(args[dest])
            except ValueError as error:
                flag = "--" + dest.replace("_", "-")
                raise SpecError(f"{flag}: not JSON ({error})") from None
    for dest, flag, value in (
        ("headers", "--header", "VALUE"),
        ("secret_headers", "--secret-header", "VARIABLE"),
    ):
        pairs = [item.partition("=") for item in args.get(dest, [])]
        for item, (name, equals, _) in zip(args.get(dest, []), pairs, strict=True):
            if not (name.strip() and equals):
                raise SpecError(f"{flag}: expected NAME={value}, got {item!r}")
        if dest in args:
            args[dest] = {name.strip(): text for name, _, text in pairs}


def load_spec_file(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise SpecError(f"--spec: no such file {path}")
    try:
        data = yaml.safe_load(file.read_text())  # YAML is a superset of JSON
    except yaml.YAMLError as error:
        raise SpecError(f"--spec {path}: not valid YAML/JSON: {error}") from None
    if not isinstance(data, dict):
        raise SpecError(f"--spec {path}: expected a mapping of options at the top level")
    return {key.replace("-", "_"): value for key, value in data.items()}
