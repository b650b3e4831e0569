"""Numeric shapes of every variable of a graph, from its input values alone.

The memory plan and the activation-budget rewrite both need to know how many
bytes each intermediate will take before the graph runs.  :class:`SizeModel`
builds, once per graph, the symbolic dims of every variable (each op's
``infer_shape``, the same machinery rewrites use) and then evaluates that small
dims graph for given input values with each op's ``perform``.  Only shapes are
computed, never the intermediates themselves -- except for a variable whose op
cannot infer its shape: its dims read ``shape(var)``, so the evaluation computes
that variable (correct, just not free).

Dims that cannot be evaluated (a ``perform`` raised, e.g. on placeholder input
values) come back as ``None``: the callers then treat the variable's size as
unknown.
"""

from __future__ import annotations

import math

import numpy as np

from tenure.symbolic.graph import Constant, Variable, io_toposort
from tenure.symbolic.inner_graph import OpWithInnerGraphs
from tenure.symbolic.shared import SharedVariable
from tenure.symbolic.ops.shape import infer_dims
from tenure.symbolic.types import TensorType


class SizeModel:
    """The dims of every tensor variable of ``fgraph``, evaluated on demand.

    ``shapes(input_values)`` maps each variable (fgraph inputs included) to its
    shape as a tuple of ints, or to ``None`` when it is not a tensor or its
    shape could not be evaluated.  ``nbytes(shape_map)`` turns that into bytes.
    """

    def __init__(self, fgraph):
        self.inputs = list(fgraph.inputs)
        memo: dict = {}
        self.variables: list[Variable] = []
        seen: set = set()
        # Every variable once, also the sibling outputs of a node whose dims
        # the memo got together with the first one asked.
        for node in fgraph.toposort():
            for var in node.inputs + node.outputs:
                if var not in seen:
                    seen.add(var)
                    infer_dims(var, memo)
                    self.variables.append(var)
        for var in fgraph.outputs:
            if var not in seen:
                seen.add(var)
                infer_dims(var, memo)
                self.variables.append(var)
        self.dims = {var: memo[var] for var in self.variables}
        symbolic = {d for dims in self.dims.values() if dims for d in dims
                    if isinstance(d, Variable)}
        self._dim_nodes = io_toposort(self.inputs, list(symbolic))
        self._nodes_for: dict = {}     # dim_values' node lists, per tuple of dims

    def shapes(self, input_values) -> dict[Variable, tuple[int, ...] | None]:
        """Every variable's shape for these input values (in ``fgraph.inputs`` order)."""
        values = self._evaluate_dims(input_values)
        result: dict[Variable, tuple[int, ...] | None] = {}
        for var, dims in self.dims.items():
            if dims is None:
                result[var] = None
                continue
            shape = []
            for d in dims:
                value = d if isinstance(d, (int, np.integer)) else values.get(d)
                if value is None:
                    shape = None
                    break
                shape.append(int(value))
            result[var] = None if shape is None else tuple(shape)
        return result

    def dim_values(self, dims: tuple, input_values) -> tuple:
        """The values of the symbolic dims ``dims`` for these input values
        (None where one cannot be evaluated), running only the nodes they
        need: what a plan signature reads on every call."""
        nodes = self._nodes_for.get(dims)
        if nodes is None:
            nodes = self._nodes_for[dims] = io_toposort(self.inputs, list(dims))
        values = self._evaluate_dims(input_values, nodes)
        return tuple(None if values.get(d) is None else int(values[d]) for d in dims)

    def _evaluate_dims(self, input_values, nodes=None) -> dict[Variable, object]:
        values: dict[Variable, object] = dict(zip(self.inputs, input_values))
        for node in self._dim_nodes if nodes is None else nodes:
            inputs = []
            for var in node.inputs:
                if isinstance(var, Constant):
                    inputs.append(var.data)
                elif var in values:
                    inputs.append(values[var])
                else:
                    break  # an input could not be evaluated: neither can this node
            else:
                # An in-place op (the graph's own, rewritten) must not write
                # into a value other dims were, or will be, read from.
                for i in _destroyed_inputs(node):
                    if isinstance(inputs[i], np.ndarray):
                        inputs[i] = inputs[i].copy()
                if isinstance(node.op, OpWithInnerGraphs) or node.op.shape_from_values:
                    # It runs its inner graphs (a loop: n_steps of them), or
                    # its shapes come from values the placeholders do not
                    # have: what only its run would tell stays unknown.
                    continue
                cells = [[None] for _ in node.outputs]
                try:
                    node.op.perform(node, inputs, cells)
                except Exception:  # noqa: BLE001 -- unknown dims, not an error
                    continue
                for out, cell in zip(node.outputs, cells):
                    values[out] = cell[0]
        return values


def _destroyed_inputs(node) -> set[int]:
    return {i for inputs in node.op.destroy_map.values() for i in inputs}


def nbytes(var: Variable, shape: tuple[int, ...] | None) -> int | None:
    """Bytes of a ``var``-typed array of ``shape`` (``None`` if unknown)."""
    if shape is None or not isinstance(var.type, TensorType):
        return None
    return math.prod(shape) * np.dtype(var.type.dtype).itemsize


