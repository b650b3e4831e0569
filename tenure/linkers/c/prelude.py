"""Preludes: the fixed text in front of generated C, parsed once per machine.

A loop library (:mod:`.kernels`) is a few hundred lines of loops behind about
21,000 lines of headers: Python's and NumPy's, the runtime's API and the
scalar code's support.  gcc spends more than half of such a build reading
them (0.27 s a library, 0.12 s with them precompiled, on this project's
2-core machine).  So that text goes into one header, ``<name>.h``, which the
generated source includes by name as its first line, and gcc's precompiled
form of it, ``<name>.h.gch``, lies beside it.

Correctness does not rest on the precompiled file.  gcc reads it in place of
the text only when it was made by the same compiler with the same options,
and reads the text otherwise (clang never reads a ``.gch`` named this way);
when it cannot be made at all, the header is there alone.  The name carries
the digest of the text, so a source names exactly the text it is compiled
against, and the cache's key (the source's digest, the recipe) still decides
the binary.

The files are a cache entry of their own (:func:`.cache.load_files`: lock,
atomic publish, each file's size and SHA-256 checked once per process), one
per text and recipe, and :func:`files` hands them to
:func:`.cache.load_module` as files to put beside a source (hard links: a
build keeps reading them even if the entry is removed meanwhile).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tenure.linkers.c import cache
from tenure.linkers.c.compiler import CompileError, Recipe, make_recipe, precompile_header

__all__ = ["beside", "files", "header_name", "include_line"]


def header_name(text: str) -> str:
    """The file name of the prelude holding ``text`` (it carries its digest)."""
    return f"tn_prelude_{hashlib.sha256(text.encode('utf-8')).hexdigest()[:24]}.h"


def include_line(text: str) -> str:
    """The first line of a source that starts with ``text``."""
    return f'#include "{header_name(text)}"\n'


def files(text: str, recipe: Recipe, compiledir=None, language: str = "c") -> dict[str, Path]:
    """``{file name: path}`` of the prelude ``text`` for builds made with
    ``recipe``: its header, and the header precompiled where the compiler
    could make it (built into the cache in ``compiledir`` on first use).
    ``language``: what the sources are built as, ``"c"`` or ``"c++"``."""
    name = header_name(text)
    material = text if language == "c" else f"{language}\n{text}"
    entry = cache.load_files(name[:-2], material, recipe,
                             lambda directory: _write(directory, name, text, recipe, language),
                             compiledir=compiledir)
    return {path.name: path for path in (entry / name, entry / f"{name}.gch") if path.is_file()}


def beside(text: str, flags: tuple[str, ...], openmp: bool = False, compiledir=None):
    """What :func:`.cache.load_module` takes as ``beside`` for a source that
    starts with :func:`include_line` of ``text`` and builds with ``flags``
    and ``openmp``: the prelude's files, made only when the module is built."""
    return lambda: files(text, make_recipe(flags, openmp), compiledir)


def _write(directory: Path, name: str, text: str, recipe: Recipe, language: str) -> None:
    header = directory / name
    header.write_text(text, encoding="utf-8")
    try:
        precompile_header(header, directory / f"{name}.gch", recipe, language)
    except CompileError:
        # The header alone still builds every source (only more slowly); a
        # compiler that cannot precompile it says so on each try, so the
        # entry remembers it by holding the header alone.
        (directory / f"{name}.gch").unlink(missing_ok=True)
