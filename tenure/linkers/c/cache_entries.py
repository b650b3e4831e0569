"""One entry of the compile cache on disk: how it is built, published,
checked, loaded and removed.

An entry is a directory ``<entries dir>/<key>/`` holding ``meta.json`` (what
the entry claims to be) and either a module (``<name>.c``, its source, and
``<name>-<token><ext>``, the binary) or files (:func:`check_or_build_files`:
a precompiled header).  Every function here that reads or changes an entry
expects its caller to hold the key's lock (:mod:`.cache_locks`); which
directory, and when, is :mod:`tenure.linkers.c.cache`'s business.

- An entry appears by renaming a finished build directory
  (``.build-<key>-XXXX/``), so it is complete or absent, never partial, and
  disappears by being renamed away first (``.trash-<key>-XXXX/``,
  :func:`discard`).
- A binary is loaded, and a file of an entry used, only after its size and
  SHA-256 match the metadata (a truncated library that the dynamic loader
  accepted could crash the interpreter later, when a missing page is
  touched); an entry that fails a check raises :class:`UnusableEntry`.
- A failed build leaves no entry; its source is kept as
  ``failed/<name>-<key>.c`` for debugging.
- Each load from disk touches the entry's directory: its time is its last
  use, which eviction goes by.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import secrets
import shutil
import sys
import sysconfig
import tempfile
import time
import types
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from tenure.linkers.c import compiler
from tenure.linkers.c.cache_dirs import (ensure_private_dir, is_real_dir, make_private,
                                         read_file, write_private_file)
from tenure.linkers.c.compiler import CompileError, Recipe

__all__ = ["EXT_SUFFIX", "FORMAT", "UnusableEntry", "check_files", "check_or_build_files",
           "discard", "link_beside", "load_entry", "load_or_build_module", "read_meta",
           "sha256_hex"]

#: bump when the layout, the metadata or the key material changes meaning
FORMAT = 1

EXT_SUFFIX = (sysconfig.get_config_var("EXT_SUFFIX")
              or importlib.machinery.EXTENSION_SUFFIXES[0])
_META = "meta.json"
_MISSING = object()


class UnusableEntry(Exception):
    """An entry on disk that must not be loaded; the message says why."""


# --------------------------------------------------------------------------
# modules


def load_or_build_module(directory: Path, *, key: str, name: str, source: str, recipe: Recipe,
                         beside: Callable[[], Mapping[str, Path]], build: bool
                         ) -> tuple[types.ModuleType | None, str | None, bool]:
    """The module (loaded, or built when ``build``: else None), why the cached
    entry was rejected (if it was), and whether it was built.

    The caller holds the key's lock.
    """
    entry = directory / key
    problem = None
    if is_real_dir(entry):
        try:
            return load_entry(entry, key, name, source), None, False
        except UnusableEntry as exc:
            if not build:
                return None, None, False
            problem = str(exc)
    if not build:
        return None, None, False
    if os.path.lexists(entry):
        discard(directory, entry, key)
    return _build(directory, key, name, source, recipe, beside), problem, True


def load_entry(entry: Path, key: str, name: str, source: str) -> types.ModuleType:
    meta = read_meta(entry)
    _check_meta(meta, key, name, source)
    binary = entry / meta["module_file"]
    _check_binary(binary, meta)
    try:
        module = _import(binary, name, key)
    except (ImportError, OSError) as exc:
        raise UnusableEntry(f"loading it failed: {exc}") from None
    _touch(entry)
    return module


def _touch(entry: Path) -> None:
    """Record a use of ``entry`` (its directory's time), for eviction."""
    try:
        os.utime(entry, follow_symlinks=False)
    except (OSError, NotImplementedError):
        pass   # a read-only cache: nothing is evicted from it either


def read_meta(entry: Path) -> dict:
    try:
        meta = json.loads(read_file(entry / _META).decode("utf-8"))
    except FileNotFoundError:
        raise UnusableEntry(f"{_META} is missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UnusableEntry(f"{_META} is unreadable: {exc}") from None
    if not isinstance(meta, dict):
        raise UnusableEntry(f"{_META} holds a {type(meta).__name__}, expected an object")
    return meta


def _check_meta(meta: dict, key: str, name: str, source: str) -> None:
    expected = {"format": FORMAT, "key": key, "name": name,
                "source_sha256": sha256_hex(source.encode("utf-8"))}
    for field, value in expected.items():
        if meta.get(field) != value:
            raise UnusableEntry(f"{_META} has {field}={meta.get(field)!r}, expected {value!r}")
    module_file = meta.get("module_file")
    # A plain file name of ours, never a path: the metadata must not be able
    # to point the loader at another file.
    if not (isinstance(module_file, str) and module_file.startswith(f"{name}-")
            and module_file.endswith(EXT_SUFFIX) and os.path.basename(module_file) == module_file):
        raise UnusableEntry(f"{_META} has module_file={module_file!r}, expected "
                            f"'{name}-<token>{EXT_SUFFIX}'")


def _check_binary(binary: Path, meta: dict) -> None:
    _check_file(binary, meta.get("binary_size"), meta.get("binary_sha256"), "the binary")


def _check_file(path: Path, size, sha256, what: str) -> None:
    """``path`` has ``size`` bytes whose SHA-256 is ``sha256`` (as the
    metadata says), or the entry is unusable: ``what`` names the file."""
    try:
        data = read_file(path)
    except OSError as exc:
        raise UnusableEntry(f"{what} cannot be read: {exc}") from None
    if len(data) != size:
        raise UnusableEntry(f"{what} has {len(data)} bytes, {_META} says {size!r}")
    if sha256_hex(data) != sha256:
        raise UnusableEntry(f"{what}'s SHA-256 does not match {_META}")


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
    # loading has no global side effect (the cache keeps the module in its _loaded).
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
    module_file = f"{name}-{secrets.token_hex(4)}{EXT_SUFFIX}"
    try:
        source_path = build / f"{name}.c"
        write_private_file(source_path, source.encode("utf-8"))
        linked = link_beside(build, beside())
        try:
            compiler.compile_shared_library(source_path, build / module_file, recipe)
        except CompileError as exc:
            raise _with_kept_source(exc, directory, key, name, source_path) from None
        for path in linked:
            os.unlink(path)
        make_private(build)
        _write_meta(build, key, name, source, module_file, recipe)
        os.rename(build, entry)
    finally:
        shutil.rmtree(build, ignore_errors=True)  # gone already when published
    _touch(entry)
    try:
        return _import(entry / module_file, name, key)
    except (ImportError, OSError) as exc:
        discard(directory, entry, key)
        raise ImportError(f"module {name!r} was compiled but cannot be loaded: {exc}") from exc


def link_beside(build: Path, beside: Mapping[str, Path]) -> list[Path]:
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
    binary = read_file(build / module_file)
    meta = {"format": FORMAT, "key": key, "name": name, "module_file": module_file,
            "created": time.time(), "source_sha256": sha256_hex(source.encode("utf-8")),
            "binary_size": len(binary), "binary_sha256": sha256_hex(binary),
            "compiler": recipe.command, "compiler_version": recipe.version,
            "flags": [*recipe.args, *recipe.link_args],
            "python": sys.implementation.cache_tag, "numpy": np.__version__}
    write_private_file(build / _META, json.dumps(meta, indent=1, sort_keys=True).encode("utf-8"))


def _with_kept_source(exc: CompileError, directory: Path, key: str, name: str,
                      source_path: Path) -> CompileError:
    """``exc`` pointing at a copy of the source that outlives the build directory."""
    failed = ensure_private_dir(directory / "failed")
    kept = failed / f"{name}-{key}.c"
    write_private_file(kept, read_file(source_path))
    command = [str(kept) if arg == str(source_path) else arg for arg in exc.command or []]
    return CompileError(f"compiling module {name!r} failed: {exc.reason}", stderr=exc.stderr,
                        source_path=str(kept), command=command or None,
                        returncode=exc.returncode)


# --------------------------------------------------------------------------
# entries of files


def check_or_build_files(directory: Path, *, key: str, name: str, recipe: Recipe,
                         build: Callable[[Path], None]) -> tuple[Path, str | None, bool]:
    """Check the entry of files ``key``, or (re)build it: the entry, why the
    one there was rejected (if it was), whether it was built.  The caller
    holds the key's lock."""
    entry = directory / key
    problem = None
    if is_real_dir(entry):
        try:
            check_files(entry, key, name)
            return entry, None, False
        except UnusableEntry as exc:
            problem = str(exc)
    if os.path.lexists(entry):
        discard(directory, entry, key)
    staging = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=directory))
    try:
        build(staging)
        make_private(staging)
        files = {p.name: {"size": p.stat().st_size, "sha256": sha256_hex(read_file(p))}
                 for p in sorted(staging.iterdir()) if p.is_file() and not p.is_symlink()}
        meta = {"format": FORMAT, "key": key, "name": name, "files": files,
                "created": time.time(), "compiler": recipe.command,
                "compiler_version": recipe.version}
        write_private_file(staging / _META,
                           json.dumps(meta, indent=1, sort_keys=True).encode("utf-8"))
        os.rename(staging, entry)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already when published
    _touch(entry)
    return entry, problem, True


def check_files(entry: Path, key: str, name: str) -> None:
    meta = read_meta(entry)
    for field, value in {"format": FORMAT, "key": key, "name": name}.items():
        if meta.get(field) != value:
            raise UnusableEntry(f"{_META} has {field}={meta.get(field)!r}, expected {value!r}")
    files = meta.get("files")
    if not isinstance(files, dict):
        raise UnusableEntry(f"{_META} has files={files!r}, expected an object")
    for file_name, expected in files.items():
        if os.path.basename(file_name) != file_name or not isinstance(expected, dict):
            raise UnusableEntry(f"{_META} lists {file_name!r}: {expected!r}")
        _check_file(entry / file_name, expected.get("size"), expected.get("sha256"),
                    file_name)
    _touch(entry)


# --------------------------------------------------------------------------
# removing


def discard(directory: Path, entry: Path, key: str) -> bool:
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


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
