"""What the output is (``--output-format``) and how a run's rows join it, checked before
Spark starts.

A Parquet output is replaced whole by each run (``driver/publish.py``): write modes and
inline dead letters mean nothing there, so they are refused rather than ignored. A table
output (``driver/table_publish.py``) is added to in one commit per run; its dead letters
go to a table of their own or inline.
"""

from __future__ import annotations

import re
from typing import Protocol

from spark_jobs.defaults import (
    DEAD_LETTER_LAYOUT,
    DEAD_LETTER_LAYOUTS,
    OUTPUT_FORMATS,
    WRITE_MODE,
    WRITE_MODES,
)
from spark_jobs.spec.option_values import check

_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_PROPERTY = re.compile(r"token|secret|password|credential|access-key", re.IGNORECASE)
_PASSWORD_IN_URL = re.compile(r"://[^/@\s]*:[^/@\s]*@")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
STATUS_COLUMN = "_status"
ENRICHED, DEAD_LETTER = "enriched", "dead_letter"
"""The values of an inline outcome's ``_status``: never null, so never an all-null column."""
INLINE_COLUMNS = (STATUS_COLUMN, "_error", "_attempts")
"""The columns inline dead letters add to a table: ``enriched`` or ``dead_letter``, the
error (``ClassName: message``, null for an enriched row), the attempts used."""


class OutputOptions(Protocol):
    @property
    def output_format(self) -> str: ...
    @property
    def write_mode(self) -> str: ...
    @property
    def dead_letter_layout(self) -> str: ...
    @property
    def interval_column(self) -> str: ...
    @property
    def retry_dead_letters(self) -> str | None: ...
    @property
    def iceberg_table(self) -> str | None: ...
    @property
    def iceberg_catalog(self) -> dict[str, str]: ...


def check_output_options(spec: OutputOptions) -> None:
    """SpecError naming the output option that is bad, or that does not fit the format."""
    for name, choices in (
        ("output_format", OUTPUT_FORMATS),
        ("write_mode", WRITE_MODES),
        ("dead_letter_layout", DEAD_LETTER_LAYOUTS),
    ):
        value = getattr(spec, name)
        check(value in choices, name, f"must be one of {', '.join(choices)}, got {value!r}")
    if spec.output_format == "parquet":
        for name, default in (
            ("write_mode", WRITE_MODE),
            ("dead_letter_layout", DEAD_LETTER_LAYOUT),
        ):
            check(
                getattr(spec, name) == default,
                name,
                "applies to a table output (--output-format delta or iceberg); a Parquet output is "
                "replaced whole by each run, its dead letters in dead_letters/",
            )
        return
    check(
        bool(_COLUMN.match(spec.interval_column)) and spec.interval_column not in INLINE_COLUMNS,
        "interval_column",
        f"must be a column name (letters, digits, _), got {spec.interval_column!r}",
    )
    _check_no_secrets(spec.iceberg_catalog)
    if spec.iceberg_table is not None:
        check(
            bool(_IDENTIFIER.match(spec.iceberg_table)),
            "iceberg_table",
            f"must be namespace.table (letters, digits, _), got {spec.iceberg_table!r}",
        )
    check(
        spec.retry_dead_letters is None,
        "retry_dead_letters",
        "reads the dead letters of a Parquet output; not with --output-format "
        f"{spec.output_format}",
    )


def _check_no_secrets(catalog: dict[str, str]) -> None:
    """Catalog properties travel in the spec (to every executor, into the command line
    from Airflow): a secret among them is refused, naming the variable that carries it
    instead (pyiceberg reads ``PYICEBERG_CATALOG__ENRICHMENT__<PROPERTY>`` itself)."""
    for name, value in catalog.items():
        property_part = name.replace(".", "__").replace("-", "_").upper()  # pyiceberg's
        variable = f"PYICEBERG_CATALOG__ENRICHMENT__{property_part}"
        check(
            not _SECRET_PROPERTY.search(name) and not _PASSWORD_IN_URL.search(str(value)),
            "iceberg_catalog",
            f"{name} holds a secret: set it in the environment variable {variable} instead",
        )
