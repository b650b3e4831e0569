"""``ifelse``: one of two branches, chosen by a scalar condition at run time,
and only the chosen one computed.

``tn.ifelse(cond, then_branch, else_branch)`` (PyTensor's
``pytensor.ifelse.ifelse``) builds an :class:`IfElse` node whose inputs are
the condition and both branches' values: the graph form, which gradients
and rewrites see as any node (its gradient is an ``ifelse`` of the
branches' gradients).  Computed as it stands, both branches would run.

Compiling makes it lazy (``lazy_ifelse``, :mod:`tenure.rewrites.ifelse`):
the part of each branch that nothing else in the function reads moves into
an inner graph of a :class:`LazyIfElse` node, whose ``perform`` reads the
condition and runs the chosen branch's inner graph alone (compiled with the
mode the function chose for inner graphs, on the device for the CUDA
linker: ``state_on_device``).  So on every linker the untaken branch is not
computed: the work only it needs never runs, and its errors are never
raised.  What the rest of the function reads too is computed outside, once.

The branches must agree: as many outputs, each pair of one dtype and number
of axes (a ``TypeError`` naming the pair otherwise); an output's static
shape keeps the lengths both branches agree on.  The condition is a 0-d
number or bool, true when nonzero.

Outputs are buffers of their own (a copy of the branch's value): the
branch's compiled function lends buffers it reuses on its next call, and
an output must not be an input's memory.
"""

from __future__ import annotations

from tenure.symbolic import inner_graph
from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.inner_graph import OpWithInnerGraphs
from tenure.symbolic.ops.creation import zeros_like
from tenure.symbolic.ops.elemwise import where
from tenure.symbolic.ops.scan import LoopMemory
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import as_tensor_variable

__all__ = ["IfElse", "LazyIfElse", "ifelse"]


def _joined_type(a: TensorType, b: TensorType) -> TensorType:
    """The output type of a pair of branch values of one dtype and ndim."""
    shape = tuple(x if x == y else None for x, y in zip(a.shape, b.shape))
    return TensorType(a.dtype, shape)


def _checked_condition(cond):
    cond = as_tensor_variable(cond)
    if cond.ndim != 0 or cond.type.numpy_dtype.kind not in "biuf":
        raise TypeError(f"ifelse: the condition must be a 0-d number or bool, got {cond} "
                        f"({cond.type})")
    return cond


class IfElse(Op):
    """The graph form: inputs ``[cond, *then_values, *else_values]``,
    ``n_outputs`` outputs.  Its ``perform`` (both branches already computed)
    copies the chosen values; compiling replaces it with a
    :class:`LazyIfElse`."""

    __props__ = ("n_outputs",)

    def __init__(self, n_outputs: int):
        self.n_outputs = int(n_outputs)

    def make_node(self, cond, *values) -> Apply:
        cond = _checked_condition(cond)
        values = [as_tensor_variable(v) for v in values]
        n = self.n_outputs
        if len(values) != 2 * n:
            raise ValueError(f"ifelse: expected {n} values per branch, got {len(values)} in all")
        outputs = [_joined_type(a.type, b.type)() for a, b in zip(values[:n], values[n:])]
        return Apply(self, [cond, *values], outputs)

    def perform(self, node, inputs, output_storage):
        cond, values = inputs[0], inputs[1:]
        chosen = values[:self.n_outputs] if bool(cond) else values[self.n_outputs:]
        mem = LoopMemory.of(chosen)
        for cell, value in zip(output_storage, chosen):
            cell[0] = mem.copy(value)

    def infer_shape(self, node, input_shapes):
        cond, n = node.inputs[0], self.n_outputs
        shapes = input_shapes[1:]
        return [tuple(a if a is b else where(cond, a, b) for a, b in zip(then, other))
                for then, other in zip(shapes[:n], shapes[n:])]

    def grad(self, inputs, output_grads):
        """An output's gradient goes to the taken branch's value; the other
        branch's gets zeros of its own shape."""
        cond, n = inputs[0], self.n_outputs
        then, other = inputs[1:1 + n], inputs[1 + n:]
        to_then = IfElse(n)(cond, *[g if g is not None else zeros_like(v)
                                    for g, v in zip(output_grads, then)],
                            *[zeros_like(v) for v in then])
        to_else = IfElse(n)(cond, *[zeros_like(v) for v in other],
                            *[g if g is not None else zeros_like(v)
                              for g, v in zip(output_grads, other)])
        listed = [list(r) if isinstance(r, (list, tuple)) else [r] for r in (to_then, to_else)]
        return [None] + listed[0] + listed[1]


