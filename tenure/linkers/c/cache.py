"""The on-disk cache of compiled extension modules.

``load_module(name, source)`` returns the module that ``source`` (C code that
defines ``PyInit_<name>``) compiles to, building it only when no valid build
is cached.  An entry is keyed by everything that changes the binary (see
:func:`cache_key`), so a stale build is never picked up: a changed input is a
different key.

Layout of ``<config.compiledir>/<platform>-<python tag>/``::

    <key>/                    one entry, published whole (see _build)
        <name>.c              its source, for reading and debugging
        <name>-<token><ext>   the binary; a fresh name per build (see _build)
        meta.json             what the entry claims to be, checked before each load
    <key>/                    an entry of files (``load_files``: a precompiled
        <files>               header), published and checked the same way
        meta.json
    <key>.lock                held while a process loads, builds or removes <key>
    .build-<key>-XXXX/        a build in progress, private to the lock holder
    .trash-<key>-XXXX/        an entry being deleted
    failed/<name>-<key>.c     the source of the last failed build of <key>

Safety between processes rests on three rules: every read or change of an
entry happens under its lock; an entry appears by renaming a finished build
directory (so it is complete or absent, never partial) and disappears by
renaming it away first; and a binary is loaded only after its size and
SHA-256 match its metadata (a truncated library that the dynamic loader
accepted could crash the interpreter later, when a missing page is touched).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import secrets
import shutil
import sys
import sysconfig
import tempfile
import threading
import time
import types
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tenure import config
from tenure.linkers.c import compiler
from tenure.linkers.c.compiler import CompileError, Recipe

try:
    import fcntl as _fcntl
except ImportError:  # Windows: the polling lock below takes over
    _fcntl = None

__all__ = ["CacheEntry", "CacheInfo", "CacheWarning", "cache_key", "clear", "clear_entries",
           "entries_dir", "files_key", "info", "load_files", "load_module"]

#: bump when the layout, the metadata or the key material changes meaning
FORMAT = 1
#: a polling lock file older than this is taken to belong to a dead process
STALE_LOCK_S = 600.0

_EXT_SUFFIX = (sysconfig.get_config_var("EXT_SUFFIX")
               or importlib.machinery.EXTENSION_SUFFIXES[0])
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY = re.compile(r"[0-9a-f]{64}")
_META = "meta.json"
_MISSING = object()

#: (key, name) -> module, for every module this process has loaded
_loaded: dict[tuple[str, str], types.ModuleType] = {}
#: (key, entries directory) of every entry of files this process has checked
_checked_files: set[tuple[str, str]] = set()
_key_guards: dict[str, threading.Lock] = {}
_key_guards_lock = threading.Lock()


class CacheWarning(UserWarning):
    """A cache entry was unusable (corrupt, mismatched) and has been rebuilt."""


class _UnusableEntry(Exception):
    """An entry on disk that must not be loaded; the message says why."""


# --------------------------------------------------------------------------
# keys


def cache_key(source: str, flags: tuple[str, ...] = (), openmp: bool = False) -> str:
    """The SHA-256 hex key of the module that ``source`` builds to.

    It covers the source, the flags (the caller's and ours, include dirs and
    OpenMP among them), the compiler command and version, what
    ``-march=native`` means on this CPU, Python's ABI and NumPy's.
    """
    return _key(source, compiler.make_recipe(flags, openmp))


def _key(source: str, recipe: Recipe, kind: str = "module") -> str:
    material = {"format": FORMAT, "source": source, "build": recipe.key_material(),
                "python": _python_abi(), "numpy": _numpy_abi()}
    if kind != "module":   # a module's key stays what it was before entries of files
        material["kind"] = kind
    canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


@functools.lru_cache(maxsize=None)
def _python_abi() -> dict:
    return {"implementation": sys.implementation.name,
            "cache_tag": sys.implementation.cache_tag,
            "version": list(sys.version_info[:2]),
            "ext_suffix": _EXT_SUFFIX,
            "platform": sysconfig.get_platform()}


@functools.lru_cache(maxsize=None)
def _numpy_abi() -> dict:
    # The full version, not major.minor: headers ship with each release and a
    # rebuild after a NumPy upgrade costs less than a subtle ABI surprise.
    return {"version": np.__version__, "c_abi": _ndarray_c_version()}


def _ndarray_c_version() -> int | None:
    # A private function that moved from numpy.core (1.x) to numpy._core (2.x);
    # the version above already keys the cache if it moves again.
    for module_name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            module = importlib.import_module(module_name)
            return int(module._get_ndarray_c_version())
        except (ImportError, AttributeError):
            continue
    return None


# --------------------------------------------------------------------------
# loading


def prefer_passive_openmp_waits() -> None:
    """``OMP_WAIT_POLICY=passive`` unless the environment says otherwise.

    The OpenMP runtime reads its wait policy once, when it is loaded (with the
    first OpenMP module), so this runs before that.  Its default lets idle
    threads spin for a while after each parallel loop, and the loop is most
    often followed by a BLAS call whose own threads need those cores: on 2
    cores an MLP forward pass (a matmul after each bias-add-relu) took 195 ms
    with spinning threads and 135 ms with sleeping ones.  A parallel loop pays
    a few microseconds to wake its threads, against loops of at least
    ``config.openmp_elemwise_minsize`` elements."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")


