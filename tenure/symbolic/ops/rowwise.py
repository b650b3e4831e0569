"""Row programs: one op for a region of a matrix graph whose reductions along
the rows feed back into the elementwise work on the same rows.

A normalisation written out by hand -- ``(x - mean) / sqrt(var + eps)``,
``exp(x - log(sum(exp(x))))``, and their gradients -- is a chain of
elementwise ops and reductions over axis 1 with ``keepdims``, each
reduction read again by the next elementwise op, ending in results the size
of ``x`` and in sums down the columns (the gradients of a bias or a scale).
Op by op, every link of the chain is a pass over the whole matrix through
memory.  :class:`RowProgram` holds the whole chain: a row's values are
computed pass after pass while the row is still in cache, and the matrix
goes through memory once.

The program is a tuple of *steps* ``(op, refs)``, each ref naming an input
of the node (``("i", k)``) or an earlier step's result (``("s", j)``), and
the steps whose results are the node's outputs.  A step's op is one of the
graph's own: an ``Elemwise``, a ``Reduce`` or ``FusedReduce`` over axis 1
with ``keepdims`` (a *row* reduction) or over axis 0 (a *column* one, whose
result no step reads), a ``SumTo`` or an ``ExpandTo``.  In more dimensions
the rows are the index tuples of the leading axes: a row reduction is over
the last axis, a column one over all the others.  Values are exactly
those ops' values: :meth:`RowProgram.perform` runs the steps' own
``perform`` in order (the reference every linker is compared with), and
the C linker's kernel (:mod:`tenure.linkers.c.rowwise`) computes the same
values, up to the order in which sums accumulate, or declines a call whose
shapes it does not cover (a ``SumTo`` that sums, say) and lets this
``perform`` run it.

:func:`tenure.rewrites.row_fusion.fuse_rows` makes these nodes.
"""

from __future__ import annotations

import math

import numpy as np

from tenure.symbolic import cost_facts
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.ops.composite import FusedReduce
from tenure.symbolic.ops.creation import ExpandTo
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.reduce import Reduce, SumTo
from tenure.symbolic.variable import as_tensor_variable

__all__ = ["COLUMN", "MAX_NDIM", "ROW", "RowProgram", "reduction_kind", "step_allowed"]

#: a reduction along each row (axis 1, keepdims): its value feeds the row again
ROW = "row"
#: a reduction down the columns (axis 0): a result only
COLUMN = "column"

#: the reductions a row program holds, by kind
_ROW_REDUCTIONS = ("sum", "mean", "max", "min")
_COLUMN_REDUCTIONS = ("sum", "mean")


#: the most dimensions a row program's values have
MAX_NDIM = 8


def reduction_kind(op, ndim: int) -> str | None:
    """:data:`ROW` or :data:`COLUMN` for a reduction a row program may hold,
    of a value of ``ndim`` (at least 2) dimensions: over the last axis with
    keepdims (a row), or over every other axis (down the columns); else None.
    The rows are the index tuples of the leading axes."""
    if (type(op) is not Reduce and not isinstance(op, FusedReduce)) or ndim < 2:
        return None
    if op.axis == (ndim - 1,) and op.keepdims and op.fn_name in _ROW_REDUCTIONS:
        return ROW
    if op.axis == tuple(range(ndim - 1)) and op.fn_name in _COLUMN_REDUCTIONS:
        return COLUMN
    return None


def step_allowed(op) -> bool:
    """Whether ``op`` may be a step of a row program (its node's ndims are
    the rewrite's to check)."""
    if isinstance(op, Elemwise):
        return not op.inplace_pattern
    if type(op) in (SumTo, ExpandTo):
        return True
    return any(reduction_kind(op, ndim) for ndim in range(2, MAX_NDIM + 1))


