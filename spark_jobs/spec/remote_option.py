"""``--remote``, the Spark Connect URL, checked before anything connects.

A Connect URL may carry a token (``sc://host:443/;use_ssl=true;token=...``): such a URL
belongs in ``SPARK_REMOTE``, never in ``--remote`` or a spec file (a command line is
visible in ``ps``). How the job runs over Connect is ``session/connect.py``.
"""

from __future__ import annotations

from spark_jobs.launch import REMOTE_ENV, remote_secret
from spark_jobs.spec.spec_error import SpecError


def check_remote_option(remote: str | None) -> None:
    """SpecError for a ``--remote`` the job cannot use, naming the option."""
    if remote is None:
        return
    if not remote.startswith("sc://"):
        raise SpecError(f"remote: expected a Spark Connect URL sc://host:port, got {remote!r}")
    if remote_secret(remote):
        raise SpecError(
            f"remote: a token does not belong on the command line or in a spec file; put the "
            f"URL with its token in the environment variable {REMOTE_ENV} instead"
        )
