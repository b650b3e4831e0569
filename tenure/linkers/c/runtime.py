"""The C runtime: the C that does not depend on the graph, compiled once.

The runtime's sources are real files in this package: ``include/`` (what
generated modules include: ``tenure_runtime.h``, ``scalar_errors.h``) and
``src/`` (``runtime.c``, which includes the others: the elementwise loop
driver, the schedule helpers of a graph module's ``run``, the FastCall type).

:func:`load_runtime` builds them into one extension module per machine and
tenure version, on first use, through the disk cache (:mod:`.cache`: lock,
atomic publish, corruption recovery), and loads it once per process.  The
module's name carries the digest of every source file, so a changed source
is a new module (and a new cache entry) and two versions never meet in one
process.

Graph modules reach the runtime through a table of function pointers in a
capsule (the way NumPy's C API does): :func:`header` is the text a generated
module puts in front of its code (``tenure_runtime.h`` with the digest it
expects), its init calls ``tn_import_runtime()``, which calls
:func:`capsule` (building the runtime if need be) and checks the digest.

Local ``#include "name"`` lines are expanded here, with ``#line`` markers,
so the compiler sees one source text (the cache keys it by that text) and
its messages and a debugger still name the real files and lines.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from tenure.linkers.c import cache, compiler, ctemplate

__all__ = ["INCLUDE_DIR", "NUMPY_RANDOM_LIBRARY", "SOURCE_DIR", "capsule", "digest",
           "expand_includes", "has_numpy_random", "header", "load_runtime", "runtime_name",
           "runtime_source", "source_files"]

#: the headers generated modules include
INCLUDE_DIR = Path(__file__).with_name("include")
#: the runtime's C files
SOURCE_DIR = Path(__file__).with_name("src")

#: NumPy's C distributions, which the sequential draws call
#: (src/random_sequential.c): the static library NumPy ships for C code
NUMPY_RANDOM_LIBRARY = Path(np.random.__file__).with_name("lib") / "libnpyrandom.a"


def has_numpy_random() -> bool:
    """Whether the runtime links :data:`NUMPY_RANDOM_LIBRARY` (every NumPy
    wheel has it); without it, the C linker draws binomial, choice and
    permutation with the op's perform."""
    return NUMPY_RANDOM_LIBRARY.is_file()


def _numpy_random_flags() -> tuple[str, ...]:
    # NumPy's version is in the flags, so in the build's cache key: a new
    # NumPy (whose algorithms may change) is a new build.
    if not has_numpy_random():
        return ("-DTN_NO_NPYRANDOM",)
    return (f'-DTN_NUMPY_VERSION="{np.__version__}"', f"-L{NUMPY_RANDOM_LIBRARY.parent}",
            "-lnpyrandom")


#: flags the runtime is built with, as the generated code's: speed only
#: (vector math through libmvec, see include/vector_math.h), and no
#: contraction of a * b + c into an FMA (NumPy rounds twice); NumPy's
#: random library before the math library it calls
COMPILE_FLAGS = ("-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off", "-DTN_VECTOR_MATH",
                 *_numpy_random_flags(), "-lm")

_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.MULTILINE)
_lock = threading.Lock()
_runtime = None


def _after_fork_in_child() -> None:
    # A thread of the parent may have held the lock (building the runtime):
    # it does not exist in the child, which would wait for it forever.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def source_files() -> list[Path]:
    """Every file of the runtime, in a fixed order."""
    return sorted(INCLUDE_DIR.glob("*.h")) + sorted(SOURCE_DIR.glob("*.[ch]")) + sorted(
        SOURCE_DIR.glob("*.src"))


@lru_cache(maxsize=None)
def digest() -> str:
    """The digest of every runtime file: a new one for any change of any file."""
    h = hashlib.sha256()
    for path in source_files():
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:20]


def runtime_name() -> str:
    """The runtime module's name (it carries the digest)."""
    return f"tenure_runtime_{digest()}"


def expand_includes(path: Path, *, markers: bool = True, _seen: frozenset = frozenset()) -> str:
    """The text of ``path`` with its local includes (found in :data:`INCLUDE_DIR`
    or :data:`SOURCE_DIR`) expanded in place, each behind ``#line`` markers
    (unless ``markers`` is false: text that generated code follows, whose
    lines must keep their own numbers)."""
    if path in _seen:
        raise ValueError(f"runtime sources: {path.name} includes itself")
    text = path.read_text()
    if path.suffix == ".src":
        text = ctemplate.expand(text, path if markers else None)
    out, last = [f'#line 1 "{path}"\n' if markers else ""], 0
    for match in _LOCAL_INCLUDE.finditer(text):
        target = _find(match.group(1), path)
        line = text.count("\n", 0, match.end()) + 1
        out.append(text[last:match.start()])
        out.append(expand_includes(target, markers=markers, _seen=_seen | {path}))
        out.append(f'\n#line {line + 1} "{path}"\n' if markers else "\n")
        last = match.end() + 1
    out.append(text[last:])
    return "".join(out)


def _find(name: str, includer: Path) -> Path:
    for directory in (includer.parent, INCLUDE_DIR, SOURCE_DIR):
        candidate = directory / name
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"runtime sources: {includer.name} includes {name!r}, which is in "
                            f"neither {INCLUDE_DIR} nor {SOURCE_DIR}")


@lru_cache(maxsize=None)
def runtime_source() -> str:
    """The runtime module's whole source text, as the compiler sees it."""
    name = runtime_name()
    prelude = (f'#define TN_RUNTIME_DIGEST "{digest()}"\n'
               f'#define TN_RUNTIME_NAME "{name}"\n'
               f"#define TN_RUNTIME_INIT PyInit_{name}\n")
    return prelude + expand_includes(SOURCE_DIR / "runtime.c")


@lru_cache(maxsize=None)
def header() -> str:
    """What a generated module puts after ``#include <numpy/arrayobject.h>``:
    the runtime's API (``tn_rt``, ``tn_import_runtime``, the ``tn_*`` names),
    the scalar code's error bits and the vector math declarations."""
    return (f'#define TN_RUNTIME_DIGEST "{digest()}"\n'
            + "".join(expand_includes(INCLUDE_DIR / name, markers=False)
                      for name in ("tenure_runtime.h", "scalar_errors.h", "vector_math.h")))


def load_runtime():
    """The runtime module: loaded once per process, built into the C cache on
    first use (with OpenMP whenever the compiler has it: whether a loop uses
    threads is the generated code's choice, made from the config)."""
    global _runtime
    if _runtime is None:
        with _lock:
            if _runtime is None:
                _runtime = cache.load_module(runtime_name(), runtime_source(),
                                             flags=COMPILE_FLAGS,
                                             openmp=compiler.supports_openmp())
    return _runtime


def capsule():
    """The runtime's table of functions, as the capsule graph modules import."""
    return load_runtime()._C_API
