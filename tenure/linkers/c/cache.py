"""The on-disk cache of compiled extension modules.

``load_module(name, source)`` returns the module that ``source`` (C code that
defines ``PyInit_<name>``) compiles to, building it only when no valid build
is cached.  An entry is keyed by everything that changes the binary (see
:func:`cache_key`), so a stale build is never picked up: a changed input is a
different key.

Layout of ``<config.compiledir>/<platform>-<python tag>/``::

    <key>/                    one entry, published whole (see .cache_entries)
        <name>.c              its source, for reading and debugging
        <name>-<token><ext>   the binary; a fresh name per build (see .cache_entries)
        meta.json             what the entry claims to be, checked before each load
    <key>/                    an entry of files (``load_files``: a precompiled
        <files>               header), published and checked the same way
        meta.json
    <key>.lock                held while a process loads, builds or removes <key>
    .build-<key>-XXXX/        a build in progress, private to the lock holder
    .trash-<key>-XXXX/        an entry being deleted
    failed/<name>-<key>.c     the source of the last failed build of <key>

This module is the cache's face: keys, loading and building through the
in-process tables, inspecting, clearing and evicting.  The rest lives in

- :mod:`.cache_dirs`: which directory is trusted (ownership, modes, no
  symbolic links), the private fallback directory, safe file reads/writes;
- :mod:`.cache_locks`: the lock of each key, between processes and threads;
- :mod:`.cache_entries`: one entry on disk, built, published, checked,
  loaded and removed.

Safety between processes rests on three rules: every read or change of an
entry happens under its lock; an entry appears by renaming a finished build
directory (so it is complete or absent, never partial) and disappears by
renaming it away first; and a binary is loaded only after its size and
SHA-256 match its metadata (a truncated library that the dynamic loader
accepted could crash the interpreter later, when a missing page is touched).
Those checks catch corruption, not tampering: a cache that others could
write is not used at all (see :mod:`.cache_dirs`).

Size.  After a build, entries beyond ``config.compiledir_max_size`` are
evicted, least recently used first (a load from disk touches the entry's
directory, so its time is its last use), each under its lock (an entry
another process is loading or building is skipped).  Finding them walks the
whole cache, so a process does it after its first build and then once it has
built a sixteenth of the cap since (see :func:`_evict_after_build`): the
cache may outgrow the cap by that much per process building at the time.
Entries this process has loaded are never evicted by it: for a module it
would be safe (unlinking a mapped library is), but an entry of files is used
by path later on.

Unloading.  Modules stay loaded until the process exits and ``_loaded`` keeps
them: CPython cannot unload an extension module.  It never ``dlclose``-s the
library, and keeps a single-phase module's definition and a copy of its
dictionary in its own table of extensions, so dropping our reference would
free next to nothing while a later load of that key would import it again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import re
import shutil
import sys
import sysconfig
import time
import types
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tenure import config
from tenure.linkers.c import compiler
from tenure.linkers.c.cache_dirs import (CANNOT_WRITE, CacheWarning, Location, ensure_private_dir,
                                         entries_dir, fallback_dir, is_real_dir, locate,
                                         read_file, warn_once, write_private_file)
from tenure.linkers.c.cache_dirs import UnsafeDirectory  # noqa: F401 (kernels.py catches it)
from tenure.linkers.c.cache_entries import (EXT_SUFFIX, FORMAT, UnusableEntry, check_files,
                                            check_or_build_files, discard, load_entry,
                                            load_or_build_module, read_meta, sha256_hex)
from tenure.linkers.c.cache_locks import KeyLock, key_guard, lock_path
from tenure.linkers.c.compiler import CompileError, Recipe

__all__ = ["CacheEntry", "CacheInfo", "CacheWarning", "Location", "cache_key", "clear",
           "clear_entries", "ensure_private_dir", "entries_dir", "evict", "files_key", "info",
           "load_cached_module", "load_files", "load_module", "locate", "read_file",
           "write_private_file"]

# The private names the tests reach through this module, from where they live now.
_KeyLock = KeyLock
_lock_path = lock_path
_discard = discard
_sha256 = sha256_hex

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY = re.compile(r"[0-9a-f]{64}")

#: (key, name) -> module, for every module this process has loaded
_loaded: dict[tuple[str, str], types.ModuleType] = {}
#: (key, entries directory asked for) -> the entry of files this process checked
_checked_files: dict[tuple[str, str], Path] = {}


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
            "ext_suffix": EXT_SUFFIX,
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
    A cache that is unsafe or cannot be written is handled as :mod:`.cache_dirs`
    says (a private directory, one warning).

    ``beside``: called when the module must be built, it returns ``{file
    name: path}`` of headers the source includes by name (``#include
    "name"``), linked beside it for the build and gone after.  They are not
    part of the key, so the source must name each by a digest of its text (as
    :mod:`.prelude` does): the text then decides the binary.
    """
    return _module(name, source, flags, openmp, compiledir, beside or dict, build=True)


