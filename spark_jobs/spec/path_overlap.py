"""Refusing an output that overlaps what the job reads or keeps, before any data moves.

Publishing removes older run folders under the output, and a fresh start discards a
namespace recursively: an output equal to, inside or around the input, the snapshot root
or the cache directory would let one of those deletions take data the job did not write
(a typo such as ``--output s3://bucket/data --input s3://bucket/data/day=1`` is enough).
Paths are compared by filesystem and normalised path (local ones resolved, symbolic links
included); a glob in the input counts from its last directory without a wildcard.
"""

from __future__ import annotations

import os
import posixpath
from urllib.parse import urlsplit

from spark_jobs.spec.spec_error import SpecError

_GLOB = frozenset("*?[{")


def _location(url: str) -> tuple[str, str]:
    """(scheme and authority, normalised path) of a local path or URL."""
    parts = urlsplit(url)
    if parts.scheme in ("", "file") or len(parts.scheme) == 1:  # a Windows drive letter
        local = parts.path if parts.scheme == "file" else url
        return "file", os.path.realpath(os.path.expanduser(_before_glob(local)))
    path = posixpath.normpath("/" + _before_glob(parts.path).lstrip("/"))
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}", path


def _before_glob(path: str) -> str:
    """``path`` up to its last directory without a glob character."""
    for index, char in enumerate(path):
        if char in _GLOB:
            return path[:index].rsplit("/", 1)[0] or "/"
    return path


def _overlap(a: str, b: str) -> bool:
    """Whether one path equals or contains the other."""
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def check_separate_paths(output: str, others: dict[str, str | None]) -> None:
    """SpecError naming both options when ``output`` equals, contains or lies inside one
    of ``others`` (option name -> path, None when the option is not given)."""
    where, path = _location(output)
    for option, other in others.items():
        if not other:
            continue
        other_where, other_path = _location(other)
        if where == other_where and _overlap(path, other_path):
            raise SpecError(
                f"--output {output!r} overlaps --{option.replace('_', '-')} {other!r}: "
                "publishing and cleanup delete under the output, so it must neither equal, "
                "contain nor lie inside what the job reads or keeps"
            )
