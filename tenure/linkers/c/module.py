"""The C linker's per-graph module: one CPython extension that runs a whole
schedule in one call.

:func:`graph_module` turns a plan (its schedule, slots and frees) into the
source of a module with one entry::

    run(storage, inputs, shapes, py_steps, status) -> list of outputs

- ``storage``: the thunk's slot list (``plan.n_slots`` long).  ``run`` reads
  and writes it in place: inputs go into their slots, every step writes its
  outputs into theirs, dead intermediates become ``None`` after their last
  reader (the plan's ``frees``), and after the call the slots listed as
  ``clear_after`` are emptied (inputs, results handed out, the buffers those
  view) -- what is left is exactly what the contract lets a thunk keep
  between calls (borrowed outputs, and intermediates without ``allow_gc``).
- ``inputs``: a list of the input values, in ``plan.inputs`` order.
- ``shapes``: ``None``, or a C-contiguous ``intp`` array for this call's
  input-shape signature (:func:`shape_table`): ``[0]`` has bit 1 set when
  the plan hands dead buffers on, and bit 2 when calls of this signature
  pass the commit point in backup mode (see below); at :attr:`GraphModule.shape_offsets` ``[slot]``, per
  step output, ``[known, donor slot or -1, planned lengths...]``; from
  :attr:`GraphModule.stash_offset`, one flag per slot: its dead buffer is kept
  aside (not dropped) for the later step that takes it.
- ``py_steps``: a tuple, per step, of ``(perform, node)``; the steps without
  C code call ``perform(node, input_list, output_cells)`` from the C loop,
  with cells pre-filled with the slot's current value as the Python executor
  does.  One more entry at the end: the *commit hook*, called with no
  arguments at the commit point, or ``None``.
- ``status``: a writable ``intp`` array; ``status[0]`` is the index of the
  step that raised (or -1), for the caller's error note.

Transactions (see :mod:`tenure.linkers.commit`): before the commit point (the
first step writing a shared variable's storage) ``run`` checks for Ctrl-C
after every step (``PyErr_CheckSignals``) and a KeyboardInterrupt ends the
call with nothing written.  At the commit point it calls the commit hook
(the Python call path passes :func:`~tenure.linkers.interrupts.mark_committed`;
the compiled call path, which runs no Python from there to the assignment of
the updates, passes ``None``) and, in backup mode (bit 2 of ``shapes[0]``,
or no ``shapes`` at all), copies the storage of the shared variables written
from there on; if a later step raises, the copies are written back.  After
the commit point no signal is checked.

A step with a C kernel (elementwise, products, reductions, nnet) gets its output
buffer as follows: an in-place op's output *is* the destroyed input when that
has the output's dtype and shape (inputs overlapping it other than exactly
are copied first); otherwise the dead buffer the plan hands it (see
``tn_cl_take``: only when nobody else holds it); otherwise the array the slot
still holds from the last
call (a borrowed output, or an intermediate without ``allow_gc``) when its
dtype and shape fit and it overlaps neither the step's inputs nor any input
of the graph; otherwise a new C-ordered array.  The shape is the planned one
when known, else computed in C (broadcast for elementwise and reductions,
``fname_shape`` for products).  The kernels check every shape on each call,
so a wrong plan raises, never crashes.

A view step (``DimShuffle``, ``Reshape``, basic ``Subtensor``:
:mod:`.views`) gets no buffer: its function returns a new array object over
its input's memory (``Reshape`` copies where NumPy would), which goes into
the slot.  A subtensor step (``set/inc_subtensor`` with basic indices:
:mod:`.subtensor`) gets its buffer as above with ``x``'s shape (``x`` itself
when the op destroys it and it fits); the kernel copies ``x`` into any other
buffer, then writes the region.

What a module holds: only what depends on the graph.  The C that does not
(the loop drivers, these steps' helpers ``tn_cl_*``, views, products,
softmax) is the C runtime's (:mod:`.runtime`: real files compiled once per
machine, reached through ``tn_rt``); the arithmetic of elementwise nodes and
reductions is in loop libraries shared by every graph (:mod:`.kernels`),
which the module's descriptions point to once ``bind_loops(capsules)`` has
run (``run`` refuses to start before).  What is left is glue -- the steps,
``run`` -- compiled at ``-O1``, and the region loops of subtensor steps.

The source depends only on the graph, the plan made without sizes, the kept
slots and ``allow_gc``: compiling the same graph again (in this process or
another) hits the on-disk cache.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from tenure.linkers.c import blas, elemwise
from tenure.linkers.c import nnet as _nnet
from tenure.linkers.c import reduce as _reduce
from tenure.linkers.c import subtensor as _subtensor
from tenure.linkers.c import runtime, views
from tenure.linkers.c.cgen import C_DTYPES, HEADERS, c_string, comment, typenum
from tenure.linkers.commit import CommitPoint
from tenure.linkers.plan import Plan
from tenure.symbolic.graph import Apply

__all__ = ["GraphModule", "graph_module", "step_kind"]


def step_kind(node: Apply) -> str:
    """``"elemwise"``, ``"blas"``, ``"reduce"``, ``"nnet"``, ``"view"``, ``"subtensor"``
    (C code), or ``"py"`` (its perform)."""
    if len(node.outputs) != 1:
        return "py"
    try:
        typenum(node.outputs[0].dtype)
    except NotImplementedError:
        return "py"
    families = [("elemwise", elemwise), ("blas", blas)]
    families += [("reduce", _reduce), ("nnet", _nnet)]
    families += [("view", views), ("subtensor", _subtensor)]
    for kind, family in families:
        try:
            if family.has_c_code(node):
                return kind
        except Exception:  # noqa: BLE001 -- no C code rather than no function
            continue
    return "py"


@dataclass
class GraphModule:
    """The source of one graph's module and what its caller needs to know."""

    name: str
    source: str
    flags: tuple[str, ...]
    #: per step: "elemwise", "blas", "reduce", "nnet" (kernels writing an
    #: output buffer), "view" (a new array over its input's memory: shape ops,
    #: basic indexing), "subtensor" (set/inc_subtensor into a copy of x, or x
    #: itself in place), or "py" (the op's perform)
    kinds: list[str]
    #: step output slot -> offset of its entry in the shape table
    shape_offsets: dict[int, int] = field(default_factory=dict)
    #: length of the shape table
    shape_table_size: int = 0
    #: where the table's stash flags (one per slot) start
    stash_offset: int = 0
    #: the elementwise loops the module must be bound to before it runs
    #: (``bind_loops(kernels.loops(keys))``, in this order; see :mod:`.kernels`)
    loop_kernels: list = field(default_factory=list)

    @property
    def n_c_steps(self) -> int:
        return sum(k != "py" for k in self.kinds)


