"""Reverse-mode automatic differentiation.

:func:`grad` walks the graph from a scalar cost back to the variables asked
for, calling each op's ``grad(inputs, output_grads)``, which returns one
symbolic gradient per input: a variable of the input's shape, or ``None`` when
no gradient flows to that input (an index, an integer, a disconnected path).

Integer and boolean variables carry no gradient: a path through them is cut.
:func:`stop_gradient` cuts a path explicitly; ``consider_constant`` does the
same for a list of variables.

A log of a sigmoid (``log(sigmoid(x))``, ``log(1 - sigmoid(x))``, ``log(1 +
exp(x))``, see :mod:`tenure.symbolic.patterns`) is differentiated through its
stable form, ``±softplus(±x)``: the chain rule through the formula as written
divides by a sigmoid that has rounded to 0 or 1 (``inf * 0``, a NaN gradient
of the textbook binary cross-entropy at logits of a few tens in float32),
while the stable form's gradient is a sigmoid, finite everywhere.  The
pattern's intermediate values then get no gradient from that node, so this
is done only when none of them is a ``wrt`` or ``consider_constant`` variable.
A softmax or log-softmax written out by hand (``exp(x) / sum(exp(x))``,
``x - log(sum(exp(x)))``, the maximum taken out first or not) is
differentiated as the op it is, under the same condition: its gradient is
then the op's, which the compiled graph computes in one fused pass, not the
chain rule through each intermediate array.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from tenure.symbolic.graph import Apply, Op, Variable, io_toposort
from tenure.symbolic.patterns import (softmax_form, softplus_form, stable_gradient,
                                      variables_between)
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import as_tensor_variable


class DisconnectedInputError(ValueError):
    """The cost does not depend (differentiably) on a variable passed as ``wrt``."""


def is_differentiable(var: Variable) -> bool:
    """Whether gradients can flow through ``var``: float or complex tensors only."""
    return isinstance(var.type, TensorType) and var.type.numpy_dtype.kind in "fc"


class StopGradient(Op):
    """Identity in the forward pass; no gradient flows through it."""

    view_map = {0: [0]}

    def make_node(self, x):
        x = as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = inputs[0]

    def infer_shape(self, node, input_shapes):
        return [input_shapes[0]]

    def grad(self, inputs, output_grads):
        return [None]


_stop_gradient = StopGradient()


def stop_gradient(x):
    """``x`` itself, but treated as a constant by :func:`grad`."""
    return _stop_gradient(x)


def grad(cost, wrt, consider_constant: Sequence[Variable] | None = None,
         disconnected_inputs: str = "raise"):
    """Gradient of the scalar ``cost`` with respect to ``wrt``.

    ``wrt`` is a variable or a list/tuple of them; the result has the same
    structure, each gradient with its variable's shape and dtype.
    ``consider_constant``: variables through which no gradient flows.
    ``disconnected_inputs``: what to do when the cost does not depend on a
    ``wrt`` variable: ``"raise"`` (:class:`DisconnectedInputError`),
    ``"warn"``, or ``"ignore"``/``"zero"`` (both return zeros silently).
    """
    if disconnected_inputs not in ("raise", "warn", "ignore", "zero"):
        raise ValueError("disconnected_inputs: expected 'raise', 'warn', 'ignore' or 'zero', "
                         f"got {disconnected_inputs!r}")
    cost = _check_cost(cost)
    wrt_list = wrt_variables(wrt, "grad")
    for i, var in enumerate(wrt_list):
        if not isinstance(var, Variable):
            raise TypeError(f"grad: wrt[{i}] must be a symbolic variable, got "
                            f"{type(var).__name__}")
        if not is_differentiable(var):
            raise TypeError(f"grad: cannot differentiate with respect to {var} of type "
                            f"{var.type}: only float (or complex) variables have gradients")
    blocked = set(consider_constant or ())
    grads = _backpropagate(cost, wrt_list, blocked)
    results = []
    for var in wrt_list:
        g = grads.get(var)
        if g is None:
            g = _disconnected(var, disconnected_inputs)
        results.append(g)
    return like_wrt(results, wrt)


def wrt_variables(wrt, fn: str) -> list:
    """``wrt`` (a variable, or a list or tuple of them) as a list; a
    TypeError naming ``fn`` for anything else."""
    if isinstance(wrt, Variable):
        return [wrt]
    if isinstance(wrt, (list, tuple)):
        return list(wrt)
    raise TypeError(f"{fn}: wrt must be a variable or a list of variables, got "
                    f"{type(wrt).__name__}")


def like_wrt(results: list, wrt):
    """One result per ``wrt`` variable, in ``wrt``'s structure: alone for a
    variable, a tuple for a tuple, else a list."""
    if isinstance(wrt, Variable):
        return results[0]
    return tuple(results) if isinstance(wrt, tuple) else results


def _check_cost(cost) -> Variable:
    if not isinstance(cost, Variable):
        raise TypeError(f"grad: cost must be a symbolic variable, got {type(cost).__name__}")
    if cost.ndim != 0:
        raise TypeError(f"grad: cost must be a scalar (0-d), got {cost} of type {cost.type}; "
                        "reduce it first (e.g. cost.sum() or cost.mean())")
    if not is_differentiable(cost):
        raise TypeError(f"grad: cost must be a float scalar, got {cost} of type {cost.type}")
    return cost


def _disconnected(var: Variable, policy: str) -> Variable:
    from tenure.symbolic.ops.creation import zeros_like
    message = (f"grad: the cost does not depend on {var} (type {var.type}) through any "
               "differentiable path")
    if policy == "raise":
        raise DisconnectedInputError(message + "; pass disconnected_inputs='ignore' to get "
                                     "zeros instead")
    if policy == "warn":
        warnings.warn(message + "; its gradient is zero", stacklevel=3)
    return zeros_like(var)


def _connected_nodes(cost: Variable, wrt: list[Variable], blocked: set) -> tuple[list, set]:
    """Nodes on a differentiable path from some ``wrt`` to ``cost``, in
    topological order, and the variables on such paths."""
    # Not blocked at `wrt`: one wrt variable may be computed from another.
    nodes = io_toposort([], [cost])
    # Forward pass: which variables depend on a wrt variable differentiably.
    depends = set(wrt)
    for node in nodes:
        if any(i in depends and i not in blocked for i in node.inputs):
            depends.update(o for o in node.outputs if is_differentiable(o))
    # Backward pass: which of those reach the cost.
    reaches = {cost} if cost in depends else set()
    on_path = []
    for node in reversed(nodes):
        if any(o in reaches for o in node.outputs):
            on_path.append(node)
            reaches.update(i for i in node.inputs if i in depends and i not in blocked)
    on_path.reverse()
    return on_path, reaches


def _backpropagate(cost: Variable, wrt: list[Variable], blocked: set) -> dict:
    from tenure.symbolic.ops.creation import ones_like
    nodes, relevant = _connected_nodes(cost, wrt, blocked)
    pending: dict[Variable, list[Variable]] = {}
    if cost in relevant:
        pending[cost] = [ones_like(cost)]
    done: dict[Variable, Variable] = {}

    def total(var: Variable):
        if var not in done:
            parts = pending.pop(var, [])
            done[var] = _sum_terms(parts) if parts else None
        return done[var]

    for node in reversed(nodes):
        output_grads = [total(o) for o in node.outputs]
        if all(g is None for g in output_grads):
            continue  # every path through this node was cut (stop_gradient, a constant)
        stable = _through_stable_form(node, output_grads[0], relevant, blocked, wrt)
        if stable is not None:
            x, g = stable
            pending.setdefault(x, []).append(_fit(g, x, node))
            continue
        input_grads = node.op.grad(list(node.inputs), output_grads)
        if len(input_grads) != len(node.inputs):
            raise ValueError(f"{node.op}.grad returned {len(input_grads)} gradients for "
                             f"{len(node.inputs)} inputs")
        for inp, g in zip(node.inputs, input_grads):
            if g is None or inp not in relevant:
                continue
            pending.setdefault(inp, []).append(_fit(g, inp, node))
    return {var: total(var) for var in wrt}


def _through_stable_form(node: Apply, gz, relevant: set, blocked: set, wrt: list):
    """``(x, gradient of x)`` when ``node`` is a formula with a stable form
    (module doc) whose gradient may skip the formula's intermediate values;
    else None (the op's own gradient applies)."""
    if gz is None:
        return None
    softplus = softplus_form(node)
    softmax = None if softplus is not None else softmax_form(node)
    x = softplus.x if softplus is not None else softmax.x if softmax is not None else None
    if x is None or x not in relevant:
        return None
    kept = blocked.union(wrt)
    if any(v in kept for v in variables_between(x, node.outputs[0])):
        return None
    if softplus is not None:
        return x, stable_gradient(softplus, gz)
    return x, softmax.op.grad([x], [gz])[0]


def _fit(g, inp: Variable, node: Apply) -> Variable:
    """Check an op's gradient against its input, casting the dtype if needed."""
    from tenure.symbolic.ops.elemwise import cast
    g = as_tensor_variable(g)
    if g.ndim != inp.ndim:
        raise ValueError(f"{node.op}.grad returned a {g.ndim}-d gradient for the "
                         f"{inp.ndim}-d input {inp}")
    if g.dtype != inp.dtype:
        g = cast(g, inp.dtype)
    return g


def _sum_terms(parts: list[Variable]) -> Variable:
    from tenure.symbolic.ops.elemwise import add
    total = parts[0]
    for part in parts[1:]:
        total = add(total, part)
    return total
