"""A folder of the current user alone, held open, and the private folder where the Python
workers of one executor share their rate files. (The driver JVM's class archives live in
such a folder too, one others may read: ``session/class_archive.py``.)

The tasks of an executor are separate Python processes (children of one
``pyspark.daemon``); they pace together through a small file per API
(``rate_sharing.py``). At a predictable path in the shared temp folder another local user
could plant those files, or a symlink to a file of ours, ahead of the job: a schedule that
stalls every send, or writes through a link into whatever it names. So they live in one
folder of the current user only, ``resumable-enrichment-rate-<uid>``, under Spark's own
local dir for the executor when the worker was given one (``SPARK_LOCAL_DIRS``, which
Spark sets for its Python workers) and under the temp folder otherwise:

* the folder is created ``0700``; one that exists with another owner, with access for
  group or others, or as a symlink or a file is refused, with a message saying which
  (the tasks then pace alone);
* it is held open, and every file is opened relative to it with ``O_NOFOLLOW``, created
  with ``O_CREAT | O_EXCL`` and ``0600``; a file that is a symlink, not a regular file,
  not ours, open to others or hard-linked elsewhere is never used: it is replaced, with a
  warning naming its path.

What is trusted is the folder's parent (the temp folder, or Spark's local dir) and,
inside the folder, what this user's own processes wrote; the rate files' contents are
still checked where they are read, as a torn or corrupt file must not stop a task.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import stat
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

FOLDER_PREFIX = "resumable-enrichment-rate-"
"""The per-user folder's name, before the user's uid."""
_NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_SHUT = 0o077
"""Mode bits that must be clear: group and others may neither read, write nor enter."""
_SHUT_READABLE = 0o022
"""Mode bits that must be clear where others may read: group and others may not write."""


class UnsafeFolder(OSError):
    """The private folder exists but is not this user's alone; it is not used."""


class PrivateFolder:
    """A folder only the current user can use, held open: its files are opened through
    it, never through a path another user could redirect."""

    def __init__(self, fd: int, path: Path, shut: int = _SHUT) -> None:
        self._fd = fd
        self.path = path
        self._shut = shut  # the mode bits that must be clear, on the folder and its files

    @classmethod
    def open(cls, path: Path, *, others_may_read: bool = False) -> PrivateFolder:
        """``path`` (created ``0700`` when absent); raises UnsafeFolder unless it is a
        folder (not a symlink) of the current user that no one else may enter, or, with
        ``others_may_read``, that no one else may write (its files likewise)."""
        shut = _SHUT_READABLE if others_may_read else _SHUT
        return cls(_open_folder(str(path), None, path, shut), path, shut)

    def subfolder(self, name: str) -> PrivateFolder:
        """The private folder ``name`` inside this one, checked as :meth:`open` does."""
        path = self.path / name
        return PrivateFolder(_open_folder(name, self._fd, path, self._shut), path, self._shut)

    def names(self) -> list[str]:
        """What the folder holds, read through the folder held open."""
        return os.listdir(self._fd)

    def untrusted(self, name: str) -> str | None:
        """Why ``name`` here is not the user's own private regular file (a symlink, a
        folder, another's, open to others, hard-linked); None when it is, or is absent."""
        try:
            fd = os.open(name, os.O_RDONLY | _NO_FOLLOW, dir_fd=self._fd)
        except FileNotFoundError:
            return None
        except OSError:
            return _planted(name, self._fd, self._shut)
        try:
            return _not_private(os.fstat(fd), regular=True, shut=self._shut)
        finally:
            os.close(fd)

    def open_file(self, name: str) -> int:
        """A descriptor of ``name`` (read-write; created ``0600`` when absent). A file
        there that is not the user's own private regular file is replaced, with a
        warning naming it."""
        fd = self._open_own(name, os.O_RDWR)
        if fd is not None:
            return fd
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # one worker creates or replaces it
        try:
            fd = self._open_own(name, os.O_RDWR)
            if fd is not None:
                return fd
            problem = _planted(name, self._fd, self._shut)
            if problem is not None:
                logger.warning("%s: %s, not ours to trust; replacing it", self.path / name, problem)
                _remove(name, self._fd, self.path / name)
            created = os.O_RDWR | os.O_CREAT | os.O_EXCL | _NO_FOLLOW
            return os.open(name, created, 0o600, dir_fd=self._fd)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def open_existing(self, name: str) -> int | None:
        """A read-only descriptor of ``name`` if it is the user's own private regular
        file; None if it is absent or not (it is never created nor replaced here)."""
        return self._open_own(name, os.O_RDONLY)

    def close(self) -> None:
        os.close(self._fd)

    def _open_own(self, name: str, mode: int) -> int | None:
        try:
            fd = os.open(name, mode | _NO_FOLLOW, dir_fd=self._fd)
        except OSError:  # absent, a symlink (ELOOP), a folder...
            return None
        if _not_private(os.fstat(fd), regular=True, shut=self._shut) is None:
            return fd
        os.close(fd)
        return None


