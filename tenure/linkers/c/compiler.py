"""The system C compiler: which one, which version, which flags, and a build.

Everything here that runs the compiler to learn something (does it work, does
it take ``-march=native``, does it do OpenMP, what is its version) asks once
per process and remembers the answer, because the cache computes a key on
every load and a probe costs tens of milliseconds.

The build recipe (:class:`Recipe`) is the single description of a build: the
cache hashes it into the key and :func:`compile_shared_library` runs exactly
it, so the key cannot drift from what actually produced the binary.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tenure import config

__all__ = ["CompileError", "Recipe", "compile_shared_library", "compiler_version",
           "find_compiler", "include_dirs", "make_recipe", "missing_headers",
           "openmp_enabled", "precompile_header", "supports_march_native", "supports_openmp"]

#: names tried on PATH, in order, when neither config.cxx nor $CC says which
CANDIDATES = ("cc", "gcc", "clang")

#: always on: optimise, position-independent code for a shared library, and
#: build against NumPy's current API without its deprecated names
BASE_FLAGS = ("-O3", "-fPIC", "-shared", "-DNPY_NO_DEPRECATED_API=NPY_1_7_API_VERSION")

_TRIVIAL_SOURCE = "int tenure_probe(int x) { return x + 1; }\n"
_OPENMP_SOURCE = """\
#include <omp.h>
int tenure_probe(void) { return omp_get_max_threads(); }
"""
_PROBE_TIMEOUT_S = 60


class CompileError(RuntimeError):
    """The C compiler failed (or none is usable).

    ``stderr`` is the compiler's diagnostic output, ``source_path`` where the
    source that failed was kept for debugging (None when nothing was compiled),
    ``command`` the full command line that ran (None when nothing ran).
    """

    def __init__(self, message: str, *, stderr: str = "", source_path: str | None = None,
                 command: list[str] | None = None, returncode: int | None = None):
        details = [message]
        if source_path is not None:
            details.append(f"source kept at: {source_path}")
        if command is not None:
            details.append(f"command: {shlex.join(command)}")
        if stderr.strip():
            details.append("compiler output:\n" + stderr.rstrip())
        super().__init__("\n".join(details))
        self.reason = message
        self.stderr = stderr
        self.source_path = source_path
        self.command = command
        self.returncode = returncode

    def __reduce__(self):  # keyword-only fields: pickle (multiprocessing) needs this
        return (_rebuild_compile_error, (self.reason, self.stderr, self.source_path,
                                         self.command, self.returncode))


def _rebuild_compile_error(reason, stderr, source_path, command, returncode):
    return CompileError(reason, stderr=stderr, source_path=source_path, command=command,
                        returncode=returncode)


# --------------------------------------------------------------------------
# finding the compiler


def find_compiler() -> str | None:
    """The C compiler command to use, or None when none works.

    ``config.cxx`` when set, else ``$CC`` when set: that command and no other
    (an explicit choice that does not work gives None rather than a surprise
    substitute).  Otherwise the first of ``cc``, ``gcc``, ``clang`` on PATH
    that compiles and links a trivial shared library.
    """
    return _find_compiler(config.cxx, os.environ.get("CC", "").strip(),
                          os.environ.get("PATH", ""))


@functools.lru_cache(maxsize=None)
def _find_compiler(cxx: str, cc_env: str, path: str) -> str | None:
    explicit = cxx or cc_env
    if explicit:
        return explicit if _works(explicit) else None
    for name in CANDIDATES:
        if shutil.which(name, path=path) and _works(name):
            return name
    return None


def _works(command: str) -> bool:
    # Probing with -march=native first saves a compile on the common path: when
    # it passes, supports_march_native() reuses the cached answer.
    return _compiles(command, ("-march=native",)) or _compiles(command, ())


def supports_march_native(command: str) -> bool:
    """Whether ``command`` accepts ``-march=native`` (asked once per process)."""
    return _compiles(command, ("-march=native",))


def supports_openmp(command: str | None = None) -> bool:
    """Whether ``command`` (default: :func:`find_compiler`) builds OpenMP code."""
    command = command or find_compiler()
    return command is not None and _compiles(command, ("-fopenmp",), _OPENMP_SOURCE)


def openmp_enabled() -> bool:
    """Whether compiled code should use OpenMP now: ``config.openmp`` allows it
    (None or True) and the compiler supports it.

    Code generators read this to decide whether to emit ``#pragma omp`` lines,
    and the C linker to decide whether to build with ``-fopenmp``, so both follow
    the same answer.  An explicit ``config.openmp = True`` that the compiler
    cannot honour warns (once per compiler): the code still runs, serially.
    """
    if config.openmp is False:
        return False
    command = find_compiler()
    supported = command is not None and supports_openmp(command)
    if not supported and config.openmp is True:
        _warn_no_openmp(command)
    return supported


@functools.lru_cache(maxsize=None)
def _warn_no_openmp(command: str | None) -> None:
    warnings.warn(f"tenure: config.openmp is True, but the C compiler {command!r} cannot build "
                  f"OpenMP code (-fopenmp); compiled loops run on one thread", RuntimeWarning,
                  stacklevel=3)


@functools.lru_cache(maxsize=None)
def _compiles(command: str, flags: tuple[str, ...], source: str = _TRIVIAL_SOURCE) -> bool:
    """Whether ``command`` builds a shared library from ``source`` with ``flags``."""
    with tempfile.TemporaryDirectory(prefix="tenure-probe-") as tmp:
        src = Path(tmp, "probe.c")
        src.write_text(source)
        try:
            argv = [*_split(command), "-fPIC", "-shared", *flags, str(src),
                    "-o", str(Path(tmp, "probe.so"))]
            proc = subprocess.run(argv, cwd=tmp, capture_output=True,
                                  timeout=_PROBE_TIMEOUT_S)
        except (ValueError, OSError, subprocess.SubprocessError):
            return False  # unparsable, not installed, not executable, or hangs
        return proc.returncode == 0 and Path(tmp, "probe.so").is_file()


def _split(command: str) -> list[str]:
    # A command may carry words ("ccache gcc", "gcc -m64"), like $CC in make.
    words = shlex.split(command)
    if not words:
        raise ValueError(f"expected a compiler command, got {command!r}")
    return words


@functools.lru_cache(maxsize=None)
def compiler_version(command: str) -> str:
    """The first line of ``command --version`` (asked once per process)."""
    try:
        proc = subprocess.run([*_split(command), "--version"], capture_output=True, text=True,
                              timeout=_PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompileError(f"could not run {command!r} --version: {exc}") from None
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise CompileError(f"{command!r} --version failed (exit code {proc.returncode})",
                           stderr=proc.stderr)
    return lines[0].strip()


@functools.lru_cache(maxsize=None)
def native_target(command: str) -> str:
    """What ``-march=native`` means on this machine, as the compiler expands it.

    A binary built with ``-march=native`` only runs on CPUs like this one, so
    the cache key must change with the CPU (think of a home directory shared by
    different cluster nodes).  ``-###`` prints the driver's expanded commands
    without compiling anything (a few milliseconds); we keep the target
    options from them (gcc: ``-march=…``, ``-m…``, ``--param …``; clang:
    ``-target-cpu``, ``-target-feature``).
    """
    argv = [*_split(command), "-march=native", "-###", "-E", "-x", "c", os.devnull]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    return " ".join(_target_words(proc.stderr)) or "unknown"


def _target_words(driver_output: str) -> list[str]:
    words = []
    for line in driver_output.splitlines():
        try:
            tokens = shlex.split(line)
        except ValueError:
            continue
        for i, token in enumerate(tokens):
            if token.startswith("-m"):
                words.append(token)
            elif token in ("-target-cpu", "-target-feature", "--param") and i + 1 < len(tokens):
                words.append(f"{token} {tokens[i + 1]}")
    return sorted(set(words))


# --------------------------------------------------------------------------
# headers and flags


@functools.lru_cache(maxsize=None)
def include_dirs() -> tuple[str, ...]:
    """Python's and NumPy's header directories, in search order."""
    dirs = [*_python_include_dirs(), np.get_include()]
    return tuple(dict.fromkeys(os.path.abspath(d) for d in dirs))  # unique, in order


def _python_include_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return [paths["include"], paths["platinclude"]]


def missing_headers() -> list[str]:
    """The headers an extension needs that are not installed (normally none)."""
    wanted = {"Python.h": _python_include_dirs(), "numpy/arrayobject.h": [np.get_include()]}
    return [header for header, dirs in wanted.items()
            if not any(os.path.isfile(os.path.join(d, header)) for d in dirs)]


@dataclass(frozen=True)
class Recipe:
    """Everything that decides the binary, except the source text.

    ``command`` is None when no compiler works; such a recipe still has a key
    (so keys can be computed anywhere) but cannot build.
    """

    command: str | None
    version: str | None
    target: str | None  # the -march=native expansion, or None when not used
    args: tuple[str, ...]  # flags before the source file
    link_args: tuple[str, ...]  # the caller's flags, after it (so -lfoo links)

    def key_material(self) -> dict:
        return {"command": self.command, "version": self.version, "target": self.target,
                "args": list(self.args), "link_args": list(self.link_args)}


def make_recipe(flags: tuple[str, ...] = (), openmp: bool = False) -> Recipe:
    """The build of a module with the caller's extra ``flags`` and OpenMP or not.

    Raises CompileError when ``openmp`` is asked of a compiler without it: code
    written for OpenMP may not compile (or be correct) without it, so we do not
    quietly drop the flag.
    """
    flags = _checked_flags(flags)
    command = find_compiler()
    if command is None:
        return Recipe(None, None, None, (*BASE_FLAGS, *_includes()), flags)
    native = supports_march_native(command)
    args = [*BASE_FLAGS]
    if native:
        args.append("-march=native")
    if openmp:
        if not supports_openmp(command):
            raise CompileError(f"OpenMP was asked for, but {command!r} cannot build an "
                               f"OpenMP program with -fopenmp (no omp.h or libgomp?)")
        args.append("-fopenmp")
    if sys.platform == "darwin":
        # Extensions resolve Python's symbols from the interpreter at load time.
        args += ["-undefined", "dynamic_lookup"]
    args += _includes()
    return Recipe(command, compiler_version(command), native_target(command) if native else None,
                  tuple(args), flags)


def _includes() -> list[str]:
    return [f"-I{d}" for d in include_dirs()]


def _checked_flags(flags) -> tuple[str, ...]:
    if isinstance(flags, str):
        raise TypeError(f"flags: expected a sequence of strings such as ('-O2', '-g'), "
                        f"got the string {flags!r}")
    flags = tuple(flags)
    bad = [f for f in flags if not isinstance(f, str) or not f]
    if bad:
        raise TypeError(f"flags: expected non-empty strings, got {bad!r}")
    return flags


# --------------------------------------------------------------------------
# building


def compile_shared_library(source_path: str | os.PathLike, output_path: str | os.PathLike,
                           recipe: Recipe) -> None:
    """Build ``output_path`` from ``source_path`` as ``recipe`` says.

    Raises CompileError (with the compiler's output) when the build fails; the
    caller decides where to keep the source for debugging.
    """
    source_path, output_path = os.fspath(source_path), os.fspath(output_path)
    _check_can_build(recipe, source_path)
    _run([*_split(recipe.command), *recipe.args, source_path, "-o", output_path,
          *recipe.link_args], source_path, output_path)


def precompile_header(header_path: str | os.PathLike, output_path: str | os.PathLike,
                      recipe: Recipe, language: str = "c") -> None:
    """Build gcc's precompiled form of ``header_path`` (``output_path`` should
    be ``<header>.gch`` beside it) with every option of ``recipe`` that a
    compilation sees: gcc then reads it in place of the header's text in a
    build made with ``recipe``, and reads the text in any other (see the
    ``prelude`` module).  The link-only words (``-shared``, ``-l``, ``-L``)
    are left out.  ``language``: ``"c"``, or ``"c++"`` for sources built as
    C++.  Raises CompileError as :func:`compile_shared_library` does."""
    if language not in ("c", "c++"):
        raise ValueError(f"precompile_header: language must be 'c' or 'c++', got {language!r}")
    header_path, output_path = os.fspath(header_path), os.fspath(output_path)
    _check_can_build(recipe, header_path)
    args = [a for a in recipe.args if a != "-shared"]
    options = [a for a in recipe.link_args if not a.startswith(("-l", "-L"))]
    _run([*_split(recipe.command), *args, "-x", f"{language}-header", header_path,
          "-o", output_path, *options], header_path, output_path)


def _check_can_build(recipe: Recipe, source_path: str) -> None:
    if recipe.command is None:
        raise CompileError("no working C compiler: set tenure.config.cxx or $CC, or install "
                           f"one of {', '.join(CANDIDATES)}", source_path=source_path)
    missing = missing_headers()
    if missing:
        raise CompileError(f"headers not found: {', '.join(missing)} (searched "
                           f"{', '.join(include_dirs())}); install Python's development "
                           "headers (e.g. the python3-dev package)", source_path=source_path)


def _run(argv: list[str], source_path: str, output_path: str) -> None:
    try:
        proc = subprocess.run(argv, cwd=os.path.dirname(output_path) or None,
                              capture_output=True, text=True)
    except OSError as exc:
        raise CompileError(f"could not run the C compiler: {exc}", source_path=source_path,
                           command=argv) from None
    if proc.returncode != 0 or not os.path.isfile(output_path):
        raise CompileError(f"the C compiler failed (exit code {proc.returncode})",
                           stderr=proc.stderr + proc.stdout, source_path=source_path,
                           command=argv, returncode=proc.returncode)
