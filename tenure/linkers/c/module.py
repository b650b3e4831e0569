"""A graph's schedule for the C runtime's interpreter, and the module of the
steps it cannot describe.

:func:`graph_module` turns a plan (its schedule, slots and frees) into a
:class:`ScheduleDescription` -- per step its kind, slots, frees and, for a C
kernel, what the kernel needs to know -- and, when some step's C depends on
the node beyond what a description says, the source of a small module of
those steps.  The runtime's ``Schedule(description, loops, module)``
(``src/interpret.c``) is then the function that runs the whole schedule in
one C call::

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
  pass the commit point in backup mode (see below); at
  :attr:`GraphModule.shape_offsets` ``[slot]``, per step output, ``[known,
  donor slot or -1, planned lengths...]``; from
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

What is compiled per graph: as little as possible.  Elementwise nodes,
reductions, products (but outer products), Gemm, softmax, log_softmax,
logsumexp and views are data: the interpreter calls the runtime's drivers
and view helpers with their description, and the arithmetic of elementwise
nodes and reductions is in loop libraries shared by every graph
(:mod:`.kernels`).  A graph made of those, and of steps without C code,
compiles nothing once its loops exist.  Set/inc_subtensor and outer
products are step functions (``tn_step_fn``) of the graph's module, which
hands them to the interpreter in its ``steps`` capsule: glue compiled at
``-O1``, and the region loops of subtensor steps at ``-O3``.  That source
depends only on the graph and the plan made without sizes: compiling the
same graph again (in this process or another) hits the on-disk cache.

Which nodes run which way is the dispatch table's (:mod:`.dispatch`): per op
class an entry registered by its family's module, naming the step kind and
either one of the built-in steps above (described to the interpreter) or a
compiled step of the graph's module (how ``Outer`` runs, and how any new op
family joins, without a new step kind in the interpreter).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import NamedTuple

import numpy as np

from tenure.linkers.c import blas, dispatch, elemwise
from tenure.linkers.c import nnet as _nnet
from tenure.linkers.c import reduce as _reduce
from tenure.linkers.c import advanced, prelude, runtime, shapes, views
from tenure.linkers.c.cgen import C_DTYPES, HEADERS, c_string, input_label
from tenure.linkers.commit import CommitPoint
from tenure.linkers.plan import Plan
from tenure.symbolic.graph import Apply

__all__ = ["GraphModule", "graph_module", "shape_table", "step_kind", "step_module_prelude"]


def step_kind(node: Apply, context: dispatch.CContext | None = None) -> str:
    """``"elemwise"``, ``"blas"``, ``"reduce"``, ``"nnet"``, ``"view"``, ``"shape"``,
    ``"advanced"``, ``"subtensor"``
    (C code: the kind of the node's entry in :mod:`.dispatch`), or ``"py"``
    (its perform)."""
    entry = dispatch.entry_for(node, context)
    return "py" if entry is None else entry.kind


@dataclass
class GraphModule:
    """One graph's schedule as the runtime's interpreter runs it, and the
    source of the module holding its compiled steps (if any)."""

    #: the module's name, and its source: None when no step needs compiling
    name: str
    source: str | None
    flags: tuple[str, ...]
    #: per step: "elemwise", "blas", "reduce", "nnet" (kernels writing an
    #: output buffer), "view" (a new array over its input's memory: shape ops,
    #: basic indexing), "shape" (Shape, SumTo, ExpandTo, Alloc, Arange,
    #: MakeVector, SpecifyShape), "advanced" (integer array indexing and its
    #: updates), "subtensor" (set/inc_subtensor into a copy of x, or x itself
    #: in place), another registered family's kind (:mod:`.dispatch`), or "py"
    #: (the op's perform)
    kinds: list[str]
    #: step output slot -> offset of its entry in the shape table
    shape_offsets: dict[int, int] = field(default_factory=dict)
    #: length of the shape table
    shape_table_size: int = 0
    #: where the table's stash flags (one per slot) start
    stash_offset: int = 0
    #: the loops the schedule runs, in the order of its loop indices
    #: (``kernels.loops(keys)`` gives their capsules; see :mod:`.kernels`)
    loop_kernels: list = field(default_factory=list)
    #: the ``description`` of ``Schedule(description, loops, module)``
    description: ScheduleDescription | None = None
    #: per step: its :class:`~.dispatch.CEntry`, or None (a "py" step)
    entries: list = field(default_factory=list)

    @property
    def n_c_steps(self) -> int:
        return sum(k != "py" for k in self.kinds)


#: the step kinds of the interpreter (src/interpret.c)
PY, ELEMWISE, REDUCE, PRODUCT, GEMM, NNET, COMPILED, VIEW, SHAPE, ADVANCED = range(10)


# The description the interpreter reads (src/interpret.c parses these as the
# tuples they are; the names are for Python readers and tests).

class KernelHead(NamedTuple):
    """What every C kernel step describes."""
    name: str                      # for error messages
    whats: tuple[str, ...]         # per input: how a wrong kind of value is named
    weak: tuple[int, ...]          # per input: 1 = a Python number, never read
    offset: int                    # output 0's entry in the shape table
    out_type: int
    out_nd: int
    destroyed: int                 # the input the output overwrites, or -1


class Operands(NamedTuple):
    """Per operand of a loop (the output first)."""
    types: tuple[int, ...]
    dtypes: tuple[str, ...]
    ndims: tuple[int, ...]
    labels: tuple[str, ...]


class ElemwiseParams(NamedTuple):
    read: tuple[int, ...]          # operand j + 1 is input read[j]
    operands: Operands
    width: int                     # the widest itemsize
    minsize: int                   # threads for at least this many elements; -1: never
    threads: int
    constants: bytes               # the values of the loops' parameters (its Python numbers)
    loop: int                      # index into the loops


class ReduceParams(NamedTuple):
    full_nd: int                   # the inputs' broadcast ndim
    shape_src: tuple[int, ...]     # per output axis: its axis of the broadcast shape, or -1
    operands: Operands
    reduced: tuple[int, ...]       # per axis of the broadcast shape
    keepdims: int
    identity: bytes                # in the output dtype
    no_identity: str | None        # the ufunc named when an empty reduction has no identity
    minsize: int
    threads: int
    constants: bytes               # the values of the loops' parameters (a composite's numbers)
    loop: int


class Axes(NamedTuple):
    """The roles of a product's axes (the runtime's ``tn_mm_axes``)."""
    nb: int
    ba: tuple[int, ...]
    bb: tuple[int, ...]
    bo: tuple[int, ...]
    am: int
    ak: int
    bk: int
    bn: int
    om: int
    on: int
    ond: int


class ProductParams(NamedTuple):
    dtype: str
    labels: tuple[str, ...]        # per input
    in_nd: tuple[int, ...]
    axes: Axes


class NnetParams(NamedTuple):
    dtype: str
    kind: int                      # softmax, log_softmax, logsumexp (src/nnet.c.src)
    reduced: tuple[int, ...]       # per input axis
    keepdims: int                  # -1: the output has the input's shape
    full_nd: int
    shape_src: tuple[int, ...] | None


class ViewParams(NamedTuple):
    kind: int                      # views.DIMSHUFFLE, RESHAPE, SUBTENSOR
    name: str                      # the op, for error messages
    whats: tuple[str, ...]         # per input
    in_type: int
    in_nd: int
    out_nd: int
    order: tuple[int, ...]         # DimShuffle: per output axis, the input axis or -1
    drop: tuple[int, ...]          # DimShuffle: the axes dropped
    entries: tuple[int, ...]       # Subtensor: views.index_entries(pattern)


class ShapeParams(NamedTuple):
    kind: int                      # shapes.SHAPE, SUM_TO, ... (shapes.shape_kind)
    name: str                      # the op's name in errors
    whats: tuple[str, ...]         # per input
    in_type: int                   # (Arange, MakeVector: the output's)
    in_nd: int
    out_nd: int
    summing: object                # SumTo: perform's sum (shapes.summing); else None
    take: int                      # Alloc: the table entry of a buffer it may take, or -1
    spec: tuple[int, ...]          # SpecifyShape: shapes.spec(node); else ()


class AdvancedParams(NamedTuple):
    kind: int                      # advanced.TAKE, SET, INC
    name: str                      # the op's name in errors
    whats: tuple[str, ...]         # per input
    in_type: int
    in_nd: int
    arrays: tuple[int, ...]        # per pattern entry: the input of its index array, -1: all
    inplace: int
    take: int                      # an update: the table entry of a buffer it may take, or -1
    add_at: object                 # an inc: np.add.at; else None


class ScheduleStep(NamedTuple):
    kind: int
    ins: tuple[int, ...]           # slots
    outs: tuple[int, ...]
    frees: tuple[int, ...]         # slots dead after this step
    head: KernelHead | None        # C kernel steps
    #: per kind: the params above; a perform's takes (per output: table entry
    #: of the buffer it may take or -1, typenum, ndim); a compiled step's index
    params: object


class ScheduleDescription(NamedTuple):
    n_slots: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    clear: tuple[int, ...]         # emptied when a call returns
    written: tuple[int, ...]       # shared storage written from the commit point on
    commit_step: int               # len(steps): none
    table_size: int
    stash: int                     # where the table's stash flags start
    steps: tuple[ScheduleStep, ...]


def _slots(values) -> str:
    return "{" + ", ".join(str(v) for v in values) + "}" if values else "{0}"


def _typenum(dtype) -> int:
    """NumPy's C type number of ``dtype``, as the interpreter compares it."""
    return np.dtype(dtype).num


