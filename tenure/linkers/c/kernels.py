"""Loops compiled once and shared by every graph that needs them.

An elementwise node's arithmetic is two small C loops over one block (typed
and strided, :func:`.elemwise.loop_kernel`), a reduction's its row, kept and
divide loops (:func:`.reduce.loop_kernel`); everything else about running
them (checks, layout, threads, Ctrl-C) is the runtime's drivers.  The loops
depend only on the node's scalar expression, reduction and dtypes, so a
graph does not compile them: its schedule names them by key (the digest of
their C text) and the runtime's interpreter is handed their capsules
(``Schedule(description, loops, module)``, see :mod:`.module`).

- :func:`request` makes sure every loop of a graph is loaded or being built:
  loops this process has, nothing; loops another process built, loaded from
  the cache through the kernel index; the rest compiled together into one
  *loop library* (an extension module in the C cache, with its lock, atomic
  publish and corruption recovery), in a background thread, so gcc builds
  it while the graph's compiled steps (if any) compile.
- :func:`loops` waits for them and returns their capsules, in order.

The kernel index (``<cache entries>/kernel-index/<key>``, one small JSON file
per loop) says which library holds a loop: a new graph made only of loops
built before, in this process or another, compiles none.  An index file
that points at a library gone from the cache (or a corrupt one) is ignored
and the loop is built again.

The index is trusted no more than the cache it lies in (see :mod:`.cache`:
directories only this user can write, files 0600, no symbolic links
followed), and less: it can only lead to a library already built, which
must hold the loop's own code and flags; a library is never compiled from
what an index file says.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from tenure import config
from tenure.linkers.c import cache, prelude, runtime
from tenure.linkers.c.cgen import HEADERS

__all__ = ["LoopKernel", "capsule_name", "index_dir", "loops", "reduce_capsule_name", "request"]

#: the capsule names of the loop structs (include/tenure_runtime.h:
#: TN_EW_LOOPS_CAPSULE, TN_RD_LOOPS_CAPSULE)
capsule_name = "tenure.linkers.c.kernels.loops"
reduce_capsule_name = "tenure.linkers.c.kernels.reduce_loops"

#: where a library's loops are named in its source: the placeholder
PLACEHOLDER = "@K@"


_lock = threading.Lock()
#: key -> Future of ``{key: capsule, ...}``: the library holding that loop
#: (done, or being built)
_libraries: dict[str, concurrent.futures.Future] = {}
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="tenure-loops")


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads: the pool would count
    them and never start its own, and builds under way there never finish
    here.  The child gets a new pool and forgets those builds (loops already
    loaded stay: the libraries are mapped in the child too)."""
    global _lock, _pool
    _lock = threading.Lock()
    _pool = concurrent.futures.ThreadPoolExecutor(max_workers=2,
                                                  thread_name_prefix="tenure-loops")
    for key, future in list(_libraries.items()):
        if not future.done():
            del _libraries[key]


os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass(frozen=True)
class LoopKernel:
    """One node's loops: ``code`` defines ``@K@_<member>`` for each of
    ``members`` (``@K@`` is replaced by a name unique to the key), which fill
    a C struct of type ``struct`` (``tn_ew_loops``: typed, strided;
    ``tn_rd_loops``: row, kept, divide -- a member may be ``None``: NULL),
    handed out in a capsule named ``capsule``; ``support``: the C they need
    before them; ``flags``: to build with."""

    code: str
    support: str
    flags: tuple[str, ...]
    struct: str = "tn_ew_loops"
    members: tuple = ("typed", "strided")
    capsule: str = capsule_name

    @cached_property
    def key(self) -> str:
        material = "\0".join([self.code, self.support, *self.flags, self.struct,
                               *map(str, self.members), runtime.digest()])
        return hashlib.sha256(material.encode("utf-8")).hexdigest()[:24]

    @property
    def symbol(self) -> str:
        return f"tn_loop_{self.key}"


def index_dir(compiledir=None) -> Path:
    """The kernel index of ``compiledir`` (default ``config.compiledir``)."""
    return cache.entries_dir(compiledir) / "kernel-index"


def request(kernels) -> None:
    """Make sure each of ``kernels`` is loaded, or being built (see the module doc)."""
    with _lock:
        missing = []
        for kernel in {k.key: k for k in kernels}.values():
            if kernel.key in _libraries:
                continue
            found = _from_index(kernel)
            if found is None:
                missing.append(kernel)
            else:
                done = concurrent.futures.Future()
                done.set_result(found)
                _libraries[kernel.key] = done
        if missing:
            # The cache directory of now, not of when the thread gets to it.
            future = _pool.submit(_build_library, missing, config.compiledir)
            for kernel in missing:
                _libraries[kernel.key] = future


def loops(keys) -> tuple:
    """The capsules of the loops with these keys, in order (waiting for builds
    under way); the build's error (``CompileError``) when one failed (the next
    request builds it again), ``KeyError`` for a key never requested."""
    with _lock:
        futures = [_libraries[key] for key in keys]
    capsules = []
    for key, future in zip(keys, futures):
        try:
            capsules.append(future.result()[key])
        except Exception:
            with _lock:
                if _libraries.get(key) is future:
                    del _libraries[key]
            raise
    return tuple(capsules)