def load_module(name: str, source: str, *, flags: tuple[str, ...] = (), openmp: bool = False,
                compiledir: str | os.PathLike | None = None,
                beside: Callable[[], Mapping[str, Path]] | None = None) -> types.ModuleType:
    """The extension module built from ``source``, which defines ``PyInit_<name>``.

    From this process's memory when it was loaded before, else from the cache
    in ``compiledir`` (default ``config.compiledir``), else compiled, cached
    and loaded.  A cached entry that turns out corrupt is rebuilt once, with a
    :class:`CacheWarning`.  Raises CompileError when the build fails (no entry
    is left; the source is kept for debugging, see ``CompileError.source_path``).

    ``beside``: called when the module must be built, it returns ``{file
    name: path}`` of headers the source includes by name (``#include
    "name"``), linked beside it for the build and gone after.  They are not
    part of the key, so the source must name each by a digest of its text (as
    :mod:`.prelude` does): the text then decides the binary.
    """
    _check_module_source(name, source)
    recipe = compiler.make_recipe(flags, openmp)
    if openmp:
        prefer_passive_openmp_waits()
    key = _key(source, recipe)
    module = _loaded.get((key, name))
    if module is not None:
        return module
    if recipe.command is None:
        raise CompileError(f"cannot build module {name!r}: no working C compiler (set "
                           f"tenure.config.cxx or $CC, or install one of "
                           f"{', '.join(compiler.CANDIDATES)})")
    with _key_guard(key):
        module = _loaded.get((key, name))  # another thread may have loaded it meanwhile
        if module is None:
            directory = entries_dir(compiledir)
            directory.mkdir(parents=True, exist_ok=True)
            with _KeyLock(_lock_path(directory, key)):
                module, problem = _load_or_build(directory, key, name, source, recipe,
                                                 beside or dict)
            if problem:
                warnings.warn(f"tenure: the cached build of module {name!r} in "
                              f"{directory / key} was unusable ({problem}); rebuilt it",
                              CacheWarning, stacklevel=2)
            _loaded[(key, name)] = module
    return module


def _forget_loaded() -> None:
    """Forget the modules loaded and the entries of files checked so far, so
    the next load reads the disk (tests)."""
    _loaded.clear()
    _checked_files.clear()


def files_key(name: str, material: str, recipe: Recipe) -> str:
    """The key of the entry of files ``name`` made from the text ``material``
    by ``recipe`` (see :func:`load_files`)."""
    return _key(f"{name}\0{material}", recipe, kind="files")