def load_cached_module(name: str, source: str, *, flags: tuple[str, ...] = (),
                       openmp: bool = False, compiledir: str | os.PathLike | None = None
                       ) -> types.ModuleType | None:
    """What :func:`load_module` gives when a usable build of ``source`` is
    loaded or cached, else None: it never compiles."""
    return _module(name, source, flags, openmp, compiledir, dict, build=False)


def _module(name, source, flags, openmp, compiledir, beside, build: bool):
    _check_module_source(name, source)
    recipe = compiler.make_recipe(flags, openmp)
    if openmp:
        prefer_passive_openmp_waits()
    key = _key(source, recipe)
    module = _loaded.get((key, name))
    if module is not None:
        return module
    if build and recipe.command is None:
        raise CompileError(f"cannot build module {name!r}: no working C compiler (set "
                           f"tenure.config.cxx or $CC, or install one of "
                           f"{', '.join(compiler.CANDIDATES)})")
    with key_guard(key):
        module = _loaded.get((key, name))  # another thread may have loaded it meanwhile
        if module is None:
            load = functools.partial(load_or_build_module, key=key, name=name, source=source,
                                     recipe=recipe, beside=beside, build=build)
            module, problem = _from_location(locate(compiledir), key, load,
                                             lambda entry: load_entry(entry, key, name, source))
            if problem:
                warnings.warn(f"tenure: the cached build of module {name!r} was unusable "
                              f"({problem}); rebuilt it", CacheWarning, stacklevel=3)
            if module is not None:
                _loaded[(key, name)] = module
    return module


def _from_location(location: Location, key: str, load_or_build, load_read_only):
    """What ``load_or_build(directory)`` gives under the key's lock, after a
    look into the read-only cache (``load_read_only(entry)``, no lock) when
    there is one, and why an entry was rebuilt (or None).  A write the cache
    refuses (no space, no permission) is tried again in the private
    directory, with one warning."""
    if location.read_only is not None:
        entry = location.read_only / key
        if is_real_dir(entry):
            try:
                return load_read_only(entry), None
            except UnusableEntry:
                pass   # not ours to repair: build a good one privately
    try:
        return _locked(location.build, key, load_or_build)
    except OSError as exc:
        if exc.errno not in CANNOT_WRITE or location.is_fallback:
            raise
        warn_once("write", str(location.build),
                  f"tenure: could not write the compile cache {location.build} ({exc}); "
                  f"compiling into the private directory {fallback_dir()} for this process")
    return _locked(fallback_dir(), key, load_or_build)


def _locked(directory: Path, key: str, load_or_build):
    """``load_or_build(directory)`` under the key's file lock, with why the
    entry there was rebuilt (or None); then eviction when it built something
    (see :func:`evict`)."""
    with KeyLock(lock_path(directory, key)):
        result, problem, built = load_or_build(directory)
    if built:
        try:
            _evict_after_build(directory, key)
        except OSError:
            pass   # a cache over its size costs disk, never a failed load
    return result, f"{problem}; entry {directory / key}" if problem else None


#: bytes this process has built into each entries directory since it last
#: walked it to evict (absent: never walked)
_built_since_walk: dict[Path, int] = {}
#: a process walks the cache again once it has built this fraction of the cap
WALK_EVERY = 16


def _evict_after_build(directory: Path, key: str) -> None:
    """:func:`evict` after the build of ``key``, when due: at this process's
    first build into ``directory``, then each time it has built a
    :data:`WALK_EVERY`-th of the cap since.  A walk reads every entry (a
    quarter of a millisecond each: a fifth of a second per build with a
    thousand entries, when it walked after every build)."""
    limit = config.compiledir_max_size
    if not limit:
        return
    built = _built_since_walk.get(directory)
    size = _tree_size(directory / key)
    if built is not None and built + size < limit // WALK_EVERY:
        _built_since_walk[directory] = built + size
        return
    evict(directory, keep=(key,))
    _built_since_walk[directory] = 0