def library_prelude(kernels) -> str:
    """What a loop library of ``kernels`` starts with, in its prelude header
    (:mod:`.prelude`: precompiled once per machine): Python's and NumPy's
    headers, the runtime's API and the loops' support code."""
    return HEADERS + runtime.header() + "".join(dict.fromkeys(k.support for k in kernels))


def library_source(kernels, name: str) -> str:
    """The source of a loop library holding ``kernels``: module ``name`` whose
    ``loops`` is ``{key: capsule}``; its first line includes its prelude
    (:func:`library_prelude`)."""
    bodies, entries = [], []
    for k in kernels:
        bodies.append(k.code.replace(PLACEHOLDER, k.symbol))
        members = ", ".join("NULL" if m is None else f"{k.symbol}_{m}" for m in k.members)
        bodies.append(f"static const {k.struct} {k.symbol} = {{{members}}};\n")
        entries.append(f'    {{"{k.key}", &{k.symbol}, "{k.capsule}"}},')
    return (prelude.include_line(library_prelude(kernels)) + "".join(bodies) + f"""
static const struct {{ const char *key; const void *loops; const char *capsule; }} tn_table[] = {{
{chr(10).join(entries)}
}};

static struct PyModuleDef tn_module = {{
    PyModuleDef_HEAD_INIT, "{name}", "tenure loops", -1, NULL, NULL, NULL, NULL, NULL
}};

PyMODINIT_FUNC PyInit_{name}(void)
{{
    PyObject *module = PyModule_Create(&tn_module), *table = PyDict_New();
    if (module == NULL || table == NULL || PyModule_AddObject(module, "loops", table) < 0) {{
        Py_XDECREF(table);
        Py_XDECREF(module);
        return NULL;
    }}
    for (size_t i = 0; i < sizeof tn_table / sizeof tn_table[0]; i++) {{
        PyObject *capsule = PyCapsule_New((void *)tn_table[i].loops, tn_table[i].capsule, NULL);
        if (capsule == NULL || PyDict_SetItemString(table, tn_table[i].key, capsule) < 0) {{
            Py_XDECREF(capsule);
            Py_DECREF(module);
            return NULL;
        }}
        Py_DECREF(capsule);
    }}
    return module;
}}
""")


def _library_name(kernels) -> str:
    digest = hashlib.sha256("".join(sorted(k.key for k in kernels)).encode()).hexdigest()
    return f"tn_loops_{digest[:20]}"


def _flags(kernels) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f for k in kernels for f in k.flags))


def _build_library(kernels, compiledir) -> dict:
    """Compile (or load from the cache in ``compiledir``) one library of
    ``kernels``, record its loops in the index, and return ``{key: capsule}``."""
    name = _library_name(kernels)
    source = library_source(kernels, name)
    flags = _flags(kernels)
    module = _load_library(name, source, flags, library_prelude(kernels), compiledir)
    record = {"name": name, "entry": cache.cache_key(source, flags), "flags": list(flags)}
    for kernel in kernels:
        _write_index(kernel.key, record, compiledir)
    return dict(module.loops)


def _write_index(key: str, record: dict, compiledir) -> None:
    """Record where loop ``key`` is, in the index beside the entries this
    process writes (the cache's, or its private fallback)."""
    try:
        directory = cache.ensure_private_dir(cache.locate(compiledir).build / "kernel-index")
        cache.write_private_file(directory / key, json.dumps(record).encode("utf-8"))
    except (OSError, cache.UnsafeDirectory):
        pass   # an index that cannot be written costs a rebuild later, nothing else


def _from_index(kernel: LoopKernel) -> dict | None:
    """``{key: capsule}`` of the library another build left in the cache
    holding ``kernel``, or None (no index entry, or it leads nowhere usable)."""
    for entries in cache.locate().search:
        found = _from_index_in(entries, kernel)
        if found is not None:
            return found
    return None


def _from_index_in(entries: Path, kernel: LoopKernel) -> dict | None:
    try:
        record = json.loads(cache.read_file(entries / "kernel-index" / kernel.key))
        name, entry, flags = record["name"], record["entry"], tuple(record["flags"])
        source = cache.read_file(entries / entry / f"{name}.c").decode("utf-8")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _holds(source, flags, kernel):
        return None
    try:
        module = cache.load_cached_module(name, source, flags=flags)
        return None if module is None else dict(module.loops)
    except (ImportError, OSError, KeyError, AttributeError, ValueError, TypeError):
        return None


def _holds(source: str, flags: tuple[str, ...], kernel: LoopKernel) -> bool:
    """Whether a library's ``source`` and ``flags`` are the ones its index
    claims for ``kernel``: its loops' code under its symbol, and its flags."""
    return (f'{{"{kernel.key}", &{kernel.symbol}, ' in source
            and kernel.code.replace(PLACEHOLDER, kernel.symbol) in source
            and set(kernel.flags) <= set(flags))


def _load_library(name: str, source: str, flags: tuple[str, ...], prelude_text: str,
                  compiledir=None):
    """The library module ``name`` (from the cache, or built with its prelude
    beside it: a library another process built with kernels of other
    support code names another prelude, and fails to build here)."""
    return cache.load_module(name, source, flags=flags, compiledir=compiledir,
                             beside=prelude.beside(prelude_text, flags, compiledir=compiledir))