def _head(k: int, step, offset: int, label: str, name: str | None = None,
          weak: frozenset = frozenset()) -> tuple:
    """What every C kernel step describes: ``(name, whats, weak, offset,
    out_type, out_nd, destroyed)``."""
    node = step.node
    out = node.outputs[0]
    destroyed = node.op.destroy_map.get(0, [-1])[0]
    whats = tuple(f"tenure: input {i} ({var}) of {label}" for i, var in enumerate(node.inputs))
    return KernelHead(name or f"tn_k{k}", whats,
                      tuple(int(i in weak) for i in range(len(node.inputs))), offset,
                      _typenum(out.dtype), out.ndim, destroyed)


def _operands(dtypes, ndims, labels) -> Operands:
    return Operands(tuple(_typenum(d) for d in dtypes), tuple(np.dtype(d).name for d in dtypes),
                    tuple(ndims), tuple(labels))


def _reduced_shape(full_nd: int, axes, keepdims: bool) -> tuple[int, ...]:
    """Per output axis: the axis of the inputs' broadcast shape it has, or -1
    (a reduced axis kept as 1)."""
    return tuple(d if d not in axes else -1 for d in range(full_nd)
                 if d not in axes or keepdims)


def _elemwise_step(k: int, step, offsets: dict, label: str, loops: list) -> tuple:
    node = step.node
    d = elemwise.description(node)
    weak = frozenset(i for i, _, _ in getattr(node.op, "weak_inputs", ()))
    loops.append(elemwise.loop_kernel(node))
    return ELEMWISE, _head(k, step, offsets[step.outputs[0]], label, weak=weak), ElemwiseParams(
        d.read, _operands(d.dtypes, d.ndims, d.labels), d.width, d.minsize, d.threads,
        d.constants, len(loops) - 1)


