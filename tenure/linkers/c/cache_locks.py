"""Locks on the keys of the compile cache.

Every read or change of an entry of :mod:`tenure.linkers.c.cache` happens
under the lock of its key: :class:`KeyLock` on :func:`lock_path` (``<key>.lock``
beside the entry) between processes, and first :func:`key_guard` between the
threads of this process (the file lock alone would let a second thread
import a second copy of what the first just built).

A forked child has only the thread that forked: the guards and file locks
other threads of the parent held are replaced or closed in the child (see
``_after_fork_in_child``), so it never waits on a lock nobody will release.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from pathlib import Path

from tenure.linkers.c.cache_dirs import FILE_MODE, NOFOLLOW, unlink_quietly

try:
    import fcntl as _fcntl
except ImportError:  # Windows: the polling lock below takes over
    _fcntl = None

__all__ = ["STALE_LOCK_S", "KeyLock", "key_guard", "lock_path"]

#: a polling lock file older than this is taken to belong to a dead process
STALE_LOCK_S = 600.0

_key_guards: dict[str, threading.Lock] = {}
_key_guards_lock = threading.Lock()
#: the file locks this process holds, with the thread holding each
_held_file_locks: dict["KeyLock", int] = {}


def _after_fork_in_child() -> None:
    """A forked child has only the thread that forked: locks that other
    threads held stay held forever there.  It gets new guards, and closes its
    copies of the file locks those threads held (flock belongs to the open
    file, which the copies would keep locked after the parent releases it)."""
    global _key_guards_lock
    _key_guards_lock = threading.Lock()
    _key_guards.clear()
    me = threading.get_ident()
    for lock, holder in list(_held_file_locks.items()):
        if holder != me:
            lock._forget_in_child()
            del _held_file_locks[lock]


os.register_at_fork(after_in_child=_after_fork_in_child)


def key_guard(key: str) -> threading.Lock:
    # Threads of one process building the same key wait for each other here
    # (the file lock alone would let the second import a second copy).
    with _key_guards_lock:
        return _key_guards.setdefault(key, threading.Lock())


def lock_path(directory: Path, key: str) -> Path:
    return directory / f"{key}.lock"


class KeyLock:
    """An exclusive lock between processes (and threads) on one cache key.

    With ``fcntl`` it is ``flock`` on the lock file: the kernel frees it when
    the holder dies, so it never goes stale.  Without ``fcntl`` the file's
    existence is the lock (``O_CREAT|O_EXCL``), polled, and a lock file older
    than ``stale_after`` seconds is taken to belong to a crashed process.

    The holder deletes the lock file on release, so lock files do not pile up.
    """

    def __init__(self, path: Path, *, blocking: bool = True, stale_after: float = STALE_LOCK_S,
                 poll_s: float = 0.02):
        self.path = str(path)
        self.blocking = blocking
        self.stale_after = stale_after
        self.poll_s = poll_s
        self._fd: int | None = None
        self._token = ""

    def acquire(self) -> bool:
        """Take the lock; False only when not ``blocking`` and someone holds it."""
        if _fcntl is not None:
            return self._acquire_flock()
        return self._acquire_polling()

    def release(self) -> None:
        if _fcntl is not None:
            # Unlink while still holding it: a waiter that wakes up holding the
            # unlinked file sees that the path now names another (or no) file,
            # and starts over (see _acquire_flock).
            unlink_quietly(self.path)
        elif self._owns_lock_file():
            unlink_quietly(self.path)
        if self._fd is not None:
            _held_file_locks.pop(self, None)
            os.close(self._fd)
            self._fd = None

    def _forget_in_child(self) -> None:
        """In a forked child, for a lock a thread of the parent holds: close
        this copy of its file (the parent's release then frees it) without
        unlinking the file, which is the parent's to remove."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc_info):
        self.release()

    def _acquire_flock(self) -> bool:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | NOFOLLOW, FILE_MODE)
            try:
                _fcntl.flock(fd, _fcntl.LOCK_EX | (0 if self.blocking else _fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return False
            if _same_file(fd, self.path):
                self._fd = fd
                _held_file_locks[self] = threading.get_ident()
                return True
            os.close(fd)  # the previous holder unlinked it: lock the current file

    def _acquire_polling(self) -> bool:
        self._token = f"{os.getpid()} {threading.get_ident()} {secrets.token_hex(8)}"
        while True:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW,
                             FILE_MODE)
            except FileExistsError:
                if self._break_if_stale():
                    continue
                if not self.blocking:
                    return False
                time.sleep(self.poll_s)
                continue
            os.write(fd, self._token.encode())
            os.close(fd)
            return True

    def _break_if_stale(self) -> bool:
        try:
            age = time.time() - os.stat(self.path).st_mtime
        except FileNotFoundError:
            return True  # released meanwhile: try again at once
        if age <= self.stale_after:
            return False
        # Rename before deleting, so of several waiters that all saw the stale
        # file only one removes it (the others' rename fails).
        grave = f"{self.path}.stale-{secrets.token_hex(4)}"
        try:
            os.rename(self.path, grave)
        except FileNotFoundError:
            return True
        unlink_quietly(grave)
        return True

    def _owns_lock_file(self) -> bool:
        try:
            with open(self.path, encoding="utf-8") as file:
                return file.read() == self._token
        except OSError:
            return False


def _same_file(fd: int, path: str) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)
