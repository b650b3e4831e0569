"""Canonicalization: constant folding, merging, and simplifications that are exact.

Every rewrite here replaces a variable by one that computes the same value
with the same dtype, and the replacement's static shape never contradicts the
original's.  "The same value" is meant strictly: bit for bit, signed zeros and
NaNs included, for every input the graph may receive.  Where a rule of
algebra does not hold bit for bit in floating point, the rewrite either fires
only where it does (``x + 0`` only for integers or ``x + -0.0``) or says in
its docstring what it changes: ``exp_of_log`` returns the exact ``x`` where
the pair rounded twice, ``reduce_of_reduce`` adds float terms in another
order, and the shape rewrites no longer run an op whose value was only needed
for its shape (so its run-time errors, e.g. mismatched lengths, go too).
Complex dtypes are left alone by the algebraic rewrites: a complex product by
``1`` is ``(a*1 - b*0) + (a*0 + b*1)j``, which turns an infinite part into NaN.

A rewrite that keeps computing a value never drops a run-time check the
graph does not prove redundant: a reshape, broadcast or dropped axis that
raises on some input still raises after the rewrites (a ValueError naming
the op and the shapes), because the static shape it guarantees is what the
ops after it rely on (loop bounds, buffer sizes).  ``reshape_chain`` fires
only where the static shapes show that one reshape checks what the two did,
``dimshuffle_chain`` keeps every length-1 check, ``mul_by_filled_ones``
broadcasts ``x`` to the fill's own lengths so that the broadcast checks what
the product did, and the ``useless_*`` rewrites remove only ops that the
static shapes prove cannot fail.

Weakly typed Python numbers (``x * 1``) take ``x``'s dtype, so they simplify;
a constant that changes the dtype (``int8_x + 0.0`` is float) never does,
because every rewrite checks that the replacement's dtype is the node's.

The rewrites, by name (each can be excluded by name, by tag, or all at once as
``"canonicalize"``):

====================  ==========  ===============================================
name                  tags        what
====================  ==========  ===============================================
merge                 merge, cse  identical constants and nodes become one
constant_folding      fold        a small result of constant inputs: a constant
mul_by_one            algebra     ``x * 1``, ``1 * x`` -> ``x``
mul_by_filled_ones    algebra     ``alloc(1, *dims) * x`` -> ``expand_to(x, ...)``
div_by_one            algebra     ``x / 1`` -> ``x``
add_zero              algebra     ``x + 0``, ``0 + x`` -> ``x`` (where exact)
sub_zero              algebra     ``x - 0`` -> ``x`` (where exact)
double_negation       algebra     ``-(-x)`` -> ``x``
pow_to_square         algebra     ``x ** 2`` -> ``square(x)``
pow_one               algebra     ``x ** 1`` -> ``x``
exp_of_log            algebra     ``exp(log(x))`` -> ``x``, ``x`` provably >= 0
where_same_branches   algebra     ``where(c, a, a)`` -> ``a``
useless_cast          cast        a cast to ``x``'s own dtype -> ``x``
dimshuffle_chain      shape_ops   two DimShuffles -> one
useless_dimshuffle    shape_ops   a DimShuffle that changes nothing -> ``x``
reshape_chain         shape_ops   reshape of a reshape -> one reshape
useless_reshape       shape_ops   a reshape to ``x``'s own shape -> ``x``
useless_alloc         shape_ops   alloc/broadcast_to ``x``'s static shape -> ``x``
useless_sum_to        shape_ops   sum_to a shape ``x`` provably has -> ``x``
sum_to_leading_axes   shape_ops   ``sum_to`` over added leading axes -> a sum first
sum_to_static_ones    shape_ops   ``sum_to`` onto static length-1 axes -> a keepdims
                                  sum first
reduce_of_reduce      reduce      ``sum(sum(x, a), b)`` -> one sum (and prod, ...)
shape_lift            shape       ``shape(f(y))`` -> built from ``y``'s shape
shape_index_lift      shape       ``shape(f(y))[i]`` -> built from ``y``'s shape
make_vector_index     shape       ``make_vector(a, b, ...)[i]`` -> the i-th item
make_vector_of_shape  shape       ``make_vector(shape(y)[0], ...)`` -> ``shape(y)``
====================  ==========  ===============================================

The ``shape`` rewrites live in :mod:`tenure.rewrites.shape_lift`.  (An alloc
that elementwise ops read broadcast instead goes in the fuse phase:
:mod:`tenure.rewrites.broadcast`.)
"""

