"""The C linker's dispatch table: per op class, how the C linker runs its nodes.

One table, keyed by op class; :func:`lookup` walks the class's MRO, so a
subclass runs as its nearest registered base does (its entry's
:meth:`CEntry.has_c_code` still decides per node).  Each op family registers
its op classes in its own module, one :func:`register_c_op` line per class
(:mod:`.elemwise`, :mod:`.reduce`, :mod:`.blas`, :mod:`.nnet`, :mod:`.conv`,
:mod:`.pool`, :mod:`.views`, :mod:`.shapes`, :mod:`.advanced`, :mod:`.subtensor`,
:mod:`.random`); :mod:`.module` asks the table (:func:`entry_for`) for every
node of a schedule.  A node without an entry, or whose entry says it has no
C code, runs its op's ``perform`` from the C loop (a ``"py"`` step).

An entry (:class:`CEntry`) says:

- ``kind``: the step's name in ``GraphModule.kinds`` (and what
  :func:`~tenure.linkers.c.module.step_kind` returns): ``"elemwise"``,
  ``"blas"``, ``"reduce"``, ``"nnet"``, ``"view"``, ``"shape"``, ``"advanced"``,
  ``"subtensor"`` for the built-in families, any other name (not ``"py"``)
  for a new one.
- ``family``: the object that knows the op's C: ``family.has_c_code(node)``
  and, for a compiled step, ``family.c_function(node, fname)``.
- ``step``: how the runtime's interpreter (``src/interpret.c``) runs it.
  One of :data:`BUILTIN_STEPS` -- the fast families the interpreter runs from
  a description, with no per-graph C (elementwise and reduction loops from
  the shared loop libraries, the products, softmax and its kin, views); each
  is a value of the interpreter's fixed step enum -- or :data:`COMPILED`.

Entries receive a :class:`CContext` (the linker compiling the graph, the
plan): today's families ignore it.  A loop (``Scan``) has no entry: it runs
its ``perform`` (a ``"py"`` step), which calls its step compiled with the
function's inner mode (``Mode.inner_mode``: the C linker again; see
:func:`tenure.compile.compiled.bind_inner_modes`).  The context is for an
entry that would compile the step into the graph's own module, a loop with
no Python per step.  Override the methods of :class:`CEntry` to use it.

A new op family needs no new interpreter enum value, and no change to
:mod:`.module` or ``src/interpret.c``: it registers a *compiled step*
(``step=COMPILED``, the default; ``TN_STEP_COMPILED``): C of its own,
compiled into the graph's module (:mod:`.module`, built and cached once per
graph) and reached through the module's table of step functions.  Steps:

1. a family object: ``has_c_code(node)`` (which nodes: dtypes, ndims) and
   ``c_function(node, fname)`` (the C below);
2. one line per op class, in the module that defines the family (imported
   before a function is compiled: registration happens at import)::

       register_c_op(Square, CEntry("square", SquareC()))

``c_function(node, fname)`` returns C defining, after the runtime's API
(``tenure_runtime.h``: ``tn_bl_check`` checks an input's dtype and ndim)::

    static int fname_shape(PyArrayObject **inputs, npy_intp *shape);
    static int fname(PyArrayObject **inputs, PyArrayObject **outputs);

``inputs[i]`` is node input ``i`` as an ndarray: any dtype, ndim and
strides, so both functions check what they read (and never crash on bad
input).  ``fname_shape`` writes the output's shape; it is skipped when the
plan knows that shape, so ``fname`` checks its inputs itself, and that
``outputs[0]`` has the shape they give (a wrong plan must raise, not write
out of bounds): ``tn_bl_check_out`` does.  ``outputs[0]`` is an array of the
output's dtype, which overlaps no input; each returns 0, or -1 with a
Python exception set; the GIL is held.  The caller (:func:`compiled_step`,
the step function) gets the output's buffer as every C kernel does: a dead
buffer the plan hands on, last call's, or a new one.  The test
``tests/linkers/c/test_dispatch.py`` holds a complete example (``Square``).
One output per node; an op whose ``destroy_map`` is not empty still gets a
buffer of its own.  (An entry with ``many_outputs`` and a ``step_code``
writes every output of its node: a random draw's new state and draw.)
Compile flags (``flags``) apply to the whole module;
``loops=True`` puts the kernel where the module is built at ``-O3`` (else it
is glue, at ``-O1``).  A family whose step needs more than this contract
(set/inc_subtensor: the output has x's shape and may be x) gives
``step_code`` instead, which writes the whole step function.  A step
function may also return 1: it declines this call, and the interpreter runs
the node's ``perform`` instead (a row program does, for shapes its kernel
does not cover: :mod:`.rowwise`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from tenure.linkers.c.cgen import c_string, comment, typenum
from tenure.symbolic.graph import Apply

__all__ = ["BUILTIN_STEPS", "COMPILED", "CContext", "CEntry", "compiled_step", "entry_for",
           "lookup", "register_c_op", "unregister_c_op"]

#: the steps the interpreter runs from a description (its fixed enum, but
#: py and compiled): for the built-in fast families only
BUILTIN_STEPS = ("elemwise", "reduce", "product", "gemm", "nnet", "view", "shape", "advanced")
#: a step function of the graph's module (``TN_STEP_COMPILED``): any new family
COMPILED = "compiled"

#: the modules that register the built-in entries (imported on first lookup,
#: so that the table is complete whoever asks first)
_BUILTIN_FAMILIES = ("elemwise", "reduce", "blas", "tensordot", "nnet", "conv", "pool",
                     "views", "shapes", "advanced", "subtensor", "random", "rowwise")


@dataclass(frozen=True)
class CContext:
    """What an entry may need of the compilation it takes part in."""

    #: the C linker compiling the graph (None: a schedule described on its own)
    linker: Any = None
    #: the plan whose schedule is being described (None: a node asked alone)
    plan: Any = None


@dataclass(frozen=True, eq=False)
class CEntry:
    """How the C linker runs the nodes of one op class (see the module doc)."""

    kind: str
    family: Any
    step: str = COMPILED
    #: compile flags of the graph module, when a step of this entry is in it
    flags: tuple[str, ...] = ()
    #: a compiled kernel that is hot loops (-O3), not glue (-O1)
    loops: bool = False
    #: ``(k, step, offset, label, context) -> (kernel, step function)``, for a
    #: compiled step that needs more than :func:`compiled_step`
    step_code: Callable | None = None
    #: ``(node, shapes, memo) -> bytes`` of temporaries (see :meth:`workspace_bytes`)
    workspace: Callable | None = None
    #: the step writes every output of its node (a ``step_code`` entry only;
    #: else a node of more than one output runs its ``perform``)
    many_outputs: bool = False

    def __post_init__(self):
        if self.kind == "py":
            raise ValueError('CEntry: kind "py" is the perform\'s, not a C step\'s')
        if self.step not in BUILTIN_STEPS and self.step != COMPILED:
            raise ValueError(f"CEntry: step {self.step!r} is not one of "
                             f"{BUILTIN_STEPS + (COMPILED,)}")
        if self.many_outputs and self.step_code is None:
            raise ValueError("CEntry: many_outputs needs a step_code that writes them")

    @property
    def compiled(self) -> bool:
        """Whether the step is C of the graph's module (else a description)."""
        return self.step == COMPILED

    def has_c_code(self, node: Apply, context: CContext | None = None) -> bool:
        """Whether this node runs C (else its ``perform``)."""
        return bool(self.family.has_c_code(node))

    def c_function(self, node: Apply, fname: str, context: CContext | None = None) -> str:
        """A compiled step's kernel: ``fname`` and ``fname_shape`` (module doc)."""
        return self.family.c_function(node, fname)

    def step_function(self, k: int, step, offset: int, label: str,
                      context: CContext | None = None) -> tuple[str, str]:
        """``(kernel, step function tn_step<k>)`` of a compiled step; ``offset``:
        its output's entry in the shape table (``many_outputs``: a tuple, per
        output, of its entry or -1).  ``NotImplementedError``: the
        node runs its ``perform`` after all."""
        if self.step_code is not None:
            return self.step_code(k, step, offset, label, context)
        kernel = self.c_function(step.node, f"tn_k{k}", context)
        return kernel, compiled_step(k, step, offset, label)

    def workspace_bytes(self, node: Apply, shapes, memo: dict) -> int:
        """Bytes of temporaries the C step takes beyond its outputs, for the
        memory plan (``shapes``: variable -> shape or None; ``memo``: the
        caller's dict, for what is worth keeping per node).  Default none: a
        C kernel holds a row or a block at most."""
        return 0 if self.workspace is None else self.workspace(node, shapes, memo)