def placeholder(var: Variable, shape: tuple[int, ...]) -> np.ndarray:
    """An array of ``var``'s dtype with ``shape`` that takes no memory (every
    element is the same zero), for evaluating shapes without real data."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype=var.type.dtype), shape,
                                           (0,) * len(shape), writeable=False)


# ----------------------------------------------------------------------------
# Sizes before any call

#: the length assumed for an input dimension not known when compiling (sizes
#: before any call: the activation-budget rewrite, the C linker's schedule).
#: With one unknown (batch) dimension every activation scales with it alike,
#: so which ones to keep under a *fraction*, or which order is lowest, does
#: not depend on the value.
NOMINAL_DIM = 1024


def _product_operands(node) -> tuple[Variable, Variable] | None:
    """The two operands of a matrix product whose inner lengths must agree
    (``a``'s last axis against ``b``'s second-to-last), or None
    (:meth:`Op.matrix_operands <tenure.symbolic.graph.Op.matrix_operands>`)."""
    return node.op.matrix_operands(node)


def _input_dims(fgraph) -> dict[Variable, list]:
    """The dims of every tensor input known at compile time (None: unknown).

    Shared variables have their current value's shape.  An explicit input's
    unknown length is taken from a matrix product it enters directly when the
    other operand's length is known (``x @ W`` fixes ``x``'s columns): left
    at a nominal size, a feature length would make the first layer look
    many times as expensive to recompute as it is.
    """
    dims: dict[Variable, list] = {}
    for var in fgraph.inputs:
        if isinstance(var, SharedVariable):
            dims[var] = list(var.get_value(borrow=True).shape)
        elif isinstance(var.type, TensorType):
            dims[var] = list(var.type.shape)
    for node in fgraph.toposort():
        operands = _product_operands(node)
        if operands is None:
            continue
        a, b = operands
        if a not in dims or b not in dims:
            continue
        inner_a, inner_b = dims[a][-1], dims[b][-2]
        if inner_a is None and inner_b is not None:
            dims[a][-1] = inner_b
        elif inner_b is None and inner_a is not None:
            dims[b][-2] = inner_a
    return dims


def compile_time_shapes(fgraph) -> tuple[dict, list[Variable]]:
    """Every variable's shape at compile time, and the explicit inputs with a
    length that is neither static nor fixed by another operand (those lengths
    are :data:`NOMINAL_DIM`).

    An input's unknown length is fixed by a matrix product it enters (``x @
    W``: ``x``'s columns) and by an elementwise op it is combined with (``h -
    t``: ``t``'s shape is ``h``'s): left nominal, a target of 32 columns would
    count as 1024 and distort every size derived from it.
    """
    dims = _input_dims(fgraph)
    model = SizeModel(fgraph)
    shapes = model.shapes(_compile_time_values(fgraph, dims))
    if _align_with_elementwise_operands(fgraph, dims, shapes):
        shapes = model.shapes(_compile_time_values(fgraph, dims))
    unknown = [var for var in fgraph.inputs
               if not isinstance(var, SharedVariable) and None in dims.get(var, ())]
    return shapes, unknown


def _compile_time_values(fgraph, dims) -> list:
    """Input values to evaluate sizes with: shared values, and placeholders
    of the known (else nominal) lengths for the explicit inputs."""
    values = []
    for var in fgraph.inputs:
        if isinstance(var, SharedVariable):
            values.append(var.get_value(borrow=True))
        elif var in dims:
            values.append(placeholder(var, tuple(NOMINAL_DIM if d is None else d
                                                 for d in dims[var])))
        else:
            values.append(None)
    return values


def _align_with_elementwise_operands(fgraph, dims, shapes) -> bool:
    """Fix unknown lengths of explicit inputs from the operands they are
    broadcast against (elementwise ops; gemm's ``z`` against the product),
    axes aligned from the right; whether any length changed."""
    changed = False
    for node in fgraph.toposort():
        for var, partners in _broadcast_partners(node, shapes):
            var_dims = dims.get(var)
            if var_dims is None or isinstance(var, SharedVariable) or None not in var_dims:
                continue
            for axis in range(1, len(var_dims) + 1):
                if var_dims[-axis] is not None:
                    continue
                known = {shape[-axis] for other, shape in partners
                         if other is not var and shape is not None and len(shape) >= axis
                         and shape[-axis] != 1 and not _nominal(other, dims, axis)}
                if len(known) == 1:
                    var_dims[-axis] = known.pop()
                    changed = True
    return changed


def _broadcast_partners(node, shapes) -> list:
    """``[(input, [(operand, shape), ...])]``: the inputs of ``node`` broadcast
    together with other operands (whose shapes are given; see
    :meth:`Op.broadcast_partners <tenure.symbolic.graph.Op.broadcast_partners>`)."""
    return node.op.broadcast_partners(node, shapes)


def _nominal(var, dims, axis) -> bool:
    """Whether ``var``'s length at ``-axis`` is itself only the nominal guess."""
    var_dims = dims.get(var)
    return var_dims is not None and len(var_dims) >= axis and var_dims[-axis] is None