from __future__ import annotations

import warnings

import numpy as np

from tenure.rewrites.broadcast import Lengths, has_shape, no_less_static
from tenure.rewrites.engine import register_graph_rewrite, register_node_rewrite
from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.graph import Apply, Constant, Variable
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops.creation import Alloc, expand_to
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.nnet import Softmax
from tenure.symbolic.ops.reduce import Reduce, SumTo
from tenure.symbolic.ops.reduce import sum as reduce_sum
from tenure.symbolic.ops.shape import (DimShuffle, Reshape, Shape, as_dim, dim_eq,
                                       dim_where, reshape_always_fits, reshape_static_shape,
                                       shape_tuple)
from tenure.symbolic.patterns import (
    elemwise_node, is_elemwise, is_filled_with, keeps_shape)
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import TensorConstant, constant

#: the largest number of elements a folded constant may have.  A folded
#: constant is computed at compile time and then held by the compiled function
#: for as long as it lives (and copied out whenever it is returned); past a few
#: pages of memory, computing the value at run time is cheaper than keeping it,
#: and a fill like ``zeros((10**5, 10**5))`` must never be materialized at
#: compile time at all.
FOLD_MAX_ELEMENTS = 10_000


# --------------------------------------------------------------------------
# Matching helpers


def same_dtype(old: Variable, new: Variable) -> bool:
    return new.type.dtype == old.type.dtype


def _real(var: Variable) -> bool:
    """Booleans, integers and reals: what the algebraic rewrites handle."""
    return var.type.numpy_dtype.kind in "biuf"


def _identity_operand(node: Apply, positions, test) -> Variable | None:
    """For a binary node ``op(a, b)``: the operand ``x`` such that the other one
    passes ``test`` and ``x`` alone is the node's exact result type (same
    dtype, not broadcast by the constant)."""
    out = node.outputs[0]
    if not _real(out):
        return None
    for c_pos, x_pos in positions:
        c, x = node.inputs[c_pos], node.inputs[x_pos]
        if test(c) and same_dtype(out, x) and keeps_shape(x, c):
            return x
    return None


# --------------------------------------------------------------------------
# Merge


def _constant_key(c: Constant):
    weak = getattr(c, "weak_value", None)
    # A weak Python number and a 0-d array with the same bytes differ: a node
    # rebuilt on one or the other would get a different dtype.
    return (c.signature(), None if weak is None else type(weak).__name__)


def _apply_merges(fgraph: FunctionGraph, pairs: list) -> bool:
    """Replace every ``old`` by its ``new``: all at once (one validation), or,
    if the features refuse the whole batch, one pair at a time."""
    if not pairs:
        return False
    if fgraph.replace_all_validate(pairs, reason="merge"):
        return True
    changed = False
    for old, new in pairs:
        if fgraph.clients.get(old) and fgraph.replace_all_validate([(old, new)], reason="merge"):
            changed = True
    return changed


def _merge_constants(fgraph: FunctionGraph) -> bool:
    first: dict = {}
    pairs = []
    for var in sorted((v for v in fgraph.variables if isinstance(v, Constant)),
                      key=lambda v: v.auto_id):
        if not fgraph.clients.get(var):
            continue
        try:
            key = _constant_key(var)
            keep = first.setdefault(key, var)
        except TypeError:  # an unhashable signature: leave it alone
            continue
        if keep is not var:
            pairs.append((var, keep))
    return _apply_merges(fgraph, pairs)


