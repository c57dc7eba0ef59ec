"""A filesystem wrapper that counts storage requests, for the snapshot store's benchmark
and tests: it forwards to a local directory or to S3 and records every request.

Its protocol is not one that renames atomically, so the snapshot store writes each file
with one ``pipe_file``, as on S3: over a local directory the counts are an object store's.
Built directly (``CountingFileSystem(target)``) it keeps its own :attr:`requests`; opened
by URL (``SnapshotStore(counting_url(path))``, a local directory) its requests are seen by
:func:`counted_requests`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import fsspec
from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

PROTOCOL = "counting"


@dataclass(frozen=True)
class Request:
    """One storage request: its type (GET, GET-range, PUT, LIST, HEAD, DELETE), path, bytes."""

    kind: str
    path: str
    size: int = 0


class CountingFileSystem(AbstractFileSystem):
    """Forwards to ``target`` (the local filesystem by default) and appends every request
    to :attr:`requests`. A bulk ``rm`` is one request (S3's DeleteObjects: 1 000 keys)."""

    protocol = PROTOCOL
    cachable = False  # each user gets its own counter
    recorders: ClassVar[list[list[Request]]] = []
    """Lists that :func:`counted_requests` is filling: every instance's requests."""

    def __init__(self, target: AbstractFileSystem | None = None) -> None:
        super().__init__()
        self.target = target if target is not None else LocalFileSystem()
        self.requests = _RequestLog(self.recorders)

    def count(self, since: int = 0) -> Counter[str]:
        """Requests by type from index ``since`` on."""
        return Counter(r.kind for r in self.requests[since:])

    def written(self, since: int = 0) -> int:
        return sum(r.size for r in self.requests[since:] if r.kind == "PUT")

    def read(self, since: int = 0) -> int:
        return sum(r.size for r in self.requests[since:] if r.kind.startswith("GET"))

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **_: Any):
        kind = "GET" if start is None and end is None else "GET-range"
        try:
            data = self.target.cat_file(path, start=start, end=end)
        except FileNotFoundError:
            self.requests.append(Request(kind, path))  # a 404 is a request too
            raise
        self.requests.append(Request(kind, path, len(data)))
        return data

    def pipe_file(self, path: str, value: bytes, **_: Any) -> None:
        self.requests.append(Request("PUT", path, len(value)))
        if isinstance(self.target, LocalFileSystem):
            self.target.makedirs(self.target._parent(path), exist_ok=True)
        self.target.pipe_file(path, value)

    def ls(self, path: str, detail: bool = True, **_: Any):
        self.requests.append(Request("LIST", path))
        return self.target.ls(path, detail=detail, refresh=True)

    def find(self, path: str, maxdepth=None, withdirs=False, detail=False, **_: Any):
        self.requests.append(Request("LIST", path))
        return self.target.find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail)

    def info(self, path: str, **_: Any):
        self.requests.append(Request("HEAD", path))
        return self.target.info(path)

    def rm_file(self, path: str) -> None:
        self.requests.append(Request("DELETE", path))
        self.target.rm_file(path)

    def rm(self, path, recursive: bool = False, maxdepth=None) -> None:
        self.requests.append(Request("DELETE", str(path)))
        self.target.rm(path, recursive=recursive)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        if isinstance(self.target, LocalFileSystem):  # object stores have no directories
            self.target.makedirs(path, exist_ok=exist_ok)

    def invalidate_cache(self, path: str | None = None) -> None:
        self.target.invalidate_cache(path)

    def modified(self, path: str):
        return self.target.modified(path)


class _RequestLog(list[Request]):
    """An instance's requests, also handed to every recorder that is listening."""

    def __init__(self, recorders: list[list[Request]]) -> None:
        super().__init__()
        self._recorders = recorders

    def append(self, request: Request) -> None:
        super().append(request)
        for recorder in self._recorders:
            recorder.append(request)


fsspec.register_implementation(PROTOCOL, CountingFileSystem, clobber=True)


def counting_url(path: Path | str) -> str:
    """A URL of the local directory ``path`` whose filesystem counts its requests."""
    return f"{PROTOCOL}://{Path(path).resolve()}"


@contextmanager
def counted_requests() -> Iterator[Counter[str]]:
    """The requests of every counting filesystem made inside the block, by type (GET,
    GET-range, PUT, LIST, HEAD, DELETE), counted when the block ends."""
    seen: list[Request] = []
    counts: Counter[str] = Counter()
    CountingFileSystem.recorders.append(seen)
    try:
        yield counts
    finally:
        CountingFileSystem.recorders.remove(seen)
        counts.update(r.kind for r in seen)
