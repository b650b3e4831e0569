"""C code for ``IncSubtensor`` (``set_subtensor`` / ``inc_subtensor`` with
basic indices), in place or not.

What the C linker calls:

- :func:`has_c_code` ``(node) -> bool``: whether :func:`c_function` can handle it.
- :func:`c_function` ``(node, fname) -> str``: the C definition of
  ``static int fname(PyObject **inputs, PyArrayObject **outputs)``.
- the C runtime's API (:func:`.runtime.header`) earlier in the module: the
  helpers the functions call are ``tn_st_*`` (``src/subtensor.c``), the
  region code of ``src/views.c`` and ``tn_cl_overlap`` (``src/schedule.c``).
- :data:`COMPILE_FLAGS`: none needed.
- :func:`step_function`: the step of the graph's module around it (the
  output has ``x``'s shape and may be ``x``: more than the generic compiled
  step of :mod:`.dispatch`, which is how ``IncSubtensor`` registers).

The generated function -- its contract with the caller:

- ``inputs[i]`` is node input ``i`` as the slot holds it (borrowed, never
  NULL): ``x``, the value ``v``, then the index scalars (0-d integer arrays,
  NumPy integers or Python ints).  ``x`` must be an ndarray of the node's
  dtype and ndim (checked again here, ``TypeError``); ``v`` an ndarray of its
  declared dtype and ndim (a NumPy scalar or Python number for a 0-d one).
- ``outputs[0]`` is allocated by the caller with ``x``'s shape and dtype,
  aligned, native byte order and writeable -- or is ``x`` itself (the same
  object) for an in-place op whose ``x`` is all of that.  When it is not
  ``x``, ``x`` is copied into it first.
- ``v`` is read from a copy when it overlaps the output (``x[1:] = x[:-1]``
  in place must read the values before the writes, as ``perform`` does), or
  when it is unaligned or byte-swapped.
- The region is ``out[pattern]`` with :mod:`.views`' indexing (``IndexError``
  / ``ValueError`` as ``perform``); ``v`` broadcasts to it with NumPy's rules,
  else ``ValueError`` with ``perform``'s message.  ``set`` casts ``v`` to
  ``x``'s dtype as NumPy's assignment does; ``inc`` adds in NumPy's result
  dtype of the two and casts back (``np.add(..., casting="unsafe")``):
  integers wrap, ``bool`` adds as logical or.
- Returns 0, or -1 with a Python exception set (the caller holds the GIL).
  On an error the output may be partly written (``perform`` fails the same
  way: index errors before any write into the region, shape errors too).

Not covered (``has_c_code`` is False, the op runs its ``perform``):
``AdvancedIncSubtensor``, and integer ``inc`` whose NumPy result dtype is a
float (``uint64`` with ``int64``: a float64 round trip with C's undefined
out-of-range conversions).
"""

from __future__ import annotations

import sys

import numpy as np

from tenure.linkers.c import views
from tenure.linkers.c.cgen import c_string, comment, typenum
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.linkers.c import scalar_code as sc
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.subtensor_update import IncSubtensor

__all__ = ["COMPILE_FLAGS", "c_function", "has_c_code", "step_function"]

COMPILE_FLAGS: tuple[str, ...] = ()


_DTYPES = {"bool", "float32", "float64",
           *(f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64))}


def has_c_code(node: Apply) -> bool:
    """Whether :func:`c_function` can handle ``node`` (see the module doc)."""
    op = node.op
    if type(op) is not IncSubtensor or len(node.outputs) != 1:
        return False
    x, v = node.inputs[:2]
    xd, vd = np.dtype(x.dtype), np.dtype(v.dtype)
    if xd.name not in _DTYPES or vd.name not in _DTYPES:
        return False
    if not views.pattern_supported(op.pattern):
        return False
    if not op.set_instead_of_inc and xd.kind in "biu" and np.result_type(xd, vd).kind == "f":
        return False
    return True


def _update(op, xd: np.dtype, vd: np.dtype) -> str:
    """The C statement writing one element: ``*o`` from ``*p``."""
    xt, vt = sc.c_type(xd), sc.c_type(vd)
    if op.set_instead_of_inc:
        if xd.kind == "b":
            return f"*({xt} *)o = *({vt} *)p != 0;"
        return f"*({xt} *)o = ({xt})*({vt} *)p;"
    ct = np.result_type(xd, vd)
    if ct.kind == "b":        # bool + bool is logical or in NumPy
        return f"*({xt} *)o = *({xt} *)o || *({vt} *)p;"
    if ct.kind in "iu":
        # Unsigned arithmetic wraps as NumPy's does (signed overflow is undefined in C).
        ut = sc.c_type(np.dtype(f"uint{ct.itemsize * 8}"))
        return f"*({xt} *)o = ({xt})(({ut})*({xt} *)o + ({ut})*({vt} *)p);"
    c = sc.c_type(ct)
    return f"*({xt} *)o = ({xt})(({c})*({xt} *)o + ({c})*({vt} *)p);"