def _open_folder(name: str, parent: int | None, path: Path, shut: int) -> int:
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        pass
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NO_FOLLOW, dir_fd=parent)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        link = stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
        what = "a symlink" if link else "a file"
        raise UnsafeFolder(f"{path}: {what}, not a private folder; not using it") from None
    problem = _not_private(os.fstat(fd), regular=False, shut=shut)
    if problem is not None:
        os.close(fd)
        raise UnsafeFolder(f"{path}: {problem}, not private to uid {os.getuid()}; not using it")
    return fd


def _not_private(info: os.stat_result, *, regular: bool, shut: int) -> str | None:
    """What makes a file (or folder) not this user's alone (``shut``: the mode bits that
    must be clear); None when it is."""
    if regular and not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_uid != os.getuid():
        return f"owned by uid {info.st_uid}"
    if info.st_mode & shut:
        return f"mode {stat.S_IMODE(info.st_mode):04o} lets others in"
    if regular and info.st_nlink != 1:
        return f"{info.st_nlink} hard links"
    return None


def _planted(name: str, parent: int, shut: int) -> str | None:
    """What is at ``name`` in place of the user's own private regular file (None:
    nothing is there)."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return "a symlink"
    if stat.S_ISDIR(info.st_mode):
        return "a folder"
    return _not_private(info, regular=True, shut=shut) or "a file that cannot be opened"


def _remove(name: str, parent: int, path: Path) -> None:
    try:
        os.unlink(name, dir_fd=parent)
    except IsADirectoryError:
        raise UnsafeFolder(f"{path}: a folder where a file goes; not using it") from None


def base_folder() -> Path:
    """Spark's local dir for this executor, the first of ``SPARK_LOCAL_DIRS`` that is a
    folder (the same for every worker of the executor), else the temp folder."""
    for entry in os.environ.get("SPARK_LOCAL_DIRS", "").split(","):
        if entry.strip() and os.path.isdir(entry.strip()):
            return Path(entry.strip())
    return Path(tempfile.gettempdir())


def executor_folder(kind: str, key: str) -> PrivateFolder | None:
    """The private folder this executor's Python workers share for ``kind`` of file about
    ``key``; None when the executor cannot be told apart (no ``/proc`` entry for the
    daemon). Raises OSError (UnsafeFolder: the reason) when it cannot be used."""
    daemon = os.getppid()  # pyspark.daemon: one per executor (and per Spark application)
    try:
        born = os.stat(f"/proc/{daemon}").st_ctime  # a reused pid is another executor
    except OSError:
        return None
    digest = hashlib.sha256(f"{kind} {key}".encode()).hexdigest()[:16]
    root = PrivateFolder.open(base_folder() / f"{FOLDER_PREFIX}{os.getuid()}")
    try:
        return root.subfolder(f"{daemon}-{born:.0f}-{digest}")
    finally:
        root.close()