def _merge_nodes(fgraph: FunctionGraph) -> bool:
    """One walk, inputs first.  A node is keyed by its op and by what its inputs
    will be once the merges found so far are done, so a whole chain of
    duplicates merges in one walk (and one validation)."""
    seen: dict = {}
    rep: dict = {}  # merged-away variable -> the variable that replaces it
    pairs = []
    for node in fgraph.toposort():
        if node.op.destroy_map:
            continue
        try:
            key = (node.op, tuple(rep.get(i, i) for i in node.inputs))
            other = seen.setdefault(key, node)
        except TypeError:  # an op with unhashable props never merges
            continue
        if other is node:
            continue
        # Only outputs somebody reads: replacing the last read one prunes the
        # node, and its unread outputs with it.
        found = [(old, new) for old, new in zip(node.outputs, other.outputs)
                 if fgraph.clients.get(old)]
        if not all(o.type.is_compatible_replacement(n.type) for o, n in found):
            continue
        for old, new in found:
            rep[old] = new
        pairs.extend(found)
    return _apply_merges(fgraph, pairs)


@register_graph_rewrite("canonicalize", name="merge", tags=("merge", "cse"))
def merge(fgraph: FunctionGraph) -> bool:
    """Common subexpression elimination.

    Constants with the same type and bytes (``Constant.signature()``, and the
    same weakness) become one constant; then, inputs first, two nodes whose
    ops are equal (equal ``__props__``) and whose inputs are the very same
    variables become one.  Exact: ops are deterministic functions of their
    props and inputs, so equal ops on the same inputs compute equal values.
    Nodes that overwrite an input (``destroy_map``) are never merged: each of
    them owns the buffer it writes.
    """
    changed = _merge_constants(fgraph)
    return _merge_nodes(fgraph) or changed


# --------------------------------------------------------------------------
# Constant folding


def _fresh_outputs(node: Apply) -> list[Variable]:
    """``node``'s outputs as ``make_node`` types them today (a node whose
    inputs were replaced by rewrites keeps its original, possibly less
    specific, output types)."""
    try:
        return node.op.make_node(*node.inputs).outputs
    except Exception:  # noqa: BLE001 - the original types are still right
        return node.outputs


@register_node_rewrite("canonicalize", tags=("fold",))
def constant_folding(fgraph, node):
    """A node whose inputs are all constants is computed now, with ``op.perform``.

    Exact: ``perform`` is the reference implementation the linkers run too.
    Only small results are folded (see :data:`FOLD_MAX_ELEMENTS`; the output
    lengths must be known from the types so nothing big is ever computed),
    never a node that overwrites an input (``destroy_map``: its input is a
    constant, which must stay intact), and never one whose ``perform`` fails:
    the error then happens when the function runs, as without folding.
    """
    if node.op.destroy_map or not all(isinstance(i, Constant) for i in node.inputs):
        return None
    fresh = _fresh_outputs(node)
    for out in fresh:
        if not isinstance(out.type, TensorType) or None in out.type.shape:
            return None
        if int(np.prod(out.type.shape, dtype=np.int64)) > FOLD_MAX_ELEMENTS:
            return None
    storage = [[None] for _ in node.outputs]
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            node.op.perform(node, [i.data for i in node.inputs], storage)
    except Exception:  # noqa: BLE001 - leave the error to run time
        return None
    replacements = []
    for old, new, (value,) in zip(node.outputs, fresh, storage):
        if not fgraph.clients.get(old):
            replacements.append(None)  # unread: it goes when the node does
            continue
        out_type = new.type if new.type.dtype == old.type.dtype else old.type
        try:
            value = np.array(value, dtype=old.type.numpy_dtype, copy=True)
            const = TensorConstant(out_type, value)
        except (TypeError, ValueError):
            return None
        replacements.append(const)
    return replacements


# --------------------------------------------------------------------------
# Algebra


@register_node_rewrite("canonicalize", tags=("algebra",))
def mul_by_one(fgraph, node):
    """``x * 1`` and ``1 * x`` become ``x``.

    Exact for booleans, integers and reals (``x * 1`` is ``x`` bit for bit,
    NaN and ``-0.0`` included).  Fires only when the product has ``x``'s
    dtype (a weak ``1`` does; ``int8_x * 1.0`` is float and does not) and the
    ones do not broadcast ``x`` to a bigger shape.
    """
    if not is_elemwise(node, ps.mul):
        return None
    return _identity_operand(node, ((1, 0), (0, 1)), lambda c: is_filled_with(c, 1))