def _reduce_step(k: int, step, offsets: dict, label: str, loops: list) -> tuple:
    node = step.node
    d = _reduce.description(node)
    axes = {a for a, r in enumerate(d.reduced) if r}
    loops.append(_reduce.loop_kernel(node))
    return REDUCE, _head(k, step, offsets[step.outputs[0]], label), ReduceParams(
        d.full_nd, _reduced_shape(d.full_nd, axes, d.keepdims),
        _operands(d.dtypes, d.ndims, d.labels), d.reduced, int(d.keepdims), d.identity,
        d.no_identity, d.minsize, d.threads, d.constants, len(loops) - 1)


def _product_step(code: int, k: int, step, offsets: dict, label: str, loops: list) -> tuple:
    """A ``Dot`` or ``MatMul`` (``code`` PRODUCT), or a ``Gemm`` (GEMM)."""
    node = step.node
    ax = blas.product_axes(node)
    axes = Axes(len(ax["bo"]), tuple(ax["ba"]), tuple(ax["bb"]), tuple(ax["bo"]), ax["am"],
                ax["ak"], ax["bk"], ax["bn"], ax["om"], ax["on"], ax["ond"])
    labels = tuple(input_label(node, i) for i in range(len(node.inputs)))
    return code, _head(k, step, offsets[step.outputs[0]], label), ProductParams(
        blas.product_dtype(node), labels, tuple(v.ndim for v in node.inputs), axes)


