"""Namespace keys, path-component validation and the file names of the snapshot layout.

Every name that reaches storage goes through :func:`encode_component`, so a hostile or
malformed dag id, task id, interval or attempt id can never escape its namespace
(``..``, ``/``), hide a control character in a key, or produce a name that one
filesystem accepts and another rejects.  ``:`` and ``+`` (ISO-8601 intervals such as
``2026-11-20T00:00:00+00:00``) are legal in S3 keys but not in HDFS paths, so they are
percent-escaped the way Hive/Spark escape partition directories (``%3A``, ``%2B``).
``%`` itself is not an allowed input character, which makes the encoding injective:
two distinct values can never share a directory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ALLOWED = re.compile(r"[A-Za-z0-9_.:+-]+")
_ESCAPES = {":": "%3A", "+": "%2B"}
_ENCODED_CHARS = r"(?:[A-Za-z0-9_.-]|%3A|%2B)+"
_ENCODED = re.compile(_ENCODED_CHARS)
# ext4/XFS/HDFS limit a single name to 255 bytes; keep room for a temp suffix.
MAX_ENCODED_LENGTH = 200

PARTITION_DIR = re.compile(r"part-(\d{5,})")
#: The most partitions a job may have (``--partitions``); readers ignore directories of
#: higher numbers, which only a crafted namespace holds.
MAX_PARTITIONS = 100_000
MANIFESTS_DIR = "manifests"
SEGMENTS_DIR = "segments"
COMMITS_DIR = "commits"
TEMP_SUFFIX = ".tmp"
MANIFEST_NAME = re.compile(rf"manifest-(\d{{8,}})-({_ENCODED_CHARS})-[0-9a-f]{{8}}\.json")
#: ``commit-<input offset>-<epoch>-<attempt>-<token>.snap``: progress is in the name, so a
#: reader finds the newest commit from one listing.
COMMIT_NAME = re.compile(rf"commit-(\d{{12,}})-(\d{{8,}})-({_ENCODED_CHARS})-[0-9a-f]{{8}}\.snap")
COMMIT_PATH = re.compile(rf"{COMMITS_DIR}/{COMMIT_NAME.pattern}")
SEGMENT_PATH = re.compile(
    rf"{SEGMENTS_DIR}/(?:results|dead_letters)-{_ENCODED_CHARS}-[0-9a-f]{{32}}\.arrow"
)


def basename(path: str) -> str:
    """Last component of an fsspec path (always '/'-separated, maybe with a trailing '/')."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def encode_component(component: str, value: object) -> str:
    """Validate one path component and return its storage-safe spelling.

    Raises ``ValueError`` naming ``component`` and the offending ``value``.
    """
    if not isinstance(value, str):
        raise ValueError(f"invalid {component} {value!r}: expected a str")
    if not value:
        raise ValueError(f"invalid {component} {value!r}: must not be empty")
    if set(value) == {"."}:
        raise ValueError(f"invalid {component} {value!r}: '.' and '..' are not allowed")
    if not _ALLOWED.fullmatch(value):
        raise ValueError(
            f"invalid {component} {value!r}: only letters, digits and '_', '-', '.', ':', '+'"
            " are allowed (no '/', '\\', whitespace or control characters)"
        )
    encoded = value
    for char, escape in _ESCAPES.items():
        encoded = encoded.replace(char, escape)
    if len(encoded) > MAX_ENCODED_LENGTH:
        raise ValueError(
            f"invalid {component} {value!r}: longer than {MAX_ENCODED_LENGTH} characters"
            " once ':' and '+' are escaped"
        )
    return encoded


def decode_component(encoded: str) -> str | None:
    """Invert :func:`encode_component`; ``None`` for names this package did not write."""
    if not _ENCODED.fullmatch(encoded):
        return None
    value = encoded
    for char, escape in _ESCAPES.items():
        value = value.replace(escape, char)
    try:
        encode_component("name", value)
    except ValueError:
        return None
    return value


def partition_dir_name(partition: object) -> str:
    """``part-00007``: fixed width so listings sort naturally."""
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"invalid partition {partition!r}: expected an int >= 0")
    return f"part-{partition:05d}"


def manifest_name(epoch: int, attempt: str, token: str) -> str:
    """``manifest-00000012-<attempt>-<uuid8>.json``; ``token`` keeps attempts apart."""
    return f"manifest-{epoch:08d}-{encode_component('attempt', attempt)}-{token}.json"


def commit_path(input_offset: int, epoch: int, attempt: str, token: str) -> str:
    """Commit file path relative to the partition directory (format 2)."""
    attempt_name = encode_component("attempt", attempt)
    return f"{COMMITS_DIR}/commit-{input_offset:012d}-{epoch:08d}-{attempt_name}-{token}.snap"


def segment_path(kind: str, attempt: str, token: str) -> str:
    """Segment path relative to the partition directory, as stored in manifests."""
    return f"{SEGMENTS_DIR}/{kind}-{encode_component('attempt', attempt)}-{token}.arrow"


@dataclass(frozen=True)
class NamespaceKey:
    """Identifies one task run: ``<root>/<dag_id>/<task_id>/<interval_start>/``.

    Validated on construction so an invalid key fails where it is built, not deep in
    a Spark task when the first snapshot is written.
    """

    dag_id: str
    task_id: str
    interval_start: str

    def __post_init__(self) -> None:
        self.components()

    def components(self) -> tuple[str, str, str]:
        """The encoded directory names, outermost first."""
        return (
            encode_component("dag_id", self.dag_id),
            encode_component("task_id", self.task_id),
            encode_component("interval_start", self.interval_start),
        )
