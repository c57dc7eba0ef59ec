"""The run's request budget (``--max-requests``) as a ledger partitions claim chunks from.

An equal share per partition strands budget: a skewed partition stops while others
finish with their shares unspent, and only the partitions running at once spend at all.
So the budget lives on the snapshot storage, cut into numbered chunks of
:func:`chunk_size` requests, and a partition that needs to call claims the next chunk by
creating its file exclusively (a local ``link``, an S3 ``If-None-Match: *`` PUT). A file
holds no count to update, so concurrent claimers need no lock: each chunk has one
owner, and the chunks add up to the budget exactly, so the run never sends more::

    <namespace>/budget/<run_id>/chunk-000012     claimed by one attempt
    <namespace>/budget/<run_id>/left-<token8>    what a finished partition did not spend
    <namespace>/budget/<run_id>/took-<token8>    ...taken by another partition

A partition that finishes with part of a chunk unspent gives it back (``left-``);
once every chunk is claimed, a claimer lists the ledger and takes a returned part
(``took-``). Unspent and not given back, and so left unused when the run stops, is at
most one chunk per attempt still running or failed (a Spark retry claims afresh: what
a failed attempt claimed counts as spent, the safe side). Claims are few: about
:data:`CHUNKS_PER_SLOT` per task slot plus one per partition, one request each, and a
listing at an attempt's first claim and whenever every chunk is gone. The ledger is per
run: a retried task of the same run continues it, the next run starts its own.

Exclusive creation is atomic on local disks and on S3 (a conditional PUT); on other
fsspec stores it is a check then a write, where a race could grant a chunk twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import uuid

from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from .documents import read_document
from .paths import basename, encode_component
from .storage import list_entries, write_new_file

logger = logging.getLogger(__name__)

BUDGET_DIR = "budget"
_RETURNED = re.compile(r"left-([0-9a-f]{8})")
_OFFER_BYTES = 1024  # {"requests": N}: larger files are refused unread
CHUNKS_PER_SLOT = 8
"""Chunks per task slot: enough that a skewed partition keeps claiming while others
finish, few enough that a claim (one storage request) is rare."""


def chunk_size(max_requests: int, running: int) -> int:
    """Requests per chunk for a budget shared by ``running`` partitions at once."""
    return max(1, -(-max_requests // (CHUNKS_PER_SLOT * running)))


def create_exclusively(fs: AbstractFileSystem, directory: str, name: str, data: bytes) -> bool:
    """Create ``directory/name`` holding ``data`` unless it exists; whether this call did.

    Locally the bytes go to a private temporary file first, linked into place: a reader
    never sees the file half written, and ``link`` fails if the name is taken.
    """
    final = f"{directory}/{name}"
    if not isinstance(fs, LocalFileSystem):
        try:
            fs.pipe_file(final, data, mode="create")
        except FileExistsError:
            return False
        return True
    temp = f"{name}.{uuid.uuid4().hex}.tmp"
    write_new_file(fs, directory, temp, data)
    try:
        os.link(f"{directory}/{temp}", final)
    except FileExistsError:
        return False
    finally:
        os.unlink(f"{directory}/{temp}")
    return True


class BudgetLedger:
    """One run's ledger of ``total`` requests in chunks of ``chunk``; blocking I/O (call it
    from a thread). One instance per attempt: it remembers where its claims got to."""

    def __init__(
        self, fs: AbstractFileSystem, namespace_path: str, run_id: str, total: int, chunk: int
    ) -> None:
        if total < 1 or chunk < 1:
            raise ValueError(f"need a budget and chunk of at least 1, got {total!r}, {chunk!r}")
        self._fs = fs
        self._directory = f"{namespace_path}/{BUDGET_DIR}/{encode_component('run_id', run_id)}"
        self.total, self.chunk = total, chunk
        self.chunks = -(-total // chunk)
        self._next: int | None = None  # the lowest chunk this attempt has not tried yet

    @classmethod
    def at(
        cls, snapshot_dir: str, namespace_path: str, run_id: str, total: int, chunk: int
    ) -> BudgetLedger:
        """The ledger of the namespace at ``namespace_path`` under ``snapshot_dir``."""
        fs, _ = url_to_fs(snapshot_dir)
        return cls(fs, namespace_path, run_id, total, chunk)

    def claim(self, owner: str) -> int:
        """Requests granted to ``owner`` (named in the claim, for a reader): the next free
        chunk, else a part another partition gave back; 0 when the budget is spent."""
        if self._next is None:
            taken = self._names()
            self._next = next(i for i in range(self.chunks + 1) if _chunk(i) not in taken)
        while self._next < self.chunks:
            index, self._next = self._next, self._next + 1
            if create_exclusively(self._fs, self._directory, _chunk(index), owner.encode()):
                return min(self.chunk, self.total - index * self.chunk)
        return self._take_returned(owner)

    def give_back(self, requests: int) -> None:
        """Offer ``requests`` this attempt claimed and will not spend to the others."""
        if requests > 0:
            data = json.dumps({"requests": requests}).encode()
            create_exclusively(self._fs, self._directory, f"left-{uuid.uuid4().hex[:8]}", data)

    def _take_returned(self, owner: str) -> int:
        names = self._names()
        for name in sorted(names):
            returned = _RETURNED.fullmatch(name)
            token = returned.group(1) if returned else None
            if token is None or f"took-{token}" in names:
                continue
            took = create_exclusively(self._fs, self._directory, f"took-{token}", owner.encode())
            if took and (granted := self._returned(name)):
                return granted
        return 0

    def _returned(self, name: str) -> int:
        """The requests a ``left-`` file offers; 0 for one that cannot be read (its
        requests go unspent rather than risk spending more than the budget)."""
        try:
            path = f"{self._directory}/{name}"
            requests = read_document(self._fs, path, name, _OFFER_BYTES)["requests"]
        except (OSError, ValueError, KeyError, TypeError) as error:  # ManifestError too
            logger.warning("request budget: ignoring unreadable %s: %s", name, error)
            return 0
        if isinstance(requests, int) and 0 < requests <= self.chunk:
            return requests
        logger.warning("request budget: ignoring %s offering %r requests", name, requests)
        return 0

    def _names(self) -> set[str]:
        return {basename(entry["name"]) for entry in list_entries(self._fs, self._directory)}


def discard_other_runs(snapshot_dir: str, namespace_path: str, run_id: str) -> None:
    """Delete the ledgers of earlier runs (each run has its own budget). Only for the
    driver holding the namespace's lease: no other run's task claims any more."""
    fs, _ = url_to_fs(snapshot_dir)
    keep = encode_component("run_id", run_id)
    for entry in list_entries(fs, f"{namespace_path}/{BUDGET_DIR}"):
        if basename(entry["name"]) != keep:
            with contextlib.suppress(FileNotFoundError):
                fs.rm(entry["name"], recursive=True)


def _chunk(index: int) -> str:
    return f"chunk-{index:06d}"
