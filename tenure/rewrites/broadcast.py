"""Broadcasting without copies: an ``alloc`` that feeds elementwise ops is
read as its value, broadcast inside their loops.  A rewrite of the fuse
phase, after fusion: it is the fused op that reads both the alloc and an
input of the full shape (``(alloc(v) / n) * (2 * d)``), where the op that
reads the alloc alone does not.  Exact, as the canonicalize rewrites are
(see :mod:`tenure.rewrites.canonicalize`): the same values, and no
run-time check dropped that the graph does not prove redundant.

The gradient of a broadcast (``x - x.mean(axis=1, keepdims=True)``) makes
``alloc(v, *x.shape)`` of a ``(?, 1)`` row quantity, a full-size copy that
the next elementwise op reads once.  Where that op's output has the
allocated shape anyway, reading ``v`` gives the same values without the
copy.  Whether it has that shape is proved at compile time by
:func:`dim_key`: which length, as a symbol, each axis of a variable has --
without building any shape graph.

========================  ==========  ==============================================
name                      tags        what
========================  ==========  ==============================================
alloc_read_as_broadcast   shape_ops   ``f(alloc(v, *dims), u)`` -> ``f(v, u)`` where
                                      ``u`` provably has the shape ``dims``
========================  ==========  ==============================================
"""

from __future__ import annotations

from tenure.rewrites.engine import register_node_rewrite
from tenure.symbolic.graph import Constant, Variable
from tenure.symbolic.ops.creation import Alloc, ExpandTo
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.indexing import Subtensor
from tenure.symbolic.ops.reduce import Reduce, SumTo
from tenure.symbolic.ops.shape import DimShuffle, Shape

#: ops whose output's length on each axis is the value of a dim input
_SIZED_BY_DIMS = (Alloc, ExpandTo, SumTo)

#: how many steps :func:`dim_key` follows a length through the graph (a
#: recursion: well under Python's limit)
_MAX_DEPTH = 200


def dim_key(var: Variable, axis: int, memo: dict | None = None):
    """A hashable name of the length of ``var`` on ``axis``: two variables
    whose keys agree on an axis have the same length there in every call.
    ``("static", n)`` for a static length; ``("axis", x, k)`` for axis ``k``
    of a variable whose length nothing here derives (a function's input, a
    product; or one more than :data:`_MAX_DEPTH` steps away); None where the
    graph does not tell (a broadcast of two different unknown lengths,
    which may be 1 at run time).

    It follows: the dim inputs of ``alloc``, ``expand_to`` and ``sum_to``
    (``shape(x)[k]`` is axis ``k`` of ``x``); elementwise ops (the one
    length every input that is not statically 1 there has: NumPy
    broadcasting then gives that length); reductions on kept axes; and
    DimShuffles.  ``memo`` (shared by the calls of one question) makes the
    walk linear in the graph's size: an elementwise op asks each input."""
    return _key(var, axis, _MAX_DEPTH, {} if memo is None else memo)


def _key(var: Variable, axis: int, depth: int, memo: dict):
    static = var.type.shape[axis] if axis < len(var.type.shape) else None
    if static is not None:
        return ("static", static)
    if (var, axis) in memo:
        return memo[(var, axis)]
    node = var.owner
    op = None if node is None else node.op
    if node is None or depth == 0:
        key = ("axis", var, axis)
    elif isinstance(op, _SIZED_BY_DIMS):
        key = _scalar_key(node.inputs[1 + axis], depth - 1, memo)
    elif isinstance(op, Elemwise):
        key = _broadcast_key(node.inputs, var.ndim, axis, depth - 1, memo)
    elif isinstance(op, Reduce) and op.keepdims and axis not in op.axis:
        key = _key(node.inputs[0], axis, depth - 1, memo)
    elif isinstance(op, DimShuffle) and op.new_order[axis] != "x":
        key = _key(node.inputs[0], op.new_order[axis], depth - 1, memo)
    else:
        key = ("axis", var, axis)
    memo[(var, axis)] = key
    return key


def _broadcast_key(inputs, ndim: int, axis: int, depth: int, memo: dict):
    """The length of axis ``axis`` of an elementwise result over ``inputs``:
    the key every input not statically of length 1 there agrees on."""
    keys = set()
    for x in inputs:
        offset = ndim - x.ndim
        if axis < offset or x.type.shape[axis - offset] == 1:
            continue    # broadcast along the axis: says nothing of its length
        keys.add(_key(x, axis - offset, depth, memo))
    if len(keys) != 1 or None in keys:
        return None
    return keys.pop()