def _broadcast_checked_by_expand(fill_dims, x_dims) -> tuple:
    """The shape of ``ones(fill_dims) * x``, built so that ``expand_to(x,
    *shape)`` raises exactly where the product would: each length is the
    fill's where that is not 1 (``x``'s must then be 1 or the same, which
    ``expand_to`` checks), else ``x``'s.  (The product's ``infer_shape`` would
    not do: it takes a static length where one is known, and then nothing
    checks the fill's length against it.)"""
    n = max(len(fill_dims), len(x_dims))
    fill = (1,) * (n - len(fill_dims)) + tuple(fill_dims)
    xs = (1,) * (n - len(x_dims)) + tuple(x_dims)
    return tuple(dim_where(dim_eq(f, 1), d, f) for f, d in zip(fill, xs))


def _ones_fill_dims(ones: Variable) -> tuple | None:
    """The lengths of ``ones`` when it is ``alloc(1, *dims)`` with a fill
    value that broadcasts to any lengths (all its own are 1), so the alloc
    itself can fail on nothing but a negative length (which ``expand_to``
    checks too)."""
    fill = ones.owner
    if fill is None or not isinstance(fill.op, Alloc):
        return None
    value = fill.inputs[0]
    if not is_filled_with(value, 1) or any(length != 1 for length in value.type.shape):
        return None
    return tuple(as_dim(d) for d in fill.inputs[1:])


@register_node_rewrite("canonicalize", tags=("algebra",))
def mul_by_filled_ones(fgraph, node):
    """``alloc(1, *dims) * x`` becomes ``expand_to(x, *shape)``, ``shape``
    the product's: ``x`` itself when it already has that shape, a broadcast
    copy otherwise -- never the product's copy of ``x``.

    The gradient of ``sum(f(x) * w)`` is ``ones(shape) * w``; this leaves no
    buffer behind when ``w`` has the product's shape, and the gradient's last
    elementwise op can then write into ``f(x)``'s buffer instead.  Exact as
    ``mul_by_one`` is (``x * 1`` is ``x`` bit for bit), and only where the
    product has ``x``'s dtype.  ``shape`` is built from ``dims`` so that
    ``expand_to`` raises where the product would (lengths that cannot
    broadcast); where that makes its static shape less known than the
    product's, the rewrite does not fire.
    """
    if not is_elemwise(node, ps.mul) or len(node.inputs) != 2 or not _real(node.outputs[0]):
        return None
    out = node.outputs[0]
    for ones_pos in (0, 1):
        ones, x = node.inputs[ones_pos], node.inputs[1 - ones_pos]
        fill_dims = _ones_fill_dims(ones)
        if fill_dims is None or not same_dtype(out, x):
            continue
        expanded = expand_to(x, *_broadcast_checked_by_expand(fill_dims, shape_tuple(x)))
        if expanded.type == out.type:
            return expanded
    return None


@register_node_rewrite("canonicalize", tags=("algebra",))
def div_by_one(fgraph, node):
    """``x / 1`` becomes ``x`` (exact for reals; integer ``x / 1`` is float and
    is left alone by the dtype check)."""
    if not is_elemwise(node, ps.true_divide):
        return None
    return _identity_operand(node, ((1, 0),), lambda c: is_filled_with(c, 1))


@register_node_rewrite("canonicalize", tags=("algebra",))
def add_zero(fgraph, node):
    """``x + 0`` and ``0 + x`` become ``x`` where that is exact.

    For booleans and integers always.  For floats only when the zeros are
    ``-0.0``: IEEE addition gives ``-0.0 + +0.0 == +0.0``, so ``x + 0.0`` is
    *not* ``x`` when ``x`` is ``-0.0`` (the sign of zero shows in ``1 / x``,
    ``copysign``, ``arctan2``), while ``x + -0.0`` is ``x`` for every ``x``.
    """
    if not is_elemwise(node, ps.add):
        return None
    if node.outputs[0].type.numpy_dtype.kind == "f":
        def test(c):
            return is_filled_with(c, 0, signbit=True)
    else:
        def test(c):
            return is_filled_with(c, 0)
    return _identity_operand(node, ((1, 0), (0, 1)), test)