def load_files(name: str, material: str, recipe: Recipe, build: Callable[[Path], None], *,
               compiledir: str | os.PathLike | None = None) -> Path:
    """The directory of a cache entry that holds files rather than a module
    (a precompiled header): ``build(directory)`` writes them into an empty
    directory when the entry is absent or unusable; it may raise (nothing is
    published then).  The entry is keyed by ``name``, the text ``material``
    the files are made from and ``recipe``, built under the key's lock and
    published by one rename like a module's; each file's size and SHA-256 go
    into its metadata and are checked the first time a process uses the entry
    (a truncated file is rebuilt, with a :class:`CacheWarning`)."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"load_files: name must be a C identifier, got {name!r}")
    key = files_key(name, material, recipe)
    directory = entries_dir(compiledir)
    entry = directory / key
    if (key, str(directory)) in _checked_files:
        return entry
    with _key_guard(key):
        if (key, str(directory)) not in _checked_files:
            directory.mkdir(parents=True, exist_ok=True)
            with _KeyLock(_lock_path(directory, key)):
                problem = _check_or_build_files(directory, key, name, recipe, build)
            if problem:
                warnings.warn(f"tenure: the cached files {name!r} in {entry} were unusable "
                              f"({problem}); rebuilt them", CacheWarning, stacklevel=2)
            _checked_files.add((key, str(directory)))
    return entry


def _check_or_build_files(directory: Path, key: str, name: str, recipe: Recipe,
                          build: Callable[[Path], None]) -> str | None:
    """Check the entry of files ``key``, or (re)build it; why it was rejected,
    if it was.  The caller holds the key's lock."""
    entry = directory / key
    problem = None
    if entry.is_dir():
        try:
            _check_files(entry, key, name)
            return None
        except _UnusableEntry as exc:
            problem = str(exc)
        _discard(directory, entry, key)
    staging = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=directory))
    try:
        build(staging)
        files = {p.name: {"size": p.stat().st_size, "sha256": _sha256(p.read_bytes())}
                 for p in sorted(staging.iterdir()) if p.is_file()}
        meta = {"format": FORMAT, "key": key, "name": name, "files": files,
                "created": time.time(), "compiler": recipe.command,
                "compiler_version": recipe.version}
        (staging / _META).write_text(json.dumps(meta, indent=1, sort_keys=True),
                                     encoding="utf-8")
        os.rename(staging, entry)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already when published
    return problem


def _check_files(entry: Path, key: str, name: str) -> None:
    meta = _read_meta(entry)
    for field, value in {"format": FORMAT, "key": key, "name": name}.items():
        if meta.get(field) != value:
            raise _UnusableEntry(f"{_META} has {field}={meta.get(field)!r}, expected {value!r}")
    files = meta.get("files")
    if not isinstance(files, dict):
        raise _UnusableEntry(f"{_META} has files={files!r}, expected an object")
    for file_name, expected in files.items():
        if os.path.basename(file_name) != file_name or not isinstance(expected, dict):
            raise _UnusableEntry(f"{_META} lists {file_name!r}: {expected!r}")
        _check_file(entry / file_name, expected.get("size"), expected.get("sha256"),
                    file_name)


def _check_module_source(name, source) -> None:
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"load_module: name must be a C identifier (ASCII letters, digits, "
                         f"underscores), got {name!r}")
    if not isinstance(source, str):
        raise TypeError(f"load_module: source must be C code as a str, "
                        f"got {type(source).__name__}")
    if not _mentions_word(source, f"PyInit_{name}"):
        raise ValueError(f"load_module: the source must define the module init function "
                         f"PyInit_{name} for name {name!r}, and it does not mention it")


def _mentions_word(text: str, word: str) -> bool:
    """Whether ``word`` stands in ``text`` as a whole identifier (str.find, not
    a regex: loop libraries are hundreds of kilobytes, checked on every load)."""
    start = text.find(word)
    while start >= 0:
        end = start + len(word)
        if ((start == 0 or not _is_identifier_char(text[start - 1]))
                and (end == len(text) or not _is_identifier_char(text[end]))):
            return True
        start = text.find(word, start + 1)
    return False


def _is_identifier_char(char: str) -> bool:
    return char.isascii() and (char.isalnum() or char == "_")


def _key_guard(key: str) -> threading.Lock:
    # Threads of one process building the same key wait for each other here
    # (the file lock alone would let the second import a second copy).
    with _key_guards_lock:
        return _key_guards.setdefault(key, threading.Lock())


