"""One or several nodes compiled on their own into a small extension module,
for tests and debugging (the C linker builds whole graphs instead).

Each kernel family (:mod:`.elemwise`, :mod:`.reduce`, :mod:`.blas`) supplies
its ``c_function`` and the Python-facing entry for a node; this file puts
them together into a module the C cache can build, the same way for all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tenure.linkers.c import runtime
from tenure.linkers.c.cgen import IDENTIFIER, c_string
from tenure.symbolic.graph import Apply

def module_text(name: str, node: Apply | Mapping[str, Apply], *, prefix: str,
                c_function: Callable[[Apply, str], str],
                entry: Callable[[Apply, str, str], tuple[str, str]],
                headers: str, support: str, entry_support: str, doc: str,
                init: str = "") -> str:
    """The source of module ``name``: entry ``run`` for one node, or one entry
    per key of a mapping ``{entry_name: node}``.

    ``c_function(node, fname)`` and ``entry(node, entry_name, fname) -> (code,
    method table row)`` come from the kernel family; ``init`` is C run in the
    module's init after ``import_array()`` (return NULL there on failure).
    """
    nodes = dict(node) if isinstance(node, Mapping) else {"run": node}
    for text in [name, *nodes]:
        if not IDENTIFIER.match(text):
            raise ValueError(f"module_source: {text!r} is not a C identifier")
    functions, entries, methods = [], [], []
    for entry_name, apply in nodes.items():
        fname = f"{prefix}_kernel_{entry_name}"   # never a runtime name (tn_ew_run)
        functions.append(c_function(apply, fname))
        code, method = entry(apply, entry_name, fname)
        entries.append(code)
        methods.append("    " + method)
    return (headers + runtime.header() + support + "".join(functions) + entry_support
            + "".join(entries) + f"""
static PyMethodDef tn_methods[] = {{
{chr(10).join(methods)}
    {{NULL, NULL, 0, NULL}}
}};

static struct PyModuleDef tn_module = {{
    PyModuleDef_HEAD_INIT, {c_string(name)}, {c_string(doc)}, -1, tn_methods,
    NULL, NULL, NULL, NULL
}};

PyMODINIT_FUNC PyInit_{name}(void)
{{
    import_array();
    if (tn_import_runtime() < 0)
        return NULL;{init}
    return PyModule_Create(&tn_module);
}}
""")
