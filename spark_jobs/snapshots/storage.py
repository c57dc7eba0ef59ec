"""The few filesystem primitives the commit protocol needs, uniform across fsspec backends.

Atomicity differs per backend: local disks and HDFS rename atomically, so a manifest is
written under a temporary name and renamed into place; object stores (S3, GCS, ...) have
no atomic rename but a single PUT is atomic, so the manifest is uploaded in one request.
Listings always bypass fsspec's listing cache because other attempts, possibly on other
hosts, write into the same directories.
"""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from .paths import TEMP_SUFFIX

_RENAME_ATOMIC_PROTOCOLS = frozenset({"file", "local", "hdfs", "arrow_hdfs", "viewfs"})


def has_atomic_rename(fs: AbstractFileSystem) -> bool:
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    return bool(protocols & _RENAME_ATOMIC_PROTOCOLS)


#: Snapshots hold input rows and enrichment values: only their owner may read them.
FILE_MODE = 0o600
DIR_MODE = 0o700


def _write(fs: AbstractFileSystem, path: str, data: bytes) -> None:
    if isinstance(fs, LocalFileSystem):
        # Without fsync a power loss could persist the manifest's rename before the bytes
        # of the files it references; checksums would catch it, but progress would be lost.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    else:
        fs.pipe_file(path, data)


def _makedirs(fs: AbstractFileSystem, directory: str) -> None:
    if isinstance(fs, LocalFileSystem):
        missing = []  # os.makedirs gives its mode to the last level only
        while directory and not os.path.isdir(directory):
            missing.append(directory)
            directory = os.path.dirname(directory)
        for level in reversed(missing):
            with contextlib.suppress(FileExistsError):  # another attempt made it first
                os.mkdir(level, DIR_MODE)
    else:
        fs.makedirs(directory, exist_ok=True)


def _fsync_dir(fs: AbstractFileSystem, directory: str) -> None:
    """Persist a rename on local disks (a directory entry is data of the directory)."""
    if isinstance(fs, LocalFileSystem):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_new_file(fs: AbstractFileSystem, directory: str, name: str, data: bytes) -> None:
    """Write an immutable file whose name nobody references yet (a segment).

    A partial file left by a crash is harmless: no committed manifest names it, readers
    never look at it, and cleanup removes it after the grace period.
    """
    if has_atomic_rename(fs):
        _makedirs(fs, directory)
    _write(fs, f"{directory}/{name}", data)


def write_atomically(fs: AbstractFileSystem, directory: str, name: str, data: bytes) -> None:
    """Make ``directory/name`` appear complete or not at all (the manifest commit point)."""
    final = f"{directory}/{name}"
    if not has_atomic_rename(fs):
        fs.pipe_file(final, data)
        return
    _makedirs(fs, directory)
    temp = final + TEMP_SUFFIX
    _write(fs, temp, data)
    fs.mv(temp, final)
    _fsync_dir(fs, directory)


def list_entries(fs: AbstractFileSystem, directory: str) -> list[dict[str, Any]]:
    """Fresh one-level listing with details; a missing directory is simply empty.

    ``refresh=True`` matters: with only ``invalidate_cache``, a thread sharing the
    filesystem instance can re-fill the cache with its older listing in between.
    """
    fs.invalidate_cache(directory)
    try:
        entries: list[dict[str, Any]] = fs.ls(directory, detail=True, refresh=True)
        return entries
    except FileNotFoundError:
        return []


def list_files_recursive(fs: AbstractFileSystem, directory: str) -> list[dict[str, Any]]:
    """Fresh recursive listing of files (no directories) with details."""
    fs.invalidate_cache(directory)
    try:
        found = fs.find(directory, detail=True)
    except FileNotFoundError:
        return []
    return [info for info in found.values() if info.get("type") == "file"]


def modified_at(fs: AbstractFileSystem, info: dict[str, Any]) -> datetime | None:
    """Last modification time from a listing entry; ``None`` when the backend can't tell.

    Callers treat ``None`` as "too young to delete", the safe side.
    """
    value = info.get("mtime", info.get("LastModified"))
    if value is None:
        try:
            value = fs.modified(info["name"])
        except (NotImplementedError, FileNotFoundError):
            return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return None
