"""Where the compile cache lives, and whether to trust it.

This module decides which directory :mod:`tenure.linkers.c.cache` reads and
writes entries in (:func:`locate`), and gives it the few file operations it
uses there (:func:`ensure_private_dir`, :func:`read_file`,
:func:`write_private_file`, :func:`make_private`).  It knows nothing of
entries, keys or locks.

Trust.  The SHA-256 checks of entries catch corruption, not tampering:
whoever can write the cache can run code as its user (keys are predictable).
So the cache trusts a directory only when nobody else can write it:

- every level tenure creates (missing parents of the compile directory, the
  compile directory, ``<platform>-<tag>``, ``kernel-index/``, ``failed/``,
  each entry) is made 0700, and every file 0600, whatever the umask;
- an existing compile directory and ``<platform>-<tag>`` must be directories
  owned by this user (or root) that group and others cannot write; below the
  compile directory (which may be the user's own symbolic link to such a
  directory) no symbolic link is followed (files are opened ``O_NOFOLLOW``,
  entries are real directories); the existing parents of the compile
  directory must be owned by this user or root and, when others can write
  them, sticky (as ``/tmp`` is), or another user could swap the directory;
- a cache that fails these checks is not read at all: this process warns
  once (:class:`CacheWarning`, naming the directory, its owner and mode) and
  uses a private temporary directory instead (0700, removed at exit).

A cache that is safe but cannot be written (read-only, an unwritable
``HOME``) is read without locks (entries appear and vanish by one rename; a
binary is checked before it is loaded), and what it lacks is built in the
private directory, with one warning; so is every build when the disk is full
(``ENOSPC``, ``EDQUOT``) or the cache refuses a write (:data:`CANNOT_WRITE`:
the caller retries such a write in :func:`fallback_dir`).
"""

from __future__ import annotations

import atexit
import errno
import os
import secrets
import shutil
import stat
import sys
import sysconfig
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

from tenure import config

try:
    import pwd
except ImportError:  # Windows: owners are shown by uid
    pwd = None

__all__ = ["CANNOT_WRITE", "FILE_MODE", "NOFOLLOW", "CacheWarning", "Location", "UnsafeDirectory",
           "ensure_private_dir", "entries_dir", "fallback_dir", "is_real_dir", "locate",
           "make_private", "read_file", "unlink_quietly", "warn_once", "write_private_file"]

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR_MODE = 0o700
FILE_MODE = 0o600
#: errors of a write that another directory may not have: no permission, a
#: read-only file system, a full disk or quota
CANNOT_WRITE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT})

#: the private directory of entries used when the cache cannot be (see Location)
_fallback: Path | None = None
_fallback_lock = threading.Lock()
#: what this process has warned about (each once)
_warned: set[tuple[str, str]] = set()


class CacheWarning(UserWarning):
    """A cache entry was unusable (corrupt, mismatched) and has been rebuilt,
    or the cache directory is unsafe or unwritable and a private one is used."""


class UnsafeDirectory(Exception):
    """A directory the cache must not trust; the message says which and why."""


def _after_fork_in_child() -> None:
    """A forked child has only the thread that forked: a lock another thread
    held stays held forever there, so it gets a new one."""
    global _fallback_lock
    _fallback_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def entries_dir(compiledir: str | os.PathLike | None = None) -> Path:
    """The directory holding this interpreter's entries: ``<compiledir>/<platform>-<tag>``.

    Interpreters with other ABIs (another Python, another OS on a shared home)
    get directories of their own, so ``clear`` and ``info`` never touch theirs.
    """
    base = config.compiledir if compiledir is None else os.path.expanduser(os.fspath(compiledir))
    return Path(base) / f"{sysconfig.get_platform()}-{sys.implementation.cache_tag}"


@dataclass(frozen=True)
class Location:
    """Where a load finds entries and where it builds them (see the module doc).

    ``build``: the entries directory this process writes (the cache's, or its
    private fallback); ``read_only``: the cache's entries directory when it is
    safe to read but cannot be written, searched first."""

    build: Path
    read_only: Path | None = None

    @property
    def search(self) -> tuple[Path, ...]:
        """The entries directories to look in, in order."""
        return (self.build,) if self.read_only is None else (self.read_only, self.build)

    @property
    def is_fallback(self) -> bool:
        return self.build == _fallback


def locate(compiledir: str | os.PathLike | None = None) -> Location:
    """Where entries of the cache in ``compiledir`` (default
    ``config.compiledir``) are read and built, creating its directories
    (0700) when missing; a cache that is unsafe or cannot be written gives
    the private fallback, with one warning."""
    base = Path(config.compiledir if compiledir is None
                else os.path.abspath(os.path.expanduser(os.fspath(compiledir))))
    directory = entries_dir(base)
    try:
        _prepare(base, directory)
    except UnsafeDirectory as exc:
        warn_once("unsafe", str(directory),
                  f"tenure: not using the compile cache: {exc}; anyone who can write it can "
                  f"run code as you. Compiling into the private directory {fallback_dir()} "
                  f"for this process instead")
        return Location(fallback_dir())
    except OSError as exc:
        if exc.errno not in CANNOT_WRITE:
            raise
        return _unwritable(directory, f"{exc.strerror}: {exc.filename}")
    if not os.access(directory, os.W_OK | os.X_OK):
        return _unwritable(directory, "it cannot be written")
    return Location(directory)