def _nnet_step(k: int, step, offsets: dict, label: str, loops: list) -> tuple:
    node = step.node
    nn_kind, reduced, keepdims, _ = _nnet.spec(node)
    full_nd = node.inputs[0].ndim
    src = None if keepdims < 0 else _reduced_shape(
        full_nd, {a for a, r in enumerate(reduced) if r}, bool(keepdims))
    return NNET, _head(k, step, offsets[step.outputs[0]], label, name=str(node.op)), NnetParams(
        np.dtype(node.outputs[0].dtype).name, nn_kind, tuple(reduced), keepdims, full_nd, src)


def _view_step(k: int, step, offsets: dict, label: str, loops: list) -> tuple:
    """A view step: no kernel head (no buffer, no shape table entry)."""
    op, x = step.node.op, step.node.inputs[0]
    kind = views.view_kind(step.node)
    order = drop = entries = ()
    if kind == views.DIMSHUFFLE:
        order = tuple(-1 if e == "x" else e for e in op.new_order)
        drop = tuple(op.drop)
    elif kind == views.SUBTENSOR:
        entries = views.index_entries(op.pattern)
    return VIEW, None, ViewParams(kind, str(op), views.whats(step.node), _typenum(x.dtype),
                                  x.ndim, step.node.outputs[0].ndim, order, drop, entries)


def _shape_step(k: int, step, offsets: dict, label: str, loops: list) -> tuple:
    """A shape step: no kernel head (its output is a view, its own array, or
    for an alloc the buffer the plan hands on)."""
    node = step.node
    # (an op made of scalars of any dtype, maybe none, is described by its output)
    x = node.outputs[0] if shapes.made_of_scalars(node) else node.inputs[0]
    name = getattr(node.op, "what", str(node.op))   # (expand_to's errors name it so)
    return SHAPE, None, ShapeParams(shapes.shape_kind(node), name, shapes.whats(node),
                                    _typenum(x.dtype), x.ndim, node.outputs[0].ndim,
                                    shapes.summing(node),
                                    shapes.take(node, step.outputs[0], offsets),
                                    shapes.spec(node))


def _advanced_step(k: int, step, offsets: dict, label: str, loops: list) -> tuple:
    """An integer array indexing step: no kernel head (NumPy indexes)."""
    node = step.node
    x = node.inputs[0]
    return ADVANCED, None, AdvancedParams(
        advanced.kind(node), advanced.fn_name(node), advanced.whats(node), _typenum(x.dtype),
        x.ndim, advanced.arrays(node), int(getattr(node.op, "inplace", False)),
        advanced.take(node, step.outputs[0], offsets), advanced.add_at(node))


