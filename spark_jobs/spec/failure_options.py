"""The options that decide when a run fails as a whole, checked before Spark starts.

``--systemic-threshold``, ``--max-dead-letters`` and ``--retry-dead-letters`` are read
by the driver once the partitions have run (``driver/run_failures.py``); a typo in one
must not cost a whole run first.
"""

from __future__ import annotations

import re
from typing import Protocol

from spark_jobs.spec.option_values import check, parse_error_classes
from spark_jobs.spec.spec_error import SpecError

_CEILING = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<percent>%?)$")


class FailureOptions(Protocol):
    @property
    def systemic_threshold(self) -> int: ...
    @property
    def max_dead_letters(self) -> str | int | None: ...
    @property
    def retry_dead_letters(self) -> str | None: ...


def check_failure_options(spec: FailureOptions) -> None:
    """Validate ``systemic_threshold`` and ``max_dead_letters`` (raises SpecError)."""
    threshold = spec.systemic_threshold
    check(
        isinstance(threshold, int) and not isinstance(threshold, bool) and threshold >= 0,
        "systemic_threshold",
        f"must be an integer >= 0, got {threshold!r}",
    )
    if spec.max_dead_letters is not None:
        dead_letter_limit(spec.max_dead_letters, 1)
    if spec.retry_dead_letters is not None:
        parse_error_classes(spec.retry_dead_letters)


def dead_letter_limit(ceiling: str | int, records_in: int) -> int:
    """The most dead letters allowed: ``N``, or ``P%`` of ``records_in`` (rounded down)."""
    match = _CEILING.match(str(ceiling).strip())
    if match is None or (match["percent"] and float(match["number"]) > 100):
        raise SpecError(
            f"--max-dead-letters: expected a count N or a share P% (0-100%), got {ceiling!r}"
        )
    if not match["percent"]:
        check("." not in match["number"], "max_dead_letters", f"a count is whole, got {ceiling!r}")
        return int(match["number"])
    return int(records_in * float(match["number"]) / 100)
