"""``SpecError``: a job spec the job refuses, from a flag, a spec file or the input.

Its own module, importing nothing, because every layer that checks a spec raises it (the
option parsers, the spec, the input reader, the Spark session, the run's failure rules)
and the job's entry point catches it to exit with ``ExitStatus.BAD_OPTIONS`` (while
parsing) or ``CANNOT_RUN`` (once running); none of them should import the others for it.
"""

from __future__ import annotations


class SpecError(ValueError):
    """A bad option or spec file; the message names the option."""