#: per built-in step of :mod:`.dispatch` (the interpreter's fixed enum):
#: ``(k, step, offsets, label, loops) -> (code, head, params)`` of a step that
#: is data; ``loops`` collects the loops it runs.  A new family is a compiled
#: step (``CEntry.step_function``), never a new entry here.
_DESCRIBE = {
    "elemwise": _elemwise_step,
    "reduce": _reduce_step,
    "product": partial(_product_step, PRODUCT),
    "gemm": partial(_product_step, GEMM),
    "nnet": _nnet_step,
    "view": _view_step,
    "shape": _shape_step,
    "advanced": _advanced_step,
}
assert set(_DESCRIBE) == set(dispatch.BUILTIN_STEPS)


def _py_takes(step, offsets) -> tuple:
    """Per output of a perform: the table entry of the buffer it may take (or
    -1), its typenum and ndim."""
    takes = []
    for slot, var in zip(step.outputs, step.node.outputs):
        if slot in offsets:
            takes += [offsets[slot], _typenum(var.dtype), var.ndim]
        else:
            takes += [-1, 0, 0]
    return tuple(takes)


@dataclass
class _CompiledSteps:
    """What the module of a graph's compiled steps is made of."""

    region_loops: list = field(default_factory=list)   # hot loops (entry.loops): -O3
    kernels: list = field(default_factory=list)        # glue: -O1
    step_funcs: list = field(default_factory=list)
    #: the schedule index of each compiled step, in the order of the module's table
    compiled: list = field(default_factory=list)
    #: the entries with a step in the module, in order of first use (their flags)
    used: dict = field(default_factory=dict)

    def add(self, k: int, entry: dispatch.CEntry, kernel: str, code: str) -> int:
        """Add step ``k``; its index in the module's table of step functions."""
        (self.region_loops if entry.loops else self.kernels).append(kernel)
        self.step_funcs.append(code)
        self.used.setdefault(entry, None)
        self.compiled.append(k)
        return len(self.compiled) - 1


def _shape_table_layout(plan: Plan) -> tuple[dict, int, int]:
    """``(offsets, stash, size)`` of the shape table: [reuse flag], per step
    output with a C dtype [known, donor, dims...], then one stash flag per slot."""
    offsets: dict[int, int] = {}
    size = 1
    for step in plan.steps:
        for slot, var in zip(step.outputs, step.node.outputs):
            if slot not in offsets and np.dtype(var.dtype).name in C_DTYPES:
                offsets[slot] = size
                size += 2 + var.ndim
    return offsets, size, size + plan.n_slots


def _c_step(k: int, step, entry: dispatch.CEntry, offsets: dict, label: str, loops: list,
            module: _CompiledSteps, context: dispatch.CContext) -> tuple | None:
    """``(code, head, params)`` of a step that runs C as ``entry`` says: a
    description (a built-in step), or a step function added to ``module``;
    None when the family finds no C code after all (NotImplementedError):
    the step runs its perform."""
    try:
        if not entry.compiled:
            return _DESCRIBE[entry.step](k, step, offsets, label, loops)
        offset = (tuple(offsets.get(slot, -1) for slot in step.outputs) if entry.many_outputs
                  else offsets[step.outputs[0]])
        kernel, code = entry.step_function(k, step, offset, label, context)
    except NotImplementedError:
        return None
    return COMPILED, None, module.add(k, entry, kernel, code)


