"""A local fsspec filesystem that counts storage requests, for tests of what reads cost.

``SnapshotStore(counting_url(path))`` reads the same files as ``SnapshotStore(str(path))``
and counts every call that would be one request on an object store (a GET, a LIST, a
HEAD, a PUT...) by its method name; a call made inside another (``cat_file`` opening the
file) is not counted again. Its protocol is not one that renames atomically, so writes go
the object-store way (one PUT): use it for readers.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

PROTOCOL = "counting"
_REQUESTS = (
    "cat_file",
    "pipe_file",
    "_open",
    "ls",
    "info",
    "find",
    "exists",
    "modified",
    "mv",
    "rm_file",
    "rm",
)


class CountingFileSystem(LocalFileSystem):
    protocol = (PROTOCOL,)
    requests: ClassVar[Counter[str]] = Counter()
    _depth = threading.local()

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        text = str(path)
        if text.startswith(f"{PROTOCOL}://"):
            text = text[len(PROTOCOL) + 3 :]
        return str(super()._strip_protocol(text))

    def unstrip_protocol(self, name: str) -> str:
        return f"{PROTOCOL}://{name}"


def _counted(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: CountingFileSystem, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(CountingFileSystem._depth, "value", 0)
        if depth == 0:
            CountingFileSystem.requests[name.lstrip("_")] += 1
        CountingFileSystem._depth.value = depth + 1
        try:
            return method(self, *args, **kwargs)
        finally:
            CountingFileSystem._depth.value = depth

    return wrapper


for _name in _REQUESTS:
    setattr(CountingFileSystem, _name, _counted(_name, getattr(LocalFileSystem, _name)))
fsspec.register_implementation(PROTOCOL, CountingFileSystem, clobber=True)


def counting_url(path: Path | str) -> str:
    return f"{PROTOCOL}://{Path(path).resolve()}"


@contextmanager
def counted_requests() -> Iterator[Counter[str]]:
    """The requests made inside the block, by kind (the counter fills as it runs)."""
    seen: Counter[str] = Counter()
    before = Counter(CountingFileSystem.requests)
    try:
        yield seen
    finally:
        seen.update(CountingFileSystem.requests - before)