def _load_or_build(directory: Path, key: str, name: str, source: str, recipe: Recipe,
                   beside: Callable[[], Mapping[str, Path]]
                   ) -> tuple[types.ModuleType, str | None]:
    """The module (loaded or built) and why the cached entry was rejected, if it was.

    The caller holds the key's lock.
    """
    entry = directory / key
    problem = None
    if entry.is_dir():
        try:
            return _load_entry(entry, key, name, source), None
        except _UnusableEntry as exc:
            problem = str(exc)
        _discard(directory, entry, key)
    return _build(directory, key, name, source, recipe, beside), problem


def _load_entry(entry: Path, key: str, name: str, source: str) -> types.ModuleType:
    meta = _read_meta(entry)
    _check_meta(meta, key, name, source)
    binary = entry / meta["module_file"]
    _check_binary(binary, meta)
    try:
        return _import(binary, name, key)
    except (ImportError, OSError) as exc:
        raise _UnusableEntry(f"loading it failed: {exc}") from None


def _read_meta(entry: Path) -> dict:
    try:
        meta = json.loads((entry / _META).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _UnusableEntry(f"{_META} is missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise _UnusableEntry(f"{_META} is unreadable: {exc}") from None
    if not isinstance(meta, dict):
        raise _UnusableEntry(f"{_META} holds a {type(meta).__name__}, expected an object")
    return meta


def _check_meta(meta: dict, key: str, name: str, source: str) -> None:
    expected = {"format": FORMAT, "key": key, "name": name,
                "source_sha256": _sha256(source.encode("utf-8"))}
    for field, value in expected.items():
        if meta.get(field) != value:
            raise _UnusableEntry(f"{_META} has {field}={meta.get(field)!r}, expected {value!r}")
    module_file = meta.get("module_file")
    # A plain file name of ours, never a path: the metadata must not be able
    # to point the loader at another file.
    if not (isinstance(module_file, str) and module_file.startswith(f"{name}-")
            and module_file.endswith(_EXT_SUFFIX) and os.path.basename(module_file) == module_file):
        raise _UnusableEntry(f"{_META} has module_file={module_file!r}, expected "
                             f"'{name}-<token>{_EXT_SUFFIX}'")


def _check_binary(binary: Path, meta: dict) -> None:
    _check_file(binary, meta.get("binary_size"), meta.get("binary_sha256"), "the binary")


def _check_file(path: Path, size, sha256, what: str) -> None:
    """``path`` has ``size`` bytes whose SHA-256 is ``sha256`` (as the
    metadata says), or the entry is unusable: ``what`` names the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _UnusableEntry(f"{what} cannot be read: {exc}") from None
    if len(data) != size:
        raise _UnusableEntry(f"{what} has {len(data)} bytes, {_META} says {size!r}")
    if _sha256(data) != sha256:
        raise _UnusableEntry(f"{what}'s SHA-256 does not match {_META}")


def _import(binary: Path, name: str, key: str) -> types.ModuleType:
    """Load the extension at ``binary`` whose init function is ``PyInit_<name>``.

    CPython finds the init function from the last dotted part of the spec's
    name, so a package-like prefix unique to the key gives every build its own
    module name: two builds of ``name`` can live in one process, and neither
    can shadow a real module called ``name``.
    """
    qualname = f"_tenure_c_{key[:16]}.{name}"
    loader = importlib.machinery.ExtensionFileLoader(qualname, str(binary))
    spec = importlib.util.spec_from_file_location(qualname, str(binary), loader=loader)
    # Single-phase init modules put themselves into sys.modules; undo that so
    # loading has no global side effect (we keep the module in _loaded).
    previous = sys.modules.get(qualname, _MISSING)
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    finally:
        if previous is _MISSING:
            sys.modules.pop(qualname, None)
        else:
            sys.modules[qualname] = previous
    return module


# --------------------------------------------------------------------------
# building


def _build(directory: Path, key: str, name: str, source: str, recipe: Recipe,
           beside: Callable[[], Mapping[str, Path]]) -> types.ModuleType:
    """Compile ``source``, publish the entry and load it.  The caller holds the lock.

    The build happens in a private directory that becomes the entry by one
    rename, so other processes see a complete entry or none.  The binary gets
    a fresh random file name per build: the dynamic loader hands back the
    library it already has for a path it has seen, so a rebuild at the old
    path could silently load the old, broken one again.
    """
    build = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=directory))
    entry = directory / key
    module_file = f"{name}-{secrets.token_hex(4)}{_EXT_SUFFIX}"
    try:
        source_path = build / f"{name}.c"
        source_path.write_text(source, encoding="utf-8")
        linked = _link_beside(build, beside())
        try:
            compiler.compile_shared_library(source_path, build / module_file, recipe)
        except CompileError as exc:
            raise _with_kept_source(exc, directory, key, name, source_path) from None
        for path in linked:
            os.unlink(path)
        _write_meta(build, key, name, source, module_file, recipe)
        os.rename(build, entry)
    finally:
        shutil.rmtree(build, ignore_errors=True)  # gone already when published
    try:
        return _import(entry / module_file, name, key)
    except (ImportError, OSError) as exc:
        _discard(directory, entry, key)
        raise ImportError(f"module {name!r} was compiled but cannot be loaded: {exc}") from exc


def _link_beside(build: Path, beside: Mapping[str, Path]) -> list[Path]:
    """Hard links (copies where the file system has none) of ``beside`` in
    ``build``, the paths made: a link keeps its file readable for the whole
    build even when the entry it came from is removed meanwhile."""
    linked = []
    for file_name, path in beside.items():
        if (os.path.basename(file_name) != file_name or file_name.startswith(".")
                or file_name == _META):
            raise ValueError(f"load_module: beside must name plain files, got {file_name!r}")
        target = build / file_name
        try:
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
        linked.append(target)
    return linked


def _write_meta(build: Path, key: str, name: str, source: str, module_file: str,
                recipe: Recipe) -> None:
    binary = (build / module_file).read_bytes()
    meta = {"format": FORMAT, "key": key, "name": name, "module_file": module_file,
            "created": time.time(), "source_sha256": _sha256(source.encode("utf-8")),
            "binary_size": len(binary), "binary_sha256": _sha256(binary),
            "compiler": recipe.command, "compiler_version": recipe.version,
            "flags": [*recipe.args, *recipe.link_args],
            "python": sys.implementation.cache_tag, "numpy": np.__version__}
    (build / _META).write_text(json.dumps(meta, indent=1, sort_keys=True), encoding="utf-8")


def _with_kept_source(exc: CompileError, directory: Path, key: str, name: str,
                      source_path: Path) -> CompileError:
    """``exc`` pointing at a copy of the source that outlives the build directory."""
    failed = directory / "failed"
    failed.mkdir(exist_ok=True)
    kept = failed / f"{name}-{key}.c"
    tmp = failed / f".{kept.name}.{secrets.token_hex(4)}"
    shutil.copyfile(source_path, tmp)
    os.replace(tmp, kept)  # a reader never sees half a file
    command = [str(kept) if arg == str(source_path) else arg for arg in exc.command or []]
    return CompileError(f"compiling module {name!r} failed: {exc.reason}", stderr=exc.stderr,
                        source_path=str(kept), command=command or None,
                        returncode=exc.returncode)


def _discard(directory: Path, entry: Path, key: str) -> bool:
    """Delete an entry (the caller holds its lock); whether there was one.

    Renamed away first, so no process ever sees it half deleted.  A process
    that has the library loaded keeps using it: unlinking a mapped file is safe.
    """
    trash = directory / f".trash-{key}-{secrets.token_hex(4)}"
    try:
        os.rename(entry, trash)
    except FileNotFoundError:
        return False
    shutil.rmtree(trash, ignore_errors=True)
    return True


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------
# locks


def _lock_path(directory: Path, key: str) -> Path:
    return directory / f"{key}.lock"


class _KeyLock:
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
            _unlink_quietly(self.path)
        elif self._owns_lock_file():
            _unlink_quietly(self.path)
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
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                _fcntl.flock(fd, _fcntl.LOCK_EX | (0 if self.blocking else _fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return False
            if _same_file(fd, self.path):
                self._fd = fd
                return True
            os.close(fd)  # the previous holder unlinked it: lock the current file

    def _acquire_polling(self) -> bool:
        self._token = f"{os.getpid()} {threading.get_ident()} {secrets.token_hex(8)}"
        while True:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
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
        _unlink_quietly(grave)
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


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# --------------------------------------------------------------------------
# inspecting and clearing


def entries_dir(compiledir: str | os.PathLike | None = None) -> Path:
    """The directory holding this interpreter's entries: ``<compiledir>/<platform>-<tag>``.

    Interpreters with other ABIs (another Python, another OS on a shared home)
    get directories of their own, so ``clear`` and ``info`` never touch theirs.
    """
    base = config.compiledir if compiledir is None else os.path.expanduser(os.fspath(compiledir))
    return Path(base) / f"{sysconfig.get_platform()}-{sys.implementation.cache_tag}"


@dataclass(frozen=True)
class CacheEntry:
    """One cached module."""

    key: str
    name: str  # "?" when the metadata is unreadable
    path: Path
    size_bytes: int
    created: float | None  # time.time() at build; None when unknown
    compiler_version: str | None

    @property
    def age_s(self) -> float | None:
        return None if self.created is None else max(0.0, time.time() - self.created)


@dataclass(frozen=True)
class CacheInfo:
    """What a cache directory holds."""

    directory: Path
    entries: tuple[CacheEntry, ...]
    total_bytes: int  # everything under the directory, leftovers included

    @property
    def count(self) -> int:
        return len(self.entries)


def info(compiledir: str | os.PathLike | None = None) -> CacheInfo:
    """The entries of the cache in ``compiledir`` (default ``config.compiledir``).

    Reads without locking: an entry that vanishes meanwhile is left out.
    """
    directory = entries_dir(compiledir)
    entries = tuple(entry for key in _entry_keys(directory)
                    if (entry := _describe(directory / key, key)) is not None)
    return CacheInfo(directory, entries, _tree_size(directory))


def clear(compiledir: str | os.PathLike | None = None) -> int:
    """Remove every entry of the cache in ``compiledir``; the number removed."""
    return len(clear_entries(compiledir))


def clear_entries(compiledir: str | os.PathLike | None = None) -> list[CacheEntry]:
    """Remove every entry (and leftovers of crashed builds); the entries removed.

    Safe while other processes use the cache: each entry is removed under its
    lock, so a process that is loading it finishes first, and one that comes
    later rebuilds it.  Processes that already loaded a module keep it.
    """
    directory = entries_dir(compiledir)
    removed = []
    for key in _entry_keys(directory):
        with _KeyLock(_lock_path(directory, key)):
            entry = _describe(directory / key, key)
            if entry is not None and _discard(directory, directory / key, key):
                removed.append(entry)
    _remove_leftovers(directory)
    return removed


def _remove_leftovers(directory: Path) -> None:
    """Build and trash directories of crashed processes, and kept failed sources."""
    for path in _listdir(directory):
        if path.name.startswith(".trash-"):
            shutil.rmtree(path, ignore_errors=True)
        elif path.name.startswith(".build-"):
            key = path.name[len(".build-"):].split("-")[0]
            lock = _KeyLock(_lock_path(directory, key), blocking=False)
            if lock.acquire():  # nobody builds that key now: the directory is abandoned
                try:
                    shutil.rmtree(path, ignore_errors=True)
                finally:
                    lock.release()
    shutil.rmtree(directory / "failed", ignore_errors=True)


def _entry_keys(directory: Path) -> list[str]:
    return sorted(p.name for p in _listdir(directory) if _KEY.fullmatch(p.name) and p.is_dir())


def _listdir(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except FileNotFoundError:
        return []


def _describe(entry: Path, key: str) -> CacheEntry | None:
    if not entry.is_dir():
        return None
    try:
        meta = _read_meta(entry)
    except _UnusableEntry:
        meta = {}
    created = meta.get("created")
    return CacheEntry(key=key, name=str(meta.get("name", "?")), path=entry,
                      size_bytes=_tree_size(entry),
                      created=float(created) if isinstance(created, (int, float)) else None,
                      compiler_version=meta.get("compiler_version"))


def _tree_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for file in files:
            try:
                total += os.lstat(os.path.join(root, file)).st_size
            except FileNotFoundError:
                pass  # removed while we looked
    return total