def _forget_loaded() -> None:
    """Forget the modules loaded and the entries of files checked so far, so
    the next load reads the disk, and the walks of the cache (tests)."""
    _loaded.clear()
    _checked_files.clear()
    _built_since_walk.clear()


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
    asked = (key, str(entries_dir(compiledir)))
    entry = _checked_files.get(asked)
    if entry is not None and is_real_dir(entry):   # (another process may have evicted it)
        return entry
    with key_guard(key):
        entry = _checked_files.get(asked)
        if entry is None or not is_real_dir(entry):
            check_or_build = functools.partial(check_or_build_files, key=key, name=name,
                                               recipe=recipe, build=build)
            entry, problem = _from_location(locate(compiledir), key, check_or_build,
                                            lambda found: check_files(found, key, name) or found)
            if problem:
                warnings.warn(f"tenure: the cached files {name!r} were unusable ({problem}); "
                              f"rebuilt them", CacheWarning, stacklevel=2)
            _checked_files[asked] = entry
    return entry


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


# --------------------------------------------------------------------------
# inspecting and clearing


@dataclass(frozen=True)
class CacheEntry:
    """One cached module."""

    key: str
    name: str  # "?" when the metadata is unreadable
    path: Path
    size_bytes: int
    created: float | None  # time.time() at build; None when unknown
    compiler_version: str | None
    last_used: float | None = None  # the entry directory's time: its last load from disk

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
        with KeyLock(lock_path(directory, key)):
            entry = _describe(directory / key, key)
            if entry is not None and discard(directory, directory / key, key):
                removed.append(entry)
    _remove_leftovers(directory)
    return removed


def evict(directory: Path, max_bytes: int | None = None, *,
          keep: tuple[str, ...] = ()) -> list[CacheEntry]:
    """Remove the least recently used entries of the entries directory
    ``directory`` until the others take at most ``max_bytes`` (default
    ``config.compiledir_max_size``; 0: no limit); the entries removed.

    Each is removed under its lock, skipped when another process holds that
    (it is loading or building it), and so is every entry this process has
    loaded (see the module doc), and the keys in ``keep``.  The last use of
    an entry is its directory's time, which each load from disk renews.
    """
    limit = config.compiledir_max_size if max_bytes is None else max_bytes
    if not limit:
        return []
    entries = sorted((entry for key in _entry_keys(directory)
                      if (entry := _describe(directory / key, key)) is not None),
                     key=lambda entry: entry.last_used or 0.0)
    total = sum(entry.size_bytes for entry in entries)
    in_use = ({key for key, _name in _loaded} | {path.name for path in _checked_files.values()}
              | set(keep))
    removed = []
    for entry in entries:
        if total <= limit:
            break
        if entry.key in in_use:
            continue
        lock = KeyLock(lock_path(directory, entry.key), blocking=False)
        if not lock.acquire():
            continue
        try:
            if discard(directory, entry.path, entry.key):
                removed.append(entry)
                total -= entry.size_bytes
        finally:
            lock.release()
    return removed


def _remove_leftovers(directory: Path) -> None:
    """Build and trash directories of crashed processes, and kept failed sources."""
    for path in _listdir(directory):
        if path.name.startswith(".trash-"):
            shutil.rmtree(path, ignore_errors=True)
        elif path.name.startswith(".build-"):
            key = path.name[len(".build-"):].split("-")[0]
            lock = KeyLock(lock_path(directory, key), blocking=False)
            if lock.acquire():  # nobody builds that key now: the directory is abandoned
                try:
                    shutil.rmtree(path, ignore_errors=True)
                finally:
                    lock.release()
    shutil.rmtree(directory / "failed", ignore_errors=True)


def _entry_keys(directory: Path) -> list[str]:
    return sorted(p.name for p in _listdir(directory) if _KEY.fullmatch(p.name) and is_real_dir(p))


def _listdir(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except FileNotFoundError:
        return []


def _describe(entry: Path, key: str) -> CacheEntry | None:
    if not is_real_dir(entry):
        return None
    try:
        meta = read_meta(entry)
    except UnusableEntry:
        meta = {}
    created = meta.get("created")
    try:
        last_used = os.lstat(entry).st_mtime
    except OSError:
        last_used = None   # removed while we looked
    return CacheEntry(key=key, name=str(meta.get("name", "?")), path=entry,
                      size_bytes=_tree_size(entry),
                      created=float(created) if isinstance(created, (int, float)) else None,
                      compiler_version=meta.get("compiler_version"), last_used=last_used)


def _tree_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for file in files:
            try:
                total += os.lstat(os.path.join(root, file)).st_size
            except FileNotFoundError:
                pass  # removed while we looked
    return total