def _slots(values) -> str:
    return "{" + ", ".join(str(v) for v in values) + "}" if values else "{0}"


def _c_step(k: int, step, kind: str, offset: int, label: str) -> tuple[str, str]:
    """The kernel and the step function of one C step."""
    node = step.node
    family = {"elemwise": elemwise, "blas": blas, "reduce": _reduce, "nnet": _nnet}[kind]
    fname = f"tn_k{k}"
    # Elementwise and reduction loops are compiled apart and bound after
    # loading (kernels.py).
    kernel = (family.c_function(node, fname, bound=True) if kind in LOOP_FAMILIES
              else family.c_function(node, fname))
    out = node.outputs[0]
    nd = out.ndim
    nin = len(node.inputs)
    weak = {i for i, _, _ in getattr(node.op, "weak_inputs", ())} if kind == "elemwise" else set()
    lines = [f"/* step {k}: {comment(label)} */",
             f"static int tn_step{k}(PyObject **S, const npy_intp *planned, PyObject **aside)",
             "{",
             f"    PyArrayObject *in[{max(nin, 1)}], *out;",
             "    npy_intp shape[NPY_MAXDIMS + 1];"]
    for i, var in enumerate(node.inputs):
        if i in weak:
            lines.append(f"    in[{i}] = NULL;")
        else:
            what = c_string(f"tenure: input {i} ({var}) of {label}")
            lines.append(f"    if (tn_cl_array(S[{step.inputs[i]}], &in[{i}], {what}) < 0) "
                         "return -1;")
    lines.append(f"    if (!tn_cl_planned(planned, {offset}, {nd}, shape)) {{")
    if kind == "elemwise":
        lines.append(f"        tn_cl_broadcast(in, {nin}, {nd}, shape);")
    elif kind == "blas":
        lines.append(f"        if ({fname}_shape(in, shape) < 0) return -1;")
    elif kind == "nnet" and not hasattr(node.op, "keepdims"):  # softmax, log_softmax
        lines += [f"        shape[{d}] = PyArray_DIM(in[0], {d});" for d in range(nd)]
    else:
        op = node.op
        full_nd = max(v.ndim for v in node.inputs)
        axes = set(op.axis)
        lines.append("        npy_intp full[NPY_MAXDIMS + 1];")
        lines.append(f"        tn_cl_broadcast(in, {nin}, {full_nd}, full);")
        o = 0
        for d in range(full_nd):
            if d not in axes:
                lines.append(f"        shape[{o}] = full[{d}];")
                o += 1
            elif op.keepdims:
                lines.append(f"        shape[{o}] = 1;")
                o += 1
        if o != nd:
            raise NotImplementedError(f"{node}: reduced shape has {o} axes, output {nd}")
        lines.append("        (void)full;")
    lines.append("    }")
    destroyed = node.op.destroy_map.get(0)
    if destroyed and destroyed[0] not in weak:
        dest = f"in[{destroyed[0]}]"
    else:
        dest = "NULL"
        destroyed = None
    graph_in = "tn_graph_inputs"
    taken = "NULL" if destroyed else (
        f"(aside != NULL && planned[{offset}] == 1 && planned[{offset + 1}] >= 0 ? "
        f"tn_cl_take(aside, planned[{offset + 1}], {typenum(out.dtype)}, {nd}, shape) : NULL)")
    lines.append(f"    out = tn_cl_output(S[{step.outputs[0]}], {dest}, in, {nin}, S, {graph_in}, "
                 f"TN_N_INPUTS, {typenum(out.dtype)}, {nd}, shape, {taken});")
    lines.append("    if (out == NULL) return -1;")
    if destroyed and kind == "elemwise":
        # Inputs that overlap the output other than exactly are read from a copy.
        lines += [
            f"    PyArrayObject *copies[{nin}] = {{NULL}};",
            f"    for (int i = 0; i < {nin}; i++) {{",
            "        if (in[i] != NULL && tn_cl_unsafe_overlap(out, in[i])) {",
            "            copies[i] = (PyArrayObject *)PyArray_NewCopy(in[i], NPY_ANYORDER);",
            "            if (copies[i] == NULL) {",
            "                for (int j = 0; j < i; j++) Py_XDECREF(copies[j]);",
            "                Py_DECREF(out);",
            "                return -1;",
            "            }",
            "            in[i] = copies[i];",
            "        }",
            "    }",
            f"    int rc = {fname}(in, &out);",
            f"    for (int i = 0; i < {nin}; i++) Py_XDECREF(copies[i]);",
            "    if (rc < 0) { Py_DECREF(out); return -1; }"]
    else:
        lines.append(f"    if ({fname}(in, &out) < 0) {{ Py_DECREF(out); return -1; }}")
    lines += [f"    Py_SETREF(S[{step.outputs[0]}], (PyObject *)out);",
              "    return 0;", "}", ""]
    return kernel, "\n".join(lines)