@register_node_rewrite("canonicalize", tags=("algebra",))
def sub_zero(fgraph, node):
    """``x - 0`` becomes ``x``.

    Exact for integers, and for floats when the zeros are ``+0.0`` (``x - +0.0
    == x + -0.0 == x`` for every ``x``, ``-0.0`` included); ``x - -0.0`` turns
    ``-0.0`` into ``+0.0`` and is left alone.
    """
    if not is_elemwise(node, ps.sub):
        return None
    return _identity_operand(node, ((1, 0),), lambda c: is_filled_with(c, 0, signbit=False))


@register_node_rewrite("canonicalize", tags=("algebra",))
def double_negation(fgraph, node):
    """``-(-x)`` becomes ``x``: negation only flips the sign bit of a float
    (NaN and zeros included) and is an involution on two's-complement ints."""
    if not is_elemwise(node, ps.neg):
        return None
    inner = elemwise_node(node.inputs[0], ps.neg)
    if inner is None:
        return None
    x = inner.inputs[0]
    out = node.outputs[0]
    if not _real(out) or not same_dtype(out, x):
        return None
    return x


def _power_operands(node: Apply, exponent) -> Variable | None:
    if not is_elemwise(node, ps.power):
        return None
    return _identity_operand(node, ((1, 0),), lambda c: is_filled_with(c, exponent))


@register_node_rewrite("canonicalize", tags=("algebra",))
def pow_to_square(fgraph, node):
    """``x ** 2`` becomes ``square(x)`` (one multiplication instead of ``pow``).

    ``square(x)`` is ``x * x``, the correctly rounded square; ``pow(x, 2)`` is
    too wherever libm's ``pow`` is correctly rounded (glibc's is for this
    case in practice; NumPy itself computes ``a ** 2`` as ``square(a)``).
    Integers: identical, wrap-around included.  Fires only when ``square(x)``
    has the node's dtype (``bool ** 2`` is int64 but ``square(bool)`` is bool).
    """
    x = _power_operands(node, 2)
    if x is None:
        return None
    new = ew.square(x)
    return new if same_dtype(node.outputs[0], new) else None


@register_node_rewrite("canonicalize", tags=("algebra",))
def pow_one(fgraph, node):
    """``x ** 1`` becomes ``x`` (``pow(x, 1)`` is ``x`` exactly, by IEEE and C)."""
    return _power_operands(node, 1)


#: scalar ops whose result is never negative (NaN aside) and never ``-0.0``
_NON_NEGATIVE = (ps.exp, ps.sigmoid, ps.softplus, ps.abs_, ps.square)


def provably_non_negative(var: Variable) -> bool:
    """Whether every element of ``var`` is ``+0.0``, positive, ``+inf`` or NaN:
    a constant with only positive elements, or the output of ``exp``,
    ``sigmoid``, ``softplus``, ``abs``, ``square`` (of reals) or ``softmax``."""
    if isinstance(var, Constant):
        data = var.data
        with np.errstate(all="ignore"):
            return data.size > 0 and data.dtype.kind in "iuf" and bool(np.all(data > 0))
    node = var.owner
    if node is None or var.type.numpy_dtype.kind != "f":
        return False
    if isinstance(node.op, Softmax):
        return True
    return (isinstance(node.op, Elemwise) and node.op.scalar_op in _NON_NEGATIVE
            and all(_real(i) for i in node.inputs))


@register_node_rewrite("canonicalize", tags=("algebra",))
def exp_of_log(fgraph, node):
    """``exp(log(x))`` becomes ``x`` where ``x`` is provably non-negative.

    Mathematically ``exp(log(x)) = x`` for ``x > 0``; in floating point the
    pair returns ``x`` up to the rounding of ``log`` and ``exp`` (a few ulps),
    and this rewrite returns the exact ``x`` instead.  At the edges it agrees
    bit for bit: ``+0 -> -inf -> +0``, ``+inf -> +inf``, NaN -> NaN.  For a
    negative ``x`` the pair gives NaN, and for ``-0.0`` it gives ``+0.0``, so
    the rewrite fires only where :func:`provably_non_negative` holds (a
    positive constant, or the output of exp, sigmoid, softplus, abs, square or
    softmax) and only when the dtype is unchanged (``log`` of ints is float).
    """
    if not is_elemwise(node, ps.exp):
        return None
    inner = elemwise_node(node.inputs[0], ps.log)
    if inner is None:
        return None
    x = inner.inputs[0]
    if not same_dtype(node.outputs[0], x) or not provably_non_negative(x):
        return None
    return x


