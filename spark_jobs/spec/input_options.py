"""What the input is, as options say it: Spark reader options and the key columns.

Standard library only, so the spec validates them before Spark starts. The job reads CSV
per RFC 4180 (a doubled quote escapes a quote, quoted values may hold separators and line
breaks) and every format PERMISSIVE with a corrupt-record column, so a row the reader
cannot parse becomes a dead letter naming its line instead of being dropped or altered.
Reader options the user passes (``input_options``) go on top, except those that would
silently drop or rewrite rows, or that the job needs to set itself: those are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spark_jobs.spec.spec_error import SpecError

#: The column carrying a row the reader could not parse (its raw text).
CORRUPT_RECORD = "_corrupt_record"

#: The job's own reader options per format (Spark option names, case-insensitive).
READER_DEFAULTS: dict[str, dict[str, str]] = {
    "csv": {
        "header": "true",
        "multiLine": "true",  # a quoted value may span lines (RFC 4180)
        "quote": '"',
        "escape": '"',  # RFC 4180: "" inside quotes is one quote (Spark's default is \)
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": CORRUPT_RECORD,
    },
    "jsonl": {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_RECORD},
    "parquet": {},
}

#: Options refused, lower-cased, with why: they would drop or rewrite rows without a word,
#: or they are what makes a malformed row a dead letter.
REFUSED = {
    "mode": "the job reads PERMISSIVE so that a row it cannot parse becomes a dead letter "
    "naming its file and line (DROPMALFORMED would drop it, FAILFAST fail the run)",
    "columnnameofcorruptrecord": f"the job carries a malformed row's text in {CORRUPT_RECORD}",
    "inferschema": "type inference rewrites values (007 becomes 7); CSV cells are read as text",
    "ignorecorruptfiles": "it would skip unreadable files without a dead letter",
    "ignoremissingfiles": "it would skip files that vanish while read",
    "path": "--input names the input",
}


def check_input_options(options: Any) -> dict[str, str]:
    """``input_options`` as Spark reader options (text values), refused ones named."""
    if not isinstance(options, Mapping):
        raise SpecError(f"--input-option: expected a mapping of reader options, got {options!r}")
    checked = {}
    for name, value in options.items():
        if not isinstance(name, str) or not name:
            raise SpecError(f"--input-option: option names are text, got {name!r}")
        if name.lower() in REFUSED:
            raise SpecError(f"--input-option {name}: refused: {REFUSED[name.lower()]}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        if not isinstance(value, str | int | float):
            raise SpecError(f"--input-option {name}: expected a text value, got {value!r}")
        checked[name] = str(value)
    return checked


def parse_input_option(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` from the command line (the value may be empty or hold ``=``)."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise SpecError(f"--input-option: expected KEY=VALUE (e.g. sep=;), got {text!r}")
    return name, value


def reader_options(input_format: str, options: Mapping[str, str]) -> dict[str, str]:
    """The options the reader gets: the job's, then the user's (case-insensitive names)."""
    merged = {name.lower(): (name, value) for name, value in READER_DEFAULTS[input_format].items()}
    merged.update({name.lower(): (name, value) for name, value in options.items()})
    return dict(merged.values())


def reader_identity(input_format: str, options: Mapping[str, str]) -> dict[str, Any] | None:
    """How the input is parsed, for the job's fingerprint: a changed option that changes
    parsing reads other rows, so a resumed run must start fresh. None for JSON lines and
    Parquet read as they always were, so their existing snapshots still resume."""
    if input_format != "csv" and not options:
        return None
    effective = reader_options(input_format, options)
    return {"format": input_format, "options": {k.lower(): effective[k] for k in sorted(effective)}}


def key_column_value(value: Any) -> str | list[str]:
    """One key column as a string (as always: same fingerprint), several as a list; from
    ``"a,b"`` or ``["a", "b"]`` (none stays none: a required option, checked as such)."""
    if not value:
        unset: str | list[str] = value  # as given ("", [], None): the required check names it
        return unset
    columns = value.split(",") if isinstance(value, str) else value
    if not isinstance(columns, list | tuple) or not all(isinstance(c, str) for c in columns):
        raise SpecError(f"--key-column: expected a column or columns a,b, got {value!r}")
    columns = [c.strip() for c in columns]
    if not all(columns) or len(set(columns)) != len(columns):
        raise SpecError(f"--key-column: expected distinct non-empty column names, got {value!r}")
    return columns[0] if len(columns) == 1 else columns