def _view_step(k: int, step, kind: str, offset: int, label: str) -> tuple[str, str]:
    """The kernel and the step function of a view step: ``fname(in)`` returns
    the view (a new reference) that goes into the output slot; no buffer is
    allocated or reused, so the shape table is not read."""
    fname = f"tn_k{k}"
    kernel = views.c_function(step.node, fname)
    nin = len(step.inputs)
    ins = ", ".join(f"S[{s}]" for s in step.inputs)
    code = "\n".join([
        f"/* step {k}: {comment(label)} */",
        f"static int tn_step{k}(PyObject **S, const npy_intp *planned, PyObject **aside)",
        "{",
        f"    PyObject *in[{max(nin, 1)}] = {{{ins}}};",
        f"    PyObject *out = {fname}(in);",
        "    (void)planned; (void)aside;",
        "    if (out == NULL) return -1;",
        f"    Py_SETREF(S[{step.outputs[0]}], out);",
        "    return 0;", "}", ""])
    return kernel, code


def _subtensor_step(k: int, step, kind: str, offset: int, label: str) -> tuple[str, str]:
    """The kernel and the step function of a set/inc_subtensor step: the output
    has x's shape; its buffer comes from ``tn_cl_output`` (x itself when the op
    destroys it and x fits, else a dead buffer handed on, last call's, or new)
    and the kernel copies x into it unless it is x."""
    node = step.node
    fname = f"tn_k{k}"
    kernel = _subtensor.c_function(node, fname)
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