def _unwritable(directory: Path, why: str) -> Location:
    """The fallback for a cache that cannot be written: read what it holds
    when there is one (it passed the checks), build privately."""
    readable = is_real_dir(directory) and os.access(directory, os.R_OK | os.X_OK)
    warn_once("unwritable", str(directory),
              f"tenure: the compile cache {directory} cannot be written ({why}); "
              + ("loading the modules it holds and " if readable else "")
              + f"compiling new ones into the private directory {fallback_dir()} "
              f"for this process")
    return Location(fallback_dir(), directory if readable else None)


def _prepare(base: Path, directory: Path) -> None:
    """Check the parents of ``base``, then make or check ``base`` (which may
    be a symbolic link of this user's) and ``directory`` inside it."""
    missing = []
    parent = base.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    for ancestor in [parent, *parent.parents]:
        _check_ancestor(ancestor)
    for level in reversed(missing):
        ensure_private_dir(level, may_be_symlink=True)
    ensure_private_dir(base, may_be_symlink=True)
    ensure_private_dir(directory)


def ensure_private_dir(path: Path, *, may_be_symlink: bool = False) -> Path:
    """Make directory ``path`` (mode 0700, whatever the umask), or check that
    the one there is safe: a real directory (a symbolic link only when
    ``may_be_symlink``, itself owned by this user, to a safe directory) owned
    by this user or root that group and others cannot write.  Raises
    :class:`UnsafeDirectory`, or OSError when it cannot be made."""
    path = Path(path)
    if not os.path.lexists(path):
        try:
            os.mkdir(path, _DIR_MODE)
            os.chmod(path, _DIR_MODE)   # the umask may have taken bits we need
            return path
        except FileExistsError:
            pass   # another process made it meanwhile: check theirs
    _check_private_dir(path, may_be_symlink)
    return path


def _check_private_dir(path: Path, may_be_symlink: bool) -> None:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        if not may_be_symlink:
            raise UnsafeDirectory(f"{path} is a symbolic link (to {os.readlink(path)!r}), "
                                  f"expected a directory: the cache follows none")
        _check_owner(path, info, "the symbolic link ")
        info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectory(f"{path} is not a directory (mode {_mode(info)})")
    _check_owner(path, info)
    if info.st_mode & 0o022:
        raise UnsafeDirectory(f"{path} (owner {_owner(info.st_uid)}, mode {_mode(info)}) is "
                              f"writable by {_writers(info)}, expected mode 0o700 or "
                              f"at least no write bit for group and others")


def _check_ancestor(path: Path) -> None:
    """A parent of the compile directory: its owner could swap what is below,
    and so could anyone who can write it, unless it is sticky."""
    info = os.stat(path)
    _check_owner(path, info, "the parent directory ")
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        raise UnsafeDirectory(f"the parent directory {path} (owner {_owner(info.st_uid)}, mode "
                              f"{_mode(info)}) is writable by {_writers(info)} and not sticky")


def _check_owner(path: Path, info: os.stat_result, what: str = "") -> None:
    if info.st_uid not in (os.geteuid(), 0):
        raise UnsafeDirectory(f"{what}{path} (owner {_owner(info.st_uid)}, mode {_mode(info)}) "
                              f"is owned by another user, expected you "
                              f"({_owner(os.geteuid())}) or root")


def _mode(info: os.stat_result) -> str:
    return oct(stat.S_IMODE(info.st_mode))


def _writers(info: os.stat_result) -> str:
    return " and ".join(who for who, bit in (("its group", 0o020), ("others", 0o002))
                        if info.st_mode & bit)


def _owner(uid: int) -> str:
    if pwd is not None:
        try:
            return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
        except KeyError:
            pass
    return f"uid {uid}"


def is_real_dir(path: Path) -> bool:
    """Whether ``path`` is a directory and not a symbolic link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def fallback_dir() -> Path:
    """This process's private entries directory (0700, in the temporary
    directory, removed at exit), made on first use."""
    global _fallback
    with _fallback_lock:
        if _fallback is None:
            root = Path(tempfile.mkdtemp(prefix="tenure-cache-"))
            atexit.register(_remove_fallback, root, os.getpid())
            _fallback = entries_dir(root)
            ensure_private_dir(_fallback)
        return _fallback


def _remove_fallback(root: Path, creator: int) -> None:
    if os.getpid() == creator:   # not a forked child's exit: the parent may still use it
        shutil.rmtree(root, ignore_errors=True)


def warn_once(kind: str, directory: str, message: str) -> None:
    if (kind, directory) not in _warned:
        _warned.add((kind, directory))
        warnings.warn(message, CacheWarning, stacklevel=4)


# --------------------------------------------------------------------------
# files: never through a symbolic link, private modes


def read_file(path: Path) -> bytes:
    """The bytes of the file at ``path``, never through a symbolic link."""
    fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    with os.fdopen(fd, "rb") as file:
        return file.read()


def write_private_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (mode 0600) in one step: a temporary file
    beside it, renamed over it, so a reader sees the old file or the new."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), FILE_MODE)
            file.write(data)
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(str(tmp))
        raise


def make_private(tree: Path) -> None:
    """Modes 0700 and 0600 on ``tree`` and all in it (a compiler makes its
    outputs with the umask's modes)."""
    os.chmod(tree, _DIR_MODE)
    for root, dirs, files in os.walk(tree):
        for name, mode in [*((d, _DIR_MODE) for d in dirs), *((f, FILE_MODE) for f in files)]:
            path = os.path.join(root, name)
            if not os.path.islink(path):   # (Linux cannot chmod a link; its mode means nothing)
                os.chmod(path, mode)


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
