"""Writing C from Python: what every code generator of the C linker shares.

One dtype table, one way to quote a string or a comment, one array
initializer, one way to name an operand in an error message, and the pragma
that keeps floating-point arithmetic rounding as NumPy's does.
"""

from __future__ import annotations

import re

import numpy as np

from tenure.symbolic.graph import Apply

__all__ = ["C_DTYPES", "C_TYPES", "HEADERS", "IDENTIFIER", "NPY_TYPES", "c_string", "comment",
           "input_label", "no_contract", "table", "typenum"]

#: a C identifier
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

#: the first lines of every generated extension module
HEADERS = """#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <numpy/arrayobject.h>
"""

#: the dtypes with C code, and NumPy's C type number of each
NPY_TYPES = {"bool": "NPY_BOOL", "float32": "NPY_FLOAT32", "float64": "NPY_FLOAT64",
             **{f"{s}int{b}": f"NPY_{s.upper()}INT{b}"
                for s in ("", "u") for b in (8, 16, 32, 64)}}
C_DTYPES = frozenset(NPY_TYPES)
#: the C type holding one element of each
C_TYPES = {name: f"npy_{name}" for name in NPY_TYPES}


def typenum(dtype) -> str:
    """NumPy's C type number for ``dtype`` (``NotImplementedError`` without C code)."""
    name = np.dtype(dtype).name
    if name not in NPY_TYPES:
        raise NotImplementedError(f"no C code for dtype {name}")
    return NPY_TYPES[name]


def c_string(text: str) -> str:
    """``text`` as a C string literal (octal escapes: they never run on)."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        out.append(char if 32 <= byte < 127 and char not in '"\\?' else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def comment(text: str) -> str:
    """``text`` safe inside a one-line C comment."""
    return text.replace("*/", "* /").replace("\n", " ")


def table(values, empty: str | None = None) -> str:
    """A C array initializer; ``empty``: the one element of an empty table
    (C has no empty initializer lists)."""
    values = list(values)
    if not values and empty is not None:
        values = [empty]
    return "{" + ", ".join(values) + "}"


def input_label(node: Apply, i: int) -> str:
    """How error messages name input ``i`` of ``node``."""
    name = node.inputs[i].name
    return f"input {i} ({name})" if name else f"input {i}"


def no_contract(code: str) -> str:
    """``code`` compiled without floating-point contraction: GCC fuses a * b + c
    into an FMA, even across statements, unless told not to, and NumPy rounds
    twice.  (Helpers and functions all carry the same options, so GCC still
    inlines the helpers.)"""
    return ("#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC push_options\n"
            '#pragma GCC optimize("fp-contract=off")\n#endif\n' + code
            + "#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC pop_options\n#endif\n")