@register_node_rewrite("canonicalize", tags=("algebra",))
def where_same_branches(fgraph, node):
    """``where(c, a, a)`` becomes ``a``: either branch is the same value.  (Shape
    graphs are full of these: the broadcast length of ``x + x`` is "the other
    length where this one is 1".)  Fires only when neither ``c`` nor the dtype
    changes ``a``'s shape or dtype."""
    if not is_elemwise(node, ps.where):
        return None
    cond, a, b = node.inputs
    out = node.outputs[0]
    if a is not b or not same_dtype(out, a) or not keeps_shape(a, cond):
        return None
    return a


# --------------------------------------------------------------------------
# Casts, broadcasts, reshapes and transposes


@register_node_rewrite("canonicalize", tags=("cast",))
def useless_cast(fgraph, node):
    """A cast to the dtype its input already has is the identity."""
    if not (isinstance(node.op, Elemwise) and isinstance(node.op.scalar_op, ps.Cast)
            and not node.op.inplace_pattern):
        return None
    x = node.inputs[0]
    return x if same_dtype(node.outputs[0], x) else None


def _fully_static(shape) -> bool:
    return None not in shape


@register_node_rewrite("canonicalize", tags=("shape_ops",))
def useless_alloc(fgraph, node):
    """``alloc(x, *dims)`` / ``broadcast_to(x, dims)`` becomes ``x`` when the
    static shapes prove the dims are ``x``'s own shape (every dim a constant
    equal to ``x``'s static length): the copy then holds exactly ``x``."""
    if not isinstance(node.op, Alloc):
        return None
    value, *dims = node.inputs
    if value.ndim != len(dims) or not _fully_static(value.type.shape):
        return None
    if not all(isinstance(d, Constant) for d in dims):
        return None
    if tuple(int(d.data) for d in dims) != value.type.shape:
        return None
    return value if same_dtype(node.outputs[0], value) else None


@register_graph_rewrite("canonicalize", name="useless_sum_to", tags=("shape_ops",))
def useless_sum_to(fgraph) -> bool:
    """Every ``sum_to(g, *dims)`` becomes ``g`` where ``g`` provably has the
    target shape (nothing is summed then, and nothing can fail): statically,
    or by the lengths the graph states (:func:`.broadcast.has_shape`: the
    gradient of ``tanh(x @ w + b) @ v`` sums nothing into the hidden layer
    whatever the lengths, since the second product needs them to agree).
    One walk for all of them, with one :class:`.broadcast.Lengths`."""
    sums = [node for node in fgraph.apply_nodes if isinstance(node.op, SumTo)]
    if not sums:
        return False
    lengths = Lengths(fgraph)
    pairs = []
    for node in sums:
        g, *dims = node.inputs
        out = node.outputs[0]
        if (same_dtype(out, g) and no_less_static(g, out)
                and has_shape(g, dims, lengths=lengths)):
            pairs.append((out, g))
    return bool(pairs) and fgraph.replace_all_validate(pairs, reason="useless_sum_to")


@register_node_rewrite("canonicalize", tags=("shape_ops",))
def sum_to_leading_axes(fgraph, node):
    """``sum_to(g, *dims)`` with more axes in ``g`` than ``dims``: broadcasting
    added those leading axes, so they are summed whatever the lengths, by a
    reduction (``g.sum(axis=(0, ...))``: compiled code on the C and CUDA
    linkers) before ``sum_to`` looks at the rest -- a bias gradient's batch
    axis, then a vector of the bias's length.  Floats only: ``sum_to`` of
    integers accumulates in NumPy's wider type, a reduction in theirs."""
    if not isinstance(node.op, SumTo):
        return None
    g, *dims = node.inputs
    lead = g.ndim - len(dims)
    if lead <= 0 or node.outputs[0].type.numpy_dtype.kind != "f":
        return None
    partial = reduce_sum(g, axis=tuple(range(lead)))
    if not same_dtype(partial, node.outputs[0]):
        return None
    return SumTo()(partial, *dims)


