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

The gradient of an elementwise op sums each input's gradient down to the
input's shape (``sum_to(g, *shape(h))``), which does nothing when ``h`` was
not broadcast -- but the ``sum_to`` stands between the elementwise ops of
the gradient, so they cannot fuse, and it runs as a step of its own.  Where
:func:`has_shape` proves that ``g`` has the target shape, it goes.

========================  ==========  ==============================================
name                      tags        what
========================  ==========  ==============================================
alloc_read_as_broadcast   shape_ops   ``f(alloc(v, *dims), u)`` -> ``f(v, u)`` where
                                      ``u`` provably has the shape ``dims``
========================  ==========  ==============================================

(The ``sum_to`` that does nothing goes by canonicalize's ``useless_sum_to``,
with the proof made here.)

How a length is proved (:class:`Lengths`): each axis gets a key naming its
length as a symbol.  A broadcast of several unknown lengths is a key of its
own, the set of the lengths it broadcasts (broadcasting is associative,
commutative and idempotent where it succeeds, so the set says it all); the
``where(d == 1, e, d)`` that shape inference builds for such a length has
the same key.  A matrix product's result has its operands' outer lengths,
and it tells one equality more: its operands' inner lengths agree, or the
call fails.  The product runs in every call that gets as far as returning
anything (tenure's calls change nothing when a step fails), so its equality
holds wherever a result is seen -- unless the graph has a lazy ``ifelse``,
whose branches may not run: then products tell no equalities.
"""

from __future__ import annotations

from tenure.rewrites.engine import register_node_rewrite
from tenure.symbolic.graph import Constant, Variable
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.blas import Dot, MatMul
from tenure.symbolic.ops.composite import Composite, FusedReduce
from tenure.symbolic.ops.creation import Alloc, ExpandTo
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.gemm import Gemm
from tenure.symbolic.ops.ifelse import IfElse, LazyIfElse
from tenure.symbolic.ops.indexing import Subtensor
from tenure.symbolic.ops.reduce import Reduce, SumTo
from tenure.symbolic.ops.shape import DimShuffle, Shape
from tenure.symbolic.patterns import is_filled_with

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
    broadcasting then gives that length; where they differ, the key of
    their broadcast, see :func:`_joined`); reductions on kept axes, fused
    with their elementwise producer or not; DimShuffles; and products of two
    matrices (their outer lengths).  ``memo`` (shared by the calls of one
    question) makes the walk linear in the graph's size: an elementwise op
    asks each input."""
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
    elif isinstance(op, FusedReduce) and op.keepdims and axis not in op.axis:
        key = _broadcast_key(node.inputs, var.ndim, axis, depth - 1, memo)
    elif isinstance(op, DimShuffle) and op.new_order[axis] != "x":
        key = _key(node.inputs[0], op.new_order[axis], depth - 1, memo)
    elif _is_matrix_product(node):
        a, b = node.inputs
        key = _key(a, 0, depth - 1, memo) if axis == 0 else _key(b, 1, depth - 1, memo)
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
    return _joined(keys)


def _joined(keys) -> tuple | None:
    """The key of the broadcast of lengths ``keys``: ``("bcast", members)``,
    members flattened (a broadcast of broadcasts is one broadcast) and
    without length 1 (which broadcasting takes away); the one key itself
    when one is left; a static length other than 1 when there is one (the
    broadcast has that length or fails).  None if a key is None."""
    members = set()   # (no members: nothing stretched the axis, which has length 1)
    for key in keys:
        if key is None:
            return None
        members.update(key[1] if key[0] == "bcast" else (key,))
    if len(members) > 1:
        members.discard(("static", 1))
    static = {k for k in members if k[0] == "static"}
    if len(static) == 1 and len(members) > 1:
        return static.pop()
    if len(members) <= 1:
        return members.pop() if members else ("static", 1)
    return ("bcast", frozenset(members))


def _is_matrix_product(node) -> bool:
    """A product of two matrices (``dot``, ``matmul``; ``gemm``'s ``x @ y``)."""
    return (isinstance(node.op, (Dot, MatMul)) and len(node.inputs) == 2
            and all(x.ndim == 2 for x in node.inputs))


def scalar_key(d: Variable, memo: dict | None = None):
    """The key of the length a 0-d int ``d`` holds: a constant's value, or
    the axis ``shape(x)[k]`` reads; else ``d`` itself (the same variable
    holds the same length)."""
    return _scalar_key(d, _MAX_DEPTH, {} if memo is None else memo)


def _scalar_key(d: Variable, depth: int, memo: dict):
    if isinstance(d, Constant):
        return ("static", int(d.data))
    broadcast = _broadcast_length(d, depth, memo)
    if broadcast is not _NOT_A_BROADCAST:
        return broadcast
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


#: what :func:`_broadcast_length` says of a length that is not a broadcast
_NOT_A_BROADCAST = ("not a broadcast",)


def _broadcast_length(d: Variable, depth: int, memo: dict):
    """The key of a length ``d`` computed as the broadcast of lengths, by
    ``where(a == 1, b, a)`` as shape inference builds it
    (:func:`tenure.symbolic.ops.elemwise.broadcast_symbolic_shapes`), as
    elementwise nodes or fused into one Composite; else
    :data:`_NOT_A_BROADCAST`."""
    node = d.owner
    if node is None or not isinstance(node.op, Elemwise):
        return _NOT_A_BROADCAST
    scalar_op = node.op.scalar_op
    if isinstance(scalar_op, Composite):
        steps = scalar_op.steps
        return _composite_length(steps, ("t", len(steps) - 1), node.inputs, depth, memo)
    if scalar_op != ps.where:
        return _NOT_A_BROADCAST
    cond, b, a = node.inputs
    test = cond.owner
    if (test is None or not isinstance(test.op, Elemwise) or test.op.scalar_op != ps.equal
            or not any(x is a and is_filled_with(one, 1)
                       for x, one in (test.inputs, test.inputs[::-1]))):
        return _NOT_A_BROADCAST
    return _joined([_scalar_key(a, depth - 1, memo), _scalar_key(b, depth - 1, memo)])


def _composite_length(steps, ref, inputs, depth: int, memo: dict):
    """:func:`_broadcast_length` of reference ``ref`` of a Composite's steps."""
    kind, value = ref
    if kind == "i":
        return _scalar_key(inputs[value], depth - 1, memo)
    if kind != "t" or depth <= 0:
        return _NOT_A_BROADCAST
    op, refs = steps[value]
    if op != ps.where or refs[0][0] != "t":
        return _NOT_A_BROADCAST
    cond, b, a = refs
    test_op, test_refs = steps[cond[1]]
    if test_op != ps.equal or test_refs not in ((a, ("c", 1)), (("c", 1), a)):
        return _NOT_A_BROADCAST
    keys = [_composite_length(steps, r, inputs, depth - 1, memo) for r in (a, b)]
    return _NOT_A_BROADCAST if _NOT_A_BROADCAST in keys else _joined(keys)


class Lengths:
    """What a graph proves about lengths: :func:`dim_key` and
    :func:`scalar_key` with one memo, and the equalities of lengths that its
    matrix products tell (see the module doc), kept as a union-find of keys.
    One per question about one graph: a rewrite changes what it knows."""

    def __init__(self, fgraph=None):
        self.memo: dict = {}
        self._parent: dict = {}
        self._broadcasts: list = []   # (members, root): a broadcast key known equal to root
        if fgraph is None or any(isinstance(n.op, (IfElse, LazyIfElse))
                                 for n in fgraph.apply_nodes):
            return
        for node in fgraph.apply_nodes:
            self._learn(node)

    def _learn(self, node) -> None:
        if isinstance(node.op, Gemm):
            x, y = node.inputs[2:4]
        elif _is_matrix_product(node):
            x, y = node.inputs
        else:
            return
        if x.ndim == 2 and y.ndim == 2:
            self._union(dim_key(x, 1, self.memo), dim_key(y, 0, self.memo))

    def _find(self, key):
        while self._parent.get(key, key) != key:
            key = self._parent[key]
        return key

    def _union(self, a, b) -> None:
        if a is None or b is None:
            return
        a, b = self._find(a), self._find(b)
        if a == b:
            return
        if a[0] == "bcast":   # a plain key is the better name of a class
            a, b = b, a
        self._parent[b] = a
        for key in (a, b):
            if key[0] == "bcast":
                self._broadcasts.append((key[1], a))

    def canonical(self, key):
        """``key``'s name among the keys the graph proves equal to it."""
        if key is None:
            return None
        if key[0] != "bcast":
            return self._find(key)
        members = {self._find(k) for k in key[1]}
        # A broadcast of lengths known equal to a length r can stand as r in a
        # larger broadcast: broadcasting is associative.  Each step takes
        # members away, so the walk ends.
        shrunk = True
        while shrunk:
            shrunk = False
            for subset, root in self._broadcasts:
                root = self._find(root)
                replaced = (members - subset) | (set(root[1]) if root[0] == "bcast" else {root})
                if subset <= members and len(replaced) < len(members):
                    members, shrunk = replaced, True
        joined = _joined(members)
        return None if joined is None else self._find(joined)

    def of_axis(self, var: Variable, axis: int):
        return self.canonical(dim_key(var, axis, self.memo))

    def of_scalar(self, d: Variable):
        return self.canonical(scalar_key(d, self.memo))


def has_shape(var: Variable, dims, lengths: Lengths | None = None) -> bool:
    """Whether ``var`` provably has the lengths the 0-d ints ``dims`` hold
    (``lengths``: what the graph proves besides, see :class:`Lengths`)."""
    lengths = Lengths() if lengths is None else lengths
    if var.ndim != len(dims):
        return False
    for axis, d in enumerate(dims):
        key = lengths.of_axis(var, axis)
        if key is None or key != lengths.of_scalar(d):
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
    (broadcast inside its loop: no full-size copy) when its other inputs
    broadcast together provably have the shape ``dims`` -- so its output
    keeps its shape -- and ``v`` provably broadcasts to ``dims``, so no
    error the alloc would raise is lost.  The alloc goes when nothing else
    reads it."""
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
        # (an alloc that may go too cannot be what gives the shape)
        others = [u for j, u in enumerate(node.inputs) if j != i and not _is_alloc(u)]
        if x.ndim != node.outputs[0].ndim or not _broadcast_has_shape(others, dims, memo):
            continue
        inputs[i] = broadcastable(value, x.ndim)
        changed = True
    if not changed:
        return None
    out = node.op(*inputs)
    return out if no_less_static(out, node.outputs[0]) else None


def _broadcast_has_shape(inputs, dims, memo: dict) -> bool:
    """Whether ``inputs`` broadcast together provably have the lengths the
    0-d ints ``dims`` hold."""
    ndim = len(dims)
    if not inputs or any(u.ndim > ndim for u in inputs):
        return False
    for axis, d in enumerate(dims):
        key = _broadcast_key(inputs, ndim, axis, _MAX_DEPTH, memo)
        if key is None or key != scalar_key(d, memo):
            return False
    return True


def broadcastable(value: Variable, ndim: int) -> Variable:
    """``value`` with leading length-1 axes up to ``ndim`` (as broadcasting
    reads it; also the Dask linker's call-time spread of an alloc)."""
    if value.ndim == ndim:
        return value
    pad = ndim - value.ndim
    return DimShuffle(value.ndim, ("x",) * pad + tuple(range(value.ndim)))(value)


def no_less_static(new: Variable, old: Variable) -> bool:
    """Whether ``new`` has ``old``'s ndim and knows every static length it does."""
    return new.ndim == old.ndim and all(
        o is None or n == o for n, o in zip(new.type.shape, old.type.shape))


def _is_alloc(var: Variable) -> bool:
    return var.owner is not None and isinstance(var.owner.op, Alloc)
