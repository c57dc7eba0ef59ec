"""A counting filesystem for snapshot tests: a local directory that behaves like an object
store (no rename: every file appears with one PUT) and records every request it serves."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem


@dataclass(frozen=True)
class Request:
    """One storage request: its type (GET, GET-range, PUT, LIST, DELETE), path and bytes."""

    kind: str
    path: str
    size: int = 0


class CountingFileSystem(AbstractFileSystem):
    """Delegates to the local filesystem and appends every request to :attr:`requests`.

    Its protocol is not one that renames atomically, so the snapshot store writes each
    file with a single ``pipe_file``, as on S3: the counts are those of an object store.
    """

    protocol = "counting"
    cachable = False  # each test gets its own counter

    def __init__(self) -> None:
        super().__init__()
        self._local = LocalFileSystem()
        self.requests: list[Request] = []

    def count(self, since: int = 0, under: str = "") -> Counter[str]:
        """Requests by type from index ``since`` on, for paths containing ``under``."""
        return Counter(r.kind for r in self.requests[since:] if under in r.path)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **_: Any):
        kind = "GET" if start is None and end is None else "GET-range"
        data = self._local.cat_file(path, start=start, end=end)
        self.requests.append(Request(kind, path, len(data)))
        return data

    def pipe_file(self, path: str, value: bytes, **_: Any) -> None:
        self.requests.append(Request("PUT", path, len(value)))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(value)

    def ls(self, path: str, detail: bool = True, **_: Any):
        self.requests.append(Request("LIST", path))
        return self._local.ls(path, detail=detail)

    def find(self, path: str, maxdepth=None, withdirs=False, detail=False, **_: Any):
        self.requests.append(Request("LIST", path))
        return self._local.find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail)

    def info(self, path: str, **_: Any):
        self.requests.append(Request("HEAD", path))
        return self._local.info(path)

    def rm_file(self, path: str) -> None:
        self.requests.append(Request("DELETE", path))
        self._local.rm_file(path)

    def rm(self, path, recursive: bool = False, maxdepth=None) -> None:
        """One request however many paths (S3's DeleteObjects takes up to 1 000 keys)."""
        self.requests.append(Request("DELETE", str(path)))
        self._local.rm(path, recursive=recursive)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        self._local.makedirs(path, exist_ok=exist_ok)  # object stores have no directories

    def modified(self, path: str):
        return self._local.modified(path)