@register_node_rewrite("canonicalize", tags=("shape_ops",))
def sum_to_static_ones(fgraph, node):
    """``sum_to(g, *dims)`` where a target length is statically 1 and ``g``'s
    is not known to be: that axis is summed whatever the lengths (a sum
    over one element is that element), so by a keepdims reduction --
    compiled code on the C and CUDA linkers, fused there with the
    elementwise op that makes ``g`` -- before ``sum_to`` looks at the rest:
    the gradient of a row statistic (``x - x.mean(axis=1, keepdims=True)``)
    is a row sum.  ``g`` must have no extra leading axes
    (:func:`sum_to_leading_axes` takes those first).  Floats only, as
    there."""
    if not isinstance(node.op, SumTo):
        return None
    g, *dims = node.inputs
    out = node.outputs[0]
    if g.ndim != len(dims) or out.type.numpy_dtype.kind != "f":
        return None
    axes = tuple(axis for axis, (want, have) in enumerate(zip(out.type.shape, g.type.shape))
                 if want == 1 and have != 1)
    if not axes:
        return None
    partial = reduce_sum(g, axis=axes, keepdims=True)
    if not same_dtype(partial, out):
        return None
    return SumTo()(partial, *dims)


@register_node_rewrite("canonicalize", tags=("shape_ops",))
def dimshuffle_chain(fgraph, node):
    """``DimShuffle(DimShuffle(x))`` becomes one DimShuffle of ``x``.

    Output axis ``k`` of the pair is axis ``inner.new_order[outer.new_order[k]]``
    of ``x`` (or a new axis).  Exact: both are views of ``x`` with the same
    layout.  Every axis of ``x`` the pair drops (both the ones the inner op
    dropped and the ones the outer dropped after passing them through) is
    dropped by the combined op, which checks at run time that it has length 1,
    as the pair did; axes the inner op added and the outer dropped never
    existed in ``x`` and need no check.
    """
    if not isinstance(node.op, DimShuffle):
        return None
    inner = node.inputs[0].owner
    if inner is None or not isinstance(inner.op, DimShuffle):
        return None
    order = tuple("x" if e == "x" else inner.op.new_order[e] for e in node.op.new_order)
    x = inner.inputs[0]
    if all(e == "x" or isinstance(e, int) for e in order) and order == tuple(range(x.ndim)):
        return x
    return DimShuffle(x.ndim, order)(x)


@register_node_rewrite("canonicalize", tags=("shape_ops",))
def useless_dimshuffle(fgraph, node):
    """A DimShuffle that keeps every axis in place (``new_order == (0, 1, ...)``)
    is ``x`` itself (``transpose(transpose(x))`` ends here after
    ``dimshuffle_chain``)."""
    if not isinstance(node.op, DimShuffle):
        return None
    x = node.inputs[0]
    return x if node.op.new_order == tuple(range(x.ndim)) else None


@register_node_rewrite("canonicalize", tags=("shape_ops",))
def reshape_chain(fgraph, node):
    """``reshape(reshape(x, s1), s2)`` becomes one reshape of ``x``.

    Exact: a reshape keeps the C-order sequence of elements, so two in a row
    give what one gives.  But the pair raises unless ``x`` fits ``s1`` *and*
    the middle result fits ``s2``, and ``reshape(x, s2)`` checks only the
    second: ``reshape(reshape(x, (1, 2, 1)), (-1, 2, 1))`` would turn 8
    elements into a ``(4, 2, 1)`` array whose static type says ``(1, 2, 1)``.
    So it fires only where the first check is provably redundant:

    - the first reshape cannot fail (``s1`` is ``shape(x)``, a flattening
      ``(-1,)``, or the static shapes prove it): ``reshape(x, s2)``, which
      checks ``x``'s size just as the second did (it is the middle's size);
    - the middle and the final static shapes are fully known: the first
      reshape checks that ``x`` has exactly that many elements and the
      second cannot fail, so ``reshape(x, final)`` checks both at once.
    """
    if not isinstance(node.op, Reshape):
        return None
    inner = node.inputs[0].owner
    if inner is None or not isinstance(inner.op, Reshape):
        return None
    x, s1 = inner.inputs
    try:
        new = _one_reshape_checking_both(node, x, s1)
    except ValueError:  # the shapes cannot fit: the error is left to run time
        return None
    if new is None or not node.outputs[0].type.is_compatible_replacement(new.type):
        return None
    return new