def c_function(node: Apply, fname: str) -> str:
    """The C definition of ``static int fname(PyObject **in, PyArrayObject **out)``."""
    if not has_c_code(node):
        raise NotImplementedError(f"{node.op} has no C code")
    op = node.op
    x, v = node.inputs[:2]
    xd, vd = np.dtype(x.dtype), np.dtype(v.dtype)
    region_nd = op.index_op.make_node(x, *node.inputs[2:]).outputs[0].ndim
    n = max(region_nd, 1)
    whats = [c_string(f"tenure: {op}: input {i} ({var})") for i, var in enumerate(node.inputs)]
    region = views.region_function(op.pattern, f"{fname}_region", whats[0], whats, shift=1)
    x_type, v_type = typenum(xd), typenum(vd)
    lines = [
        f"static int {fname}(PyObject **in, PyArrayObject **out)", "{",
        f"    PyArrayObject *x = tn_vw_as_array(in[0], {x_type}, {x.ndim}, {whats[0]}), *v, *v0;",
        f"    npy_intp dims[{n}], strides[{n}], vstrides[{n}], idx[{n}] = {{0}};",
        "    char *data, *vdata;",
        "    if (x == NULL) return -1;",
        # v first: copying x into out must not change what v reads.
        f"    v0 = tn_vw_as_array(in[1], {v_type}, {v.ndim}, {whats[1]});",
        "    if (v0 == NULL) { Py_DECREF(x); return -1; }",
        f"    v = tn_st_value(v0, {v_type}, tn_cl_overlap(*out, v0));",
        "    Py_DECREF(v0);",
        "    if (v == NULL) { Py_DECREF(x); return -1; }",
        "    if ((PyObject *)*out != (PyObject *)x && PyArray_CopyInto(*out, x) < 0) goto fail;",
        f"    if ({fname}_region(*out, in, dims, strides, &data) < 0) goto fail;",
        f"    if (tn_st_broadcast(v, {region_nd}, dims, vstrides, {c_string(op.fn_name)}, "
        f"{whats[1]}) < 0) goto fail;",
    ]
    lines += _loop(region_nd, _update(op, xd, vd))
    lines += ["    Py_DECREF(v); Py_DECREF(x);", "    return 0;",
              "fail:", "    Py_DECREF(v); Py_DECREF(x);", "    return -1;", "}", ""]
    return region + "\n".join(lines)


def _loop(nd: int, update: str) -> list[str]:
    """C visiting every element of the region (``data``, ``dims``,
    ``strides``) with ``v`` (``vdata``, ``vstrides``): an odometer over the
    outer axes, a strided loop over the last."""
    if nd == 0:
        return ["    vdata = PyArray_BYTES(v);",
                "    { char *o = data, *p = vdata; " + update + " }",
                "    (void)idx; (void)vstrides; (void)strides;"]
    last = nd - 1
    return [
        f"    for (int d = 0; d < {nd}; d++) if (dims[d] == 0) goto done;",
        "    for (;;) {",
        "        char *o = data, *p = PyArray_BYTES(v);",
        f"        for (int d = 0; d < {last}; d++) {{",
        "            o += idx[d] * strides[d];",
        "            p += idx[d] * vstrides[d];",
        "        }",
        f"        for (npy_intp i = 0; i < dims[{last}]; i++, o += strides[{last}], "
        f"p += vstrides[{last}]) {{",
        f"            {update}",
        "        }",
        f"        int d = {last} - 1;",
        "        while (d >= 0 && ++idx[d] == dims[d]) idx[d--] = 0;",
        "        if (d < 0) break;",
        "    }",
        "done:",
        "    (void)vdata;",
    ]


def step_function(k: int, step, offset: int, label: str, context=None) -> tuple[str, str]:
    """The kernel and the step function of a set/inc_subtensor step (the
    ``step_code`` of its :class:`~.dispatch.CEntry`): the output has x's
    shape; its buffer comes from ``tn_cl_output`` (x itself when the op
    destroys it and x fits, else a dead buffer handed on, last call's, or
    new) and the kernel copies x into it unless it is x.  ``context`` is not
    needed."""
    node = step.node
    fname = f"tn_k{k}"
    kernel = c_function(node, fname)
    x = node.inputs[0]
    nd, type_num = x.ndim, typenum(x.dtype)
    nin = len(step.inputs)
    ins = ", ".join(f"S[{s}]" for s in step.inputs)
    what = c_string(f"tenure: input 0 ({x}) of {label}")
    destroyed = "x" if node.op.destroy_map.get(0) == [0] else "NULL"
    taken = "NULL" if destroyed != "NULL" else (
        f"(aside != NULL && planned[{offset}] == 1 && planned[{offset + 1}] >= 0 ? "
        f"tn_cl_take(aside, planned[{offset + 1}], {type_num}, {nd}, PyArray_DIMS(x)) : NULL)")
    code = "\n".join([
        f"/* step {k}: {comment(label)} */",
        f"static int tn_step{k}(PyObject **S, const npy_intp *planned, PyObject **aside)",
        "{",
        f"    PyObject *in[{nin}] = {{{ins}}};",
        "    PyArrayObject *x, *out, *arrays[2];",
        # Checked first: the buffer takes x's dims, which must be the node's ndim.
        f"    x = tn_vw_as_array(S[{step.inputs[0]}], {type_num}, {nd}, {what});",
        "    if (x == NULL) return -1;",
        "    arrays[0] = x;",
        f"    arrays[1] = PyArray_Check(S[{step.inputs[1]}]) ? "
        f"(PyArrayObject *)S[{step.inputs[1]}] : NULL;",
        f"    out = tn_cl_output(S[{step.outputs[0]}], {destroyed}, arrays, 2, S, "
        f"tn_graph_inputs, TN_N_INPUTS, {type_num}, {nd}, PyArray_DIMS(x), {taken});",
        "    Py_DECREF(x);   /* the slot (or out, when it is x) still holds it */",
        "    if (out == NULL) return -1;",
        f"    if ({fname}(in, &out) < 0) {{ Py_DECREF(out); return -1; }}",
        f"    Py_SETREF(S[{step.outputs[0]}], (PyObject *)out);",
        "    return 0;", "}", ""])
    return kernel, code


# How the C linker runs IncSubtensor (.dispatch): a step of the graph's module,
# its region loops built at -O3.
register_c_op(IncSubtensor, CEntry("subtensor", sys.modules[__name__], flags=COMPILE_FLAGS,
                                   loops=True, step_code=step_function))