def graph_module(plan: Plan, keep_slots, clear_after, commit: CommitPoint | None = None,
                 context: dispatch.CContext | None = None) -> GraphModule:
    """``plan``'s schedule for the interpreter, and the module of its
    compiled steps (see the module doc).

    ``keep_slots``: output slots whose buffers are kept between calls;
    ``clear_after``: the slots emptied when a call returns; ``commit``: the
    schedule's commit point; ``context``: what the dispatch table's entries
    are given (default: the plan alone).
    """
    if context is None:
        context = dispatch.CContext(plan=plan)
    offsets, stash, size = _shape_table_layout(plan)
    module = _CompiledSteps()
    kinds, entries, loop_kernels, steps = [], [], [], []
    for k, step in enumerate(plan.steps):
        entry = dispatch.entry_for(step.node, context)
        described = None
        if entry is not None:
            described = _c_step(k, step, entry, offsets, str(step.node), loop_kernels, module,
                                context)
        if described is None:
            entry, described = None, (PY, None, _py_takes(step, offsets))
        code, head, params = described
        steps.append(ScheduleStep(code, tuple(step.inputs), tuple(step.outputs),
                                  tuple(step.frees), head, params))
        kinds.append("py" if entry is None else entry.kind)
        entries.append(entry)
    written = tuple(commit.written) if commit is not None else ()
    commit_step = commit.step if commit is not None else len(plan.steps)
    description = ScheduleDescription(plan.n_slots, tuple(plan.inputs), tuple(plan.outputs),
                                      tuple(sorted(clear_after)), written, commit_step, size,
                                      stash, tuple(steps))
    name, source, flags = None, None, ()
    if module.compiled:
        name, source, flags = _step_module(plan, module)
    return GraphModule(name, source, flags, kinds, offsets, size, stash, loop_kernels,
                       description, entries)


@lru_cache(maxsize=None)
def step_module_prelude() -> str:
    """What a module of a graph's compiled steps starts with, in its prelude
    header (:mod:`.prelude`: precompiled once per machine): Python's and
    NumPy's headers and the runtime's API."""
    return HEADERS + runtime.header()


def _step_module(plan: Plan, module: _CompiledSteps) -> tuple[str, str, tuple]:
    """``(name, source, flags)`` of the module of a graph's compiled steps:
    their functions and the table the interpreter reaches them through."""
    flags = list(elemwise.COMPILE_FLAGS)
    for entry in module.used:
        flags += list(entry.flags)
    flags = tuple(dict.fromkeys(flags))
    region_loops, kernels, step_funcs = module.region_loops, module.kernels, module.step_funcs
    compiled = module.compiled
    body = f"""
#define TN_N_INPUTS {len(plan.inputs)}
static const Py_ssize_t tn_graph_inputs[] = {_slots(plan.inputs)};

{"".join(region_loops)}
/* From here on, glue: straight-line code around calls (the loops are above
 * and in the runtime).  -O1 builds it in a fraction of -O3's time, and it
 * runs as fast. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize ("O1")
#endif
{"".join(kernels)}
{chr(10).join(step_funcs)}

static const tn_step_fn tn_step_fns[] = {{{", ".join(f"tn_step{k}" for k in compiled)}}};
static const tn_step_table tn_steps = {{{len(compiled)}, tn_step_fns}};
"""
    source_body = prelude.include_line(step_module_prelude()) + body
    digest = hashlib.sha256((source_body + repr(flags)).encode("utf-8")).hexdigest()[:24]
    name = f"tn_graph_{digest}"
    source = source_body + f"""
static struct PyModuleDef tn_module = {{
    PyModuleDef_HEAD_INIT, {c_string(name)}, "a tenure graph's compiled steps", -1, NULL,
    NULL, NULL, NULL, NULL
}};

PyMODINIT_FUNC PyInit_{name}(void)
{{
    PyObject *module, *steps;
    import_array();
    if (tn_import_runtime() < 0)
        return NULL;
    module = PyModule_Create(&tn_module);
    if (module == NULL)
        return NULL;
    steps = PyCapsule_New((void *)&tn_steps, TN_STEP_TABLE_CAPSULE, NULL);
    if (steps == NULL || PyModule_AddObject(module, "steps", steps) < 0) {{
        Py_XDECREF(steps);
        Py_DECREF(module);
        return NULL;
    }}
    return module;
}}
"""
    return name, source, flags


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