def _one_reshape_checking_both(node: Apply, x: Variable, s1: Variable) -> Variable | None:
    """For ``node`` = ``reshape(reshape(x, s1), s2)``: one reshape of ``x``
    that raises where the pair does (see ``reshape_chain``), or None."""
    if reshape_always_fits(x, s1):
        return node.op(x, node.inputs[1])
    middle = _fresh_outputs(node.inputs[0].owner)[0].type.shape
    if not _fully_static(middle):
        return None  # the first reshape checks something the second need not
    final = reshape_static_shape(middle, node.inputs[1])
    if not _fully_static(final):
        return None
    return node.op(x, constant(np.array(final, dtype=np.int64)))


@register_node_rewrite("canonicalize", tags=("shape_ops",))
def useless_reshape(fgraph, node):
    """``reshape(x, s)`` becomes ``x`` when ``s`` is ``shape(x)``, or when the
    static shapes of ``x`` and the result are fully known and equal."""
    if not isinstance(node.op, Reshape):
        return None
    x, shp = node.inputs
    out = node.outputs[0]
    if x.ndim != out.ndim:
        return None
    if shp.owner is not None and isinstance(shp.owner.op, Shape) and shp.owner.inputs[0] is x:
        return x
    fresh = _fresh_outputs(node)[0]
    if _fully_static(x.type.shape) and fresh.type.shape == x.type.shape:
        return x
    return None


# --------------------------------------------------------------------------
# Reductions


#: reductions whose repeated application is one reduction over the union of axes
_COMPOSABLE_REDUCTIONS = ("sum", "prod", "max", "min", "all", "any")


@register_node_rewrite("canonicalize", tags=("reduce",))
def reduce_of_reduce(fgraph, node):
    """``sum(sum(x, a), b)`` becomes ``sum(x, a ∪ b')``, ``b'`` being ``b`` in
    ``x``'s axis numbering; the same for prod, max, min, all and any.

    ``keepdims`` of either: the union is reduced with ``keepdims=True`` and
    then exactly the axes the pair would have dropped are dropped (a
    DimShuffle of length-1 axes; none when it can be said with ``keepdims``).
    Fires only when the combined reduction has the pair's dtype (``sum`` of
    int8 is int64, and so is ``sum`` of that).

    Exactness: max, min, all and any, and sum/prod of integers and booleans
    (modular arithmetic is associative), give identical results.  A float
    sum or product over the union adds the same terms in a different order,
    so it may differ from the pair in the last bits (NumPy promises no
    particular order either; pairwise summation makes the one-pass sum the
    more accurate).  Exclude ``reduce_of_reduce`` to keep the pair.

    Only when nothing else reads the inner result: if it is computed anyway,
    reducing it further costs less than reducing ``x`` again.
    """
    if type(node.op) is not Reduce or node.op.fn_name not in _COMPOSABLE_REDUCTIONS:
        return None
    inner = node.inputs[0].owner
    if (inner is None or type(inner.op) is not Reduce
            or inner.op.fn_name != node.op.fn_name):
        return None
    if len(fgraph.clients.get(node.inputs[0], ())) != 1:
        return None  # the inner result is needed anyway: reducing it further is cheaper
    x = inner.inputs[0]
    n = x.ndim
    a1, k1 = inner.op.axis, inner.op.keepdims
    a2, k2 = node.op.axis, node.op.keepdims
    # Axes of the inner result, in x's numbering.
    inner_axes = list(range(n)) if k1 else [a for a in range(n) if a not in a1]
    outer_in_x = {inner_axes[b] for b in a2}
    union = tuple(sorted(set(a1) | outer_in_x))
    final = [a for a in inner_axes if k2 or a not in outer_in_x]
    if final == list(range(n)):
        new = Reduce(node.op.fn_name, union, keepdims=True)(x)
    elif final == [a for a in range(n) if a not in union]:
        new = Reduce(node.op.fn_name, union, keepdims=False)(x)
    else:
        kept = Reduce(node.op.fn_name, union, keepdims=True)(x)
        new = DimShuffle(n, tuple(final))(kept)
    return new if same_dtype(node.outputs[0], new) else None