#: the kernel families whose loops are compiled apart (:mod:`.kernels`)
LOOP_FAMILIES = {"elemwise": elemwise, "reduce": _reduce}


def _bind_lines(loop_kernels) -> str:
    """The body of ``bind_loops``: capsule ``i`` into description ``i``."""
    lines = []
    for i, (user, loop) in enumerate(loop_kernels):
        if loop.struct == "tn_ew_loops":
            lines += [f"    {{ const tn_ew_loops *l = tn_loops_of(capsules, {i}, "
                      "TN_EW_LOOPS_CAPSULE);",
                      "      if (l == NULL) return NULL;",
                      f"      {user}.typed = l->typed; {user}.strided = l->strided; }}"]
        else:
            lines += [f"    {{ const tn_rd_loops *l = tn_loops_of(capsules, {i}, "
                      "TN_RD_LOOPS_CAPSULE);",
                      "      if (l == NULL) return NULL;",
                      f"      {user}.loops = *l; }}"]
    return "\n".join(lines)


def graph_module(plan: Plan, keep_slots, clear_after,
                 commit: CommitPoint | None = None) -> GraphModule:
    """The module running ``plan``'s schedule (see the module doc).

    ``keep_slots``: output slots whose buffers are kept between calls;
    ``clear_after``: the slots emptied when a call returns; ``commit``: the
    schedule's commit point.
    """
    kinds, loops, kernels, step_funcs, calls, loop_kernels = [], [], [], [], [], []
    # The shape table: [reuse flag], per step output [known, donor, dims...], stash flags.
    offsets: dict[int, int] = {}
    size = 1
    for step in plan.steps:
        for slot, var in zip(step.outputs, step.node.outputs):
            if slot not in offsets and np.dtype(var.dtype).name in C_DTYPES:
                offsets[slot] = size
                size += 2 + var.ndim
    stash = size
    size += plan.n_slots
    used = set()
    commit_step = commit.step if commit is not None else len(plan.steps)
    for k, step in enumerate(plan.steps):
        node = step.node
        kind = step_kind(node)
        label = str(node)
        if k == commit_step:
            calls.append(f"    /* the commit point (tenure.linkers.commit) */\n"
                         f"    if (tn_cl_commit(S, py_steps, {len(plan.steps)}, planned, "
                         f"tn_written, {len(commit.written)}, backups) < 0) "
                         f"{{ status[0] = {k}; goto fail; }}\n"
                         f"    committed = 1;\n"
                         f"    tn_interruptible = 0;")
        if kind != "py":
            make_step = {"view": _view_step, "subtensor": _subtensor_step}.get(kind, _c_step)
            try:
                kernel, code = make_step(k, step, kind, offsets[step.outputs[0]], label)
            except NotImplementedError:
                kind = "py"
            else:
                # The subtensor kernels' region loops first, at -O3; the rest is glue.
                (loops if kind == "subtensor" else kernels).append(kernel)
                step_funcs.append(code)
                used.add(kind)
                if kind in LOOP_FAMILIES:
                    loop_kernels.append((f"tn_k{k}_kernel",
                                         LOOP_FAMILIES[kind].loop_kernel(node)))
        kinds.append(kind)
        if kind == "py":
            takes = "".join(
                f" pre[{j}] = (PyObject *)tn_cl_take_planned(aside, planned, {offsets[o]}, "
                f"{typenum(v.dtype)}, {v.ndim});"
                for j, (o, v) in enumerate(zip(step.outputs, node.outputs)) if o in offsets)
            calls.append(f"    /* step {k}: {comment(label)} */\n"
                         f"    {{ static const Py_ssize_t ins[] = {_slots(step.inputs)}, "
                         f"outs[] = {_slots(step.outputs)};\n"
                         f"      PyObject *pre[{max(len(step.outputs), 1)}] = {{NULL}};{takes}\n"
                         f"      if (tn_cl_py_step(S, PyTuple_GET_ITEM(py_steps, {k}), ins, "
                         f"{len(step.inputs)}, outs, {len(step.outputs)}, pre) < 0) "
                         f"{{ status[0] = {k}; goto fail; }} }}")
        else:
            calls.append(f"    if (tn_step{k}(S, planned, aside) < 0) "
                         f"{{ status[0] = {k}; goto fail; }}")
        for f in step.frees:
            calls.append(f"    tn_cl_free(S, aside, planned, {stash}, {f});")
        if k < commit_step:
            # Ctrl-C between steps, until the call has written shared storage.
            calls.append(f"    if (PyErr_CheckSignals() < 0) {{ status[0] = {k}; goto fail; }}")

    # The runtime (its API comes first) holds the drivers and the loops of
    # products and softmax; elementwise and reduction loops are in loop
    # libraries: what is left here is glue, and the subtensor loops.
    support = [runtime.header()]
    flags = list(elemwise.COMPILE_FLAGS)
    for kind, family in (("elemwise", elemwise), ("reduce", _reduce), ("nnet", _nnet),
                         ("view", views), ("subtensor", _subtensor), ("blas", blas)):
        if kind in used:
            flags += list(family.COMPILE_FLAGS)
    flags = tuple(dict.fromkeys(flags))
    n_steps = len(plan.steps)
    inputs, outputs = plan.inputs, plan.outputs
    input_assign = "\n".join(
        f"    v = PyList_GET_ITEM(inputs, {j}); Py_INCREF(v); Py_SETREF(S[{s}], v);"
        for j, s in enumerate(inputs))
    results = "\n".join(
        f"    v = S[{s}]; Py_INCREF(v); PyList_SET_ITEM(results, {j}, v);"
        for j, s in enumerate(outputs))
    clears = "\n".join(f"    tn_cl_clear(S, {s});" for s in sorted(clear_after))
    written = commit.written if commit is not None else ()
    body = f"""
#define TN_N_INPUTS {len(inputs)}
static const Py_ssize_t tn_graph_inputs[] = {_slots(inputs)};
/* input slots of the shared variables written from the commit point on */
static const Py_ssize_t tn_written[] = {_slots(written)};

{"".join(loops)}
/* From here on, glue: straight-line code around calls (the loops are above,
 * in the loop libraries and in the runtime).  -O1 builds it in a fraction of
 * -O3's time, and it runs as fast. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize ("O1")
#endif
{"".join(kernels)}
{chr(10).join(step_funcs)}

static int tn_bound = {int(not loop_kernels)};

/* The loops of capsule `i` (of type `name`), or NULL with an exception set. */
static const void *tn_loops_of(PyObject *capsules, Py_ssize_t i, const char *name)
{{
    return PyCapsule_GetPointer(PyTuple_GET_ITEM(capsules, i), name);
}}

static PyObject *tn_bind_loops(PyObject *self, PyObject *capsules)
{{
    const Py_ssize_t n = {len(loop_kernels)};
    (void)self;
    if (!PyTuple_Check(capsules) || PyTuple_GET_SIZE(capsules) != n) {{
        PyErr_Format(PyExc_TypeError, "bind_loops: expected a tuple of %zd loop capsules", n);
        return NULL;
    }}
{_bind_lines(loop_kernels)}
    tn_bound = 1;
    Py_RETURN_NONE;
}}

static PyObject *tn_run(PyObject *self, PyObject *args)
{{
    PyObject *storage, *inputs, *shapes, *py_steps, *status_obj, *results = NULL, *v, **S;
    PyObject **aside = NULL;     /* dead buffers waiting for the step that takes them */
    PyObject *backups[{max(len(written), 1)}] = {{NULL}};   /* backup mode: shared storage */
    int committed = 0;
    const int was_interruptible = tn_interruptible;   /* a call from inside another's step */
    const npy_intp *planned = NULL;
    npy_intp *status;
    (void)self; (void)tn_written; (void)committed;
    if (!tn_bound) {{
        PyErr_SetString(PyExc_RuntimeError, "run: this graph's elementwise loops are not bound "
                        "yet (bind_loops)");
        return NULL;
    }}
    if (!PyArg_ParseTuple(args, "O!O!OO!O!:run", &PyList_Type, &storage, &PyList_Type, &inputs,
                          &shapes, &PyTuple_Type, &py_steps, &PyArray_Type, &status_obj))
        return NULL;
    if (PyList_GET_SIZE(storage) != {plan.n_slots} || PyList_GET_SIZE(inputs) != {len(inputs)}
            || PyTuple_GET_SIZE(py_steps) != {n_steps + 1}) {{
        PyErr_SetString(PyExc_ValueError, "run: storage, inputs or py_steps of the wrong length");
        return NULL;
    }}
    if (PyArray_TYPE((PyArrayObject *)status_obj) != NPY_INTP
            || !PyArray_ISCARRAY((PyArrayObject *)status_obj)
            || PyArray_SIZE((PyArrayObject *)status_obj) < 1) {{
        PyErr_SetString(PyExc_ValueError, "run: status must be a writeable intp array");
        return NULL;
    }}
    status = (npy_intp *)PyArray_DATA((PyArrayObject *)status_obj);
    status[0] = -1;
    if (shapes != Py_None) {{
        if (!PyArray_Check(shapes) || PyArray_TYPE((PyArrayObject *)shapes) != NPY_INTP
                || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)shapes)
                || PyArray_SIZE((PyArrayObject *)shapes) != {size}) {{
            PyErr_SetString(PyExc_ValueError, "run: shapes must be None or a contiguous intp "
                            "array of length {size}");
            return NULL;
        }}
        planned = (const npy_intp *)PyArray_DATA((PyArrayObject *)shapes);
        if (planned[0] & 1) {{
            aside = (PyObject **)PyMem_Calloc({plan.n_slots}, sizeof(PyObject *));
            if (aside == NULL)
                return PyErr_NoMemory();
        }}
    }}
    S = PySequence_Fast_ITEMS(storage);
    tn_interruptible = {int(commit_step > 0)};   /* loops stop for Ctrl-C until the commit point */
{input_assign}
{chr(10).join(calls)}
    results = PyList_New({len(outputs)});
    if (results == NULL)
        goto fail;
{results}
{clears}
    (void)v;
fail:
    tn_interruptible = was_interruptible;
    if (results == NULL && committed)
        tn_cl_restore(S, tn_written, {len(written)}, backups);
    for (Py_ssize_t i = 0; i < {len(written)}; i++)
        Py_XDECREF(backups[i]);
    if (aside != NULL) {{
        for (Py_ssize_t i = 0; i < {plan.n_slots}; i++)
            Py_XDECREF(aside[i]);
        PyMem_Free(aside);
    }}
    return results;
}}

static PyMethodDef tn_methods[] = {{
    {{"run", (PyCFunction)tn_run, METH_VARARGS,
     "run(storage, inputs, shapes, py_steps, status): run the whole schedule once"}},
    {{"bind_loops", (PyCFunction)tn_bind_loops, METH_O,
     "bind_loops(capsules): the elementwise loops, from tenure.linkers.c.kernels.loops"}},
    {{NULL, NULL, 0, NULL}}
}};
"""
    source_body = HEADERS + "".join(support) + body
    digest = hashlib.sha256((source_body + repr(flags)).encode("utf-8")).hexdigest()[:24]
    name = f"tn_graph_{digest}"
    source = source_body + f"""
static struct PyModuleDef tn_module = {{
    PyModuleDef_HEAD_INIT, {c_string(name)}, "a tenure graph, compiled", -1, tn_methods,
    NULL, NULL, NULL, NULL
}};

PyMODINIT_FUNC PyInit_{name}(void)
{{
    import_array();
    if (tn_import_runtime() < 0)
        return NULL;
    return PyModule_Create(&tn_module);
}}
"""
    return GraphModule(name, source, flags, kinds, offsets, size, stash,
                       [loop for _, loop in loop_kernels])


def shape_table(module: GraphModule, plan: Plan, shapes: dict | None, sized: Plan | None = None):
    """The ``shapes`` argument of ``run``: the planned shapes ``{variable:
    shape or None}`` and, from ``sized`` (a plan with sizes for the same
    schedule), which dead buffer each output takes (``None``: nothing known)."""
    if shapes is None:
        return None
    table = np.zeros(module.shape_table_size, dtype=np.intp)
    for slot, offset in module.shape_offsets.items():
        table[offset + 1] = -1
        var = plan.variables[slot]
        shape = shapes.get(var)
        if shape is None or len(shape) != var.ndim:
            continue
        try:
            dims = [int(d) for d in shape]
        except (TypeError, ValueError):
            continue
        if any(d < 0 for d in dims):
            continue
        table[offset] = 1
        table[offset + 2:offset + 2 + len(dims)] = dims
    if sized is not None and sized.donors:
        for step in sized.steps:
            for slot, donor in zip(step.outputs, step.reuse):
                offset = module.shape_offsets.get(slot)
                if donor is not None and offset is not None and table[offset] == 1:
                    table[offset + 1] = donor
                    table[module.stash_offset + donor] = 1
                    table[0] |= 1
    return table