def scalar_key(d: Variable, memo: dict | None = None):
    """The key of the length a 0-d int ``d`` holds: a constant's value, or
    the axis ``shape(x)[k]`` reads; else ``d`` itself (the same variable
    holds the same length)."""
    return _scalar_key(d, _MAX_DEPTH, {} if memo is None else memo)


def _scalar_key(d: Variable, depth: int, memo: dict):
    if isinstance(d, Constant):
        return ("static", int(d.data))
    node = d.owner
    if (node is not None and isinstance(node.op, Subtensor) and len(node.op.pattern) == 1
            and node.op.pattern[0][0] == "int" and isinstance(node.op.pattern[0][1], int)):
        shape = node.inputs[0]
        if shape.owner is not None and isinstance(shape.owner.op, Shape):
            x = shape.owner.inputs[0]
            k = node.op.pattern[0][1]
            if -x.ndim <= k < x.ndim:
                return _key(x, k % x.ndim, depth, memo)
    return ("scalar", d)


def has_shape(var: Variable, dims, memo: dict | None = None) -> bool:
    """Whether ``var`` provably has the lengths the 0-d ints ``dims`` hold."""
    memo = {} if memo is None else memo
    if var.ndim != len(dims):
        return False
    for axis, d in enumerate(dims):
        key = dim_key(var, axis, memo)
        if key is None or key != scalar_key(d, memo):
            return False
    return True


def broadcasts_to(value: Variable, dims, memo: dict | None = None) -> bool:
    """Whether ``value`` provably broadcasts to the lengths ``dims`` hold
    without stretching any axis but statically length-1 ones (so that
    reading it broadcast never fails where the alloc would not)."""
    memo = {} if memo is None else memo
    offset = len(dims) - value.ndim
    if offset < 0:
        return False
    for axis in range(value.ndim):
        if value.type.shape[axis] == 1:
            continue
        key = dim_key(value, axis, memo)
        if key is None or key != scalar_key(dims[offset + axis], memo):
            return False
    return True


@register_node_rewrite("fuse", tags=("shape_ops", "fusion"))
def alloc_read_as_broadcast(fgraph, node):
    """An elementwise op reading ``alloc(v, *dims)`` reads ``v`` instead
    (broadcast inside its loop: no full-size copy) when another of its
    inputs provably has the shape ``dims`` -- so its output keeps its shape
    -- and ``v`` provably broadcasts to ``dims``, so no error the alloc
    would raise is lost.  The alloc goes when nothing else reads it."""
    if not isinstance(node.op, Elemwise) or node.op.inplace_pattern:
        return None
    inputs = list(node.inputs)
    memo: dict = {}   # (one walk of the graph's lengths for all of this node's inputs)
    changed = False
    for i, x in enumerate(inputs):
        owner = x.owner
        if owner is None or not isinstance(owner.op, Alloc):
            continue
        value, dims = owner.inputs[0], owner.inputs[1:]
        if value.type.dtype != x.type.dtype or not broadcasts_to(value, dims, memo):
            continue
        if not any(j != i and not _is_alloc(u) and has_shape(u, dims, memo)
                   for j, u in enumerate(node.inputs)):
            continue   # (an alloc that may go too cannot be what gives the shape)
        inputs[i] = broadcastable(value, x.ndim)
        changed = True
    if not changed:
        return None
    out = node.op(*inputs)
    return out if _no_less_static(out, node.outputs[0]) else None


def broadcastable(value: Variable, ndim: int) -> Variable:
    """``value`` with leading length-1 axes up to ``ndim`` (as broadcasting
    reads it; also the Dask linker's call-time spread of an alloc)."""
    if value.ndim == ndim:
        return value
    pad = ndim - value.ndim
    return DimShuffle(value.ndim, ("x",) * pad + tuple(range(value.ndim)))(value)


def _no_less_static(new: Variable, old: Variable) -> bool:
    """Whether ``new`` has ``old``'s ndim and knows every static length it does."""
    return new.ndim == old.ndim and all(
        o is None or n == o for n, o in zip(new.type.shape, old.type.shape))


def _is_alloc(var: Variable) -> bool:
    return var.owner is not None and isinstance(var.owner.op, Alloc)
