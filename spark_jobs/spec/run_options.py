"""The options that name a run and bound its hold on a namespace, checked before Spark starts.

``--run-id`` becomes part of storage paths (the run's budget ledger, its output folder)
and of log lines, so it must be one safe path component: ``../../x`` once moved the
staging folder that a failed run then deleted recursively. ``--lease-ttl`` is how long a
crashed run keeps others out: ``inf`` would keep them out for ever, so it is finite and at
most :data:`~spark_jobs.snapshots.lease.MAX_TTL_S`, which is also the furthest expiry a
reader believes (``lease.py``).
"""

from __future__ import annotations

import math
from typing import Protocol

from spark_jobs.snapshots.lease import MAX_TTL_S
from spark_jobs.snapshots.paths import encode_component
from spark_jobs.spec.option_values import check


class RunOptions(Protocol):
    @property
    def run_id(self) -> str | None: ...

    @property
    def lease_ttl(self) -> float: ...

    @property
    def lease_wait(self) -> float: ...


def check_run_options(spec: RunOptions) -> None:
    """SpecError naming ``--run-id``, ``--lease-ttl`` or ``--lease-wait`` when one is bad."""
    if spec.run_id is not None:
        try:
            encode_component("run_id", spec.run_id)
        except ValueError as error:
            check(False, "run_id", f"must be a single path component: {error}")
    for name, zero_allowed in (("lease_ttl", False), ("lease_wait", True)):
        value = getattr(spec, name)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        check(
            number and math.isfinite(value) and (value > 0 or (zero_allowed and value == 0)),
            name,
            f"must be a finite number of seconds {'>= 0' if zero_allowed else '> 0'}, "
            f"got {value!r}",
        )
    check(
        spec.lease_ttl <= MAX_TTL_S,
        "lease_ttl",
        f"must be at most {MAX_TTL_S:g} seconds (a crashed run keeps the namespace that "
        f"long), got {spec.lease_ttl!r}",
    )