_TABLE: dict[type, CEntry] = {}
_builtins_loaded = False


def register_c_op(op_class: type, entry: CEntry) -> CEntry | None:
    """Run ``op_class``'s nodes (and its subclasses', unless they have an
    entry of their own) as ``entry`` says; returns the entry it replaces."""
    if not isinstance(op_class, type):
        raise TypeError(f"register_c_op: {op_class!r} is not a class")
    if not isinstance(entry, CEntry):
        raise TypeError(f"register_c_op: {entry!r} is not a CEntry")
    previous = _TABLE.get(op_class)
    _TABLE[op_class] = entry
    return previous


def unregister_c_op(op_class: type) -> CEntry | None:
    """Drop ``op_class``'s own entry (its nodes fall back to a base's, or to
    ``perform``); returns it."""
    return _TABLE.pop(op_class, None)


def _load_builtins() -> None:
    """Import the built-in families: each registers its op classes."""
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        for name in _BUILTIN_FAMILIES:
            importlib.import_module(f"tenure.linkers.c.{name}")


def lookup(op_class: type) -> CEntry | None:
    """The entry of ``op_class`` or of its nearest base in the MRO, or None."""
    _load_builtins()
    for cls in op_class.__mro__:
        entry = _TABLE.get(cls)
        if entry is not None:
            return entry
    return None