class LazyIfElse(OpWithInnerGraphs):
    """The compiled form: inner graphs ``then`` and ``else``; inputs ``[cond,
    *then_inputs, *else_inputs]`` (``n_then`` of the first), each branch's
    inputs those of its inner graph.  ``perform`` runs the chosen branch's
    inner graph alone."""

    __props__ = ("n_then",)
    _cache_attrs = ("_then_step", "_else_step")
    #: on the CUDA linker it runs on device arrays, its branches compiled for the device
    state_on_device = True
    #: its outputs' shapes are known once a branch ran
    shape_from_values = True

    def __init__(self, then_graph: FunctionGraph, else_graph: FunctionGraph):
        super().__init__([then_graph, else_graph])
        self.n_then = len(then_graph.inputs)

    def __str__(self) -> str:
        return "ifelse{lazy}"

    def make_node(self, cond, *inputs) -> Apply:
        cond = _checked_condition(cond)
        then_graph, else_graph = self.inner_graphs
        inputs = [as_tensor_variable(v) for v in inputs]
        expected = list(then_graph.inputs) + list(else_graph.inputs)
        if len(inputs) != len(expected):
            raise ValueError(f"ifelse: expected {len(expected)} branch inputs, got {len(inputs)}")
        for got, want in zip(inputs, expected):
            if not want.type.is_compatible_replacement(got.type):
                raise TypeError(f"ifelse: a branch input must be {want.type}, got {got} "
                                f"({got.type})")
        outputs = [_joined_type(a.type, b.type)()
                   for a, b in zip(then_graph.outputs, else_graph.outputs)]
        return Apply(self, [cond, *inputs], outputs)

    def _step(self, which: int):
        name = ("_then_step", "_else_step")[which]
        step = getattr(self, name)
        if step is None:
            step = inner_graph.compile_inner_graph(self.inner_graphs[which], self.inner_mode)
            setattr(self, name, step)
        return step

    def perform(self, node, inputs, output_storage):
        cond, values = inputs[0], inputs[1:]
        taken = 0 if bool(cond) else 1
        args = values[:self.n_then] if taken == 0 else values[self.n_then:]
        with self.running():
            results = self._step(taken)(*args)
            mem = LoopMemory.of(list(args) + list(results))
            for cell, value in zip(output_storage, results):
                cell[0] = mem.copy(value)

    def grad(self, inputs, output_grads):
        raise NotImplementedError("the gradient of a compiled ifelse: take it of the ifelse "
                                  "as built (tn.ifelse), before compiling")


def ifelse(condition, then_branch, else_branch, name: str | None = None):
    """``then_branch`` when ``condition`` (a 0-d number or bool) is true
    (nonzero), else ``else_branch``; only the chosen branch is computed
    (see the module doc).  The branches are variables or equally long
    lists/tuples of them, of pairwise equal dtypes and numbers of axes; the
    result has their structure."""
    single = not isinstance(then_branch, (list, tuple))
    then = [then_branch] if single else list(then_branch)
    other = [else_branch] if not isinstance(else_branch, (list, tuple)) else list(else_branch)
    if len(then) != len(other):
        raise ValueError(f"ifelse: then_branch has {len(then)} value(s), else_branch "
                         f"{len(other)}: they must have as many")
    if not then:
        raise ValueError("ifelse: the branches are empty")
    then = [as_tensor_variable(v) for v in then]
    other = [as_tensor_variable(v) for v in other]
    for i, (a, b) in enumerate(zip(then, other)):
        if a.dtype != b.dtype or a.ndim != b.ndim:
            at = "" if single else f"[{i}]"
            raise TypeError(f"ifelse: then_branch{at} is {a} ({a.type}) but else_branch{at} is "
                            f"{b} ({b.type}): the branches must agree in dtype and number of "
                            f"axes")
    result = IfElse(len(then))(condition, *then, *other)
    results = list(result) if isinstance(result, (list, tuple)) else [result]
    if name is not None:
        for k, out in enumerate(results):
            out.name = name if single else f"{name}[{k}]"
    return results[0] if single else results