class RowProgram(Op):
    """The steps of a row region as one op (see the module doc).

    ``steps``: tuple of ``(op, refs)``; ``outputs``: the indices of the
    steps whose results the node returns, one output each.  The node's
    inputs are the region's inputs in the order the refs number them.
    """

    __props__ = ("steps", "outputs")

    def __init__(self, steps: tuple, outputs: tuple[int, ...]):
        steps = tuple((op, tuple(tuple(r) for r in refs)) for op, refs in steps)
        for j, (op, refs) in enumerate(steps):
            if not step_allowed(op):
                raise TypeError(f"RowProgram: step {j} ({op}) is not an op a row program holds")
            for kind, index in refs:
                if kind not in ("i", "s") or (kind == "s" and not 0 <= index < j):
                    raise ValueError(f"RowProgram: step {j} reads ({kind!r}, {index}), "
                                     f"which is neither an input nor an earlier step")
        for j in outputs:
            if not 0 <= j < len(steps):
                raise ValueError(f"RowProgram: output step {j} of {len(steps)} steps")
        self.steps = steps
        self.outputs = tuple(outputs)

    def __str__(self) -> str:
        reductions = sum(type(op) is Reduce or isinstance(op, FusedReduce)
                         for op, _ in self.steps)
        return f"RowProgram{{{len(self.steps)} steps, {reductions} reductions}}"

    # -- the inner nodes: the steps applied to the node's inputs

    def inner_nodes(self, inputs) -> list[Apply]:
        """The steps as nodes over ``inputs`` (symbolic variables): the
        program's graph, apart from any function graph."""
        values, nodes = list(inputs), []
        for op, refs in self.steps:
            node = op.make_node(*[self._ref(values, nodes, r) for r in refs])
            if len(node.outputs) != 1:
                raise TypeError(f"RowProgram: step {op} has {len(node.outputs)} outputs")
            nodes.append(node)
        return nodes

    @staticmethod
    def _ref(inputs, nodes, ref):
        kind, index = ref
        return inputs[index] if kind == "i" else nodes[index].outputs[0]

    def make_node(self, *inputs) -> Apply:
        inputs = [as_tensor_variable(v) for v in inputs]
        needed = max((index for _, refs in self.steps for kind, index in refs if kind == "i"),
                     default=-1) + 1
        if len(inputs) != needed:
            raise TypeError(f"RowProgram: expected {needed} inputs, got {len(inputs)}")
        inner = self.inner_nodes(inputs)
        return Apply(self, inputs, [inner[j].outputs[0].type() for j in self.outputs])

    def inner(self, node) -> list[Apply]:
        """The program's graph over ``node``'s inputs as they are now (a
        rewrite may have put another variable of the same type in an
        input's place since the node was made)."""
        key = tuple(map(id, node.inputs))
        cached = getattr(node, "_row_program", None)
        if cached is None or cached[0] != key:
            cached = node._row_program = (key, self.inner_nodes(node.inputs), list(node.inputs))
        return cached[1]

    def expand(self, node) -> list:
        """The steps as the graph of their own ops (for the linkers that
        run only the ops they have a kernel for: :mod:`tenure.rewrites.expand`)."""
        inner = self.inner_nodes(node.inputs)
        return [inner[j].outputs[0] for j in self.outputs]

    def perform(self, node, inputs, output_storage):
        """The steps' own ``perform``, in order; a value is dropped after its
        last reader.  An output that shares memory with an input or with an
        earlier output (a ``SumTo`` that summed nothing is its input) is
        copied: the node's outputs are its own."""
        inner = self.inner(node)
        last_use = self._last_uses()
        values: dict = {}
        for j, (inner_node, (_, refs)) in enumerate(zip(inner, self.steps)):
            args = [inputs[i] if kind == "i" else values[i] for kind, i in refs]
            cell = [None]
            inner_node.op.perform(inner_node, args, [cell])
            values[j] = cell[0]
            for kind, i in refs:
                if kind == "s" and last_use.get(i) == j:
                    del values[i]
        taken: list = [a for a in inputs if isinstance(a, np.ndarray)]
        for cell, j, var in zip(output_storage, self.outputs, node.outputs):
            value = np.asarray(values[j], dtype=var.type.numpy_dtype)
            if any(np.may_share_memory(value, other) for other in taken):
                value = value.copy()
            taken.append(value)
            cell[0] = value

    def _last_uses(self) -> dict[int, int]:
        """Per step that no output is, the last step reading it."""
        last: dict[int, int] = {}
        for j, (_, refs) in enumerate(self.steps):
            for kind, i in refs:
                if kind == "s":
                    last[i] = j
        for j in self.outputs:
            last.pop(j, None)
        return last

    # -- what the planner and the cost model ask

    def infer_shape(self, node, input_shapes):
        shapes = list(input_shapes)
        inner_shapes: list = []
        for inner_node, (_, refs) in zip(self.inner(node), self.steps):
            args = [shapes[i] if kind == "i" else inner_shapes[i] for kind, i in refs]
            inner_shapes.append(inner_node.op.infer_shape(inner_node, args)[0])
        return [inner_shapes[j] for j in self.outputs]

    def workspace_bytes(self, node, input_shapes, output_shapes):
        """``perform``'s temporaries: at most every step's result that is not
        an output, each at most the size of the largest input or output."""
        sizes = [math.prod(s) for s in list(input_shapes) + list(output_shapes) if s is not None]
        if len(sizes) < len(input_shapes) + len(output_shapes):
            return 0
        largest = max(sizes, default=0)
        kept = set(self.outputs)
        return sum(largest * inner.outputs[0].type.numpy_dtype.itemsize
                   for j, inner in enumerate(self.inner(node)) if j not in kept)

    def flops(self, node, shapes) -> float:
        """The steps' own counts, each on the largest shape the node sees."""
        size = max(cost_facts.inputs_size(node, shapes), cost_facts.outputs_size(node, shapes))
        steps = 0
        for op, _ in self.steps:
            sop = getattr(op, "scalar_op", None) or getattr(op, "composite", None)
            steps += cost_facts.scalar_steps(sop) if sop is not None else 1
        return float(size * max(steps, 1))