def entry_for(node: Apply, context: CContext | None = None) -> CEntry | None:
    """The entry that runs ``node`` in C, or None: it runs its ``perform``
    (more than one output, unless the entry writes them all; an output dtype
    without C, no entry, or the entry says no -- or raises: no C code rather
    than no function)."""
    entry = lookup(type(node.op))
    if entry is None or (len(node.outputs) != 1 and not entry.many_outputs):
        return None
    try:
        for out in node.outputs:
            typenum(out.dtype)
    except NotImplementedError:
        return None
    try:
        return entry if entry.has_c_code(node, context) else None
    except Exception:  # noqa: BLE001 -- no C code rather than no function
        return None


def compiled_step(k: int, step, offset: int, label: str) -> str:
    """The step function ``tn_step<k>`` of a compiled step around its kernel
    ``tn_k<k>`` (the module doc's contract): the inputs as arrays, the output
    shape (planned, else ``tn_k<k>_shape``), the output buffer as every C
    kernel gets it (``tn_cl_output``), then the kernel."""
    node = step.node
    fname = f"tn_k{k}"
    out = node.outputs[0]
    nd, nin = out.ndim, len(node.inputs)
    lines = [f"/* step {k}: {comment(label)} */",
             f"static int tn_step{k}(PyObject **S, const npy_intp *planned, PyObject **aside)",
             "{",
             f"    PyArrayObject *in[{max(nin, 1)}], *out;",
             "    npy_intp shape[NPY_MAXDIMS + 1];"]
    for i, var in enumerate(node.inputs):
        what = c_string(f"tenure: input {i} ({var}) of {label}")
        lines.append(f"    if (tn_cl_array(S[{step.inputs[i]}], &in[{i}], {what}) < 0) "
                     "return -1;")
    taken = (f"(aside != NULL && planned[{offset}] == 1 && planned[{offset + 1}] >= 0 ? "
             f"tn_cl_take(aside, planned[{offset + 1}], {typenum(out.dtype)}, {nd}, shape) : NULL)")
    lines += [f"    if (!tn_cl_planned(planned, {offset}, {nd}, shape) "
              f"&& {fname}_shape(in, shape) < 0)",
              "        return -1;",
              f"    out = tn_cl_output(S[{step.outputs[0]}], NULL, in, {nin}, S, tn_graph_inputs, "
              f"TN_N_INPUTS, {typenum(out.dtype)}, {nd}, shape, {taken});",
              "    if (out == NULL) return -1;",
              f"    if ({fname}(in, &out) < 0) {{ Py_DECREF(out); return -1; }}",
              f"    Py_SETREF(S[{step.outputs[0]}], (PyObject *)out);",
              "    return 0;", "}", ""]
    return "\n".join(lines)
