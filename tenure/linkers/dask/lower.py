"""Lowering a rewritten graph to a Dask graph, one node at a time.

Every value is either *concrete* (a NumPy array: constants, shapes and what
is computed from them alone, evaluated at once with the op's ``perform``)
or *lazy* (a ``dask.array`` array: the inputs, the shared variables and
everything computed from them).  A node with a lazy input is lowered by the
entry of :data:`LOWERINGS` for its op's class:

- elementwise ops and fused ``Composite`` loops: ``blockwise`` tasks that
  run a tenure-compiled :class:`~.chunks.ChunkKernel` on each chunk;
- reductions (fused too): a kernel reduces each chunk to one partial
  (``keepdims``), and Dask's tree reduction combines the partials
  (``mean`` reduces sums and divides once).  That is the lowering choice
  ``dask_partial_reductions`` (:mod:`tenure.rewrites.dask_specialize`); a
  mode that excludes it gets the reduced axes rechunked into one chunk and
  the reduction run whole on each chunk;
- ops along axes (softmax, log_softmax, logsumexp, cumsum, sort, argmax,
  var): the axes they need whole are rechunked into one chunk, then a
  kernel runs per chunk;
- ``dot``, ``matmul``, ``tensordot``, ``outer``, ``gemm``: Dask's blocked
  algorithms; shape ops and indexing: Dask's own;
- a loop (``scan``): one task runs it whole, its outputs one chunk each.

:func:`unsupported` names, at compile time, every op that a lazy value
reaches and no entry lowers; lowering never computes a lazy value (it runs
under a scheduler that refuses to), so nothing round-trips through the
client unseen.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
import uuid
from typing import Callable, NamedTuple

import dask
import dask.array as da
import numpy as np
from dask.array.core import normalize_chunks, slices_from_chunks

from tenure.linkers.dask.regions import (ALWAYS_LAZY, COMBINED_REDUCTIONS, Region,
                                         is_rows_product, lazy_variables)
from tenure.linkers.describe import compiled_detail, user_call, user_message
from tenure.linkers.thunk import step_note
from tenure.symbolic.graph import Constant, Variable
from tenure.symbolic.ops.blas import Dot, MatMul, Outer, TensorDot
from tenure.symbolic.ops.composite import FusedReduce
from tenure.symbolic.ops.creation import Alloc, ExpandTo
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.gemm import Gemm
from tenure.symbolic.ops.ifelse import IfElse, LazyIfElse
from tenure.symbolic.ops.indexing import AdvancedSubtensor, Subtensor, index_tuple
from tenure.symbolic.ops.join import Join, Split, Stack
from tenure.symbolic.ops.nnet import LogSoftmax, LogSumExp, Softmax
from tenure.symbolic.ops.reduce import ArgReduce, CumProd, CumSum, Reduce, SumTo, Var
from tenure.symbolic.ops.scan import Scan, concrete_dims, step_output_shape
from tenure.symbolic.ops.scan_grad import CheckpointedScanGrad, LoopGradient
from tenure.symbolic.ops.shape import DimShuffle, Reshape, Shape, SpecifyShape
from tenure.symbolic.ops.sorting import ArgSort, Sort
from tenure.symbolic.ops.subtensor_update import IncSubtensor
from tenure.symbolic.ops.trace import Trace
from tenure.symbolic.types import TensorType

__all__ = ["LOWERINGS", "LoweringError", "lower_graph", "unsupported"]


class LoweringError(TypeError):
    """A graph (or a value at call time) the dask linker cannot lower."""


def is_lazy(value) -> bool:
    return isinstance(value, da.Array)


def chunked(value: np.ndarray, chunks, copy: bool) -> da.Array:
    """``value`` as a Dask array of ``chunks`` (anything ``from_array`` takes)
    whose chunks are views of it, or of one copy of it (``dask.array.from_array``
    always copies a NumPy array)."""
    if copy:
        value = value.copy()
    chunks = normalize_chunks(chunks, value.shape, dtype=value.dtype)
    name = f"tenure-input-{uuid.uuid4().hex}"
    keys = itertools.product([name], *(range(len(c)) for c in chunks))
    graph = {key: value[slices] for key, slices in zip(keys, slices_from_chunks(chunks))}
    return da.Array(graph, name, chunks=chunks, dtype=value.dtype,
                    meta=np.empty((0,) * value.ndim, dtype=value.dtype))


def as_lazy(value) -> da.Array:
    """``value`` as a Dask array (a concrete one, a constant or a value
    computed from shapes that nobody writes, becomes one chunk viewing it)."""
    if is_lazy(value):
        return value
    value = np.asarray(value)
    return chunked(value, value.shape, copy=False)


def _meta(var) -> np.ndarray:
    """An empty array of ``var``'s dtype and ndim: Dask's ``meta``, so that it
    never calls a kernel on empty chunks to find out."""
    return np.empty((0,) * var.ndim, dtype=var.type.numpy_dtype)


def _task_name(op) -> str:
    """A fresh name for a layer of tasks (naming it ourselves spares Dask from
    hashing the kernel and every argument to make one: each call builds a
    new graph, so a content hash would buy nothing)."""
    return f"{re.sub(r'[^A-Za-z0-9_]+', '_', str(op))[:40]}-{uuid.uuid4().hex}"


def _right_aligned(ndim: int, var) -> tuple[int, ...]:
    return tuple(range(ndim - var.ndim, ndim))


def _value(var, env):
    return var.data if isinstance(var, Constant) else env[var]


class KernelOutput(NamedTuple):
    """One output of a kernel run by :func:`_run_kernel`: the variable, the
    chunk lengths Dask should expect where they differ from the arguments'
    (``adjust_chunks``: a reduced axis has length 1 per chunk), and the
    lengths of the axes it has beyond the kernel's (one block each)."""

    var: Variable
    adjust: dict | None = None
    new_axes: tuple[int, ...] = ()


def _run_kernel(kernel, arguments, env, ndim: int, outputs, indices=None) -> list:
    """``kernel`` on every chunk of ``arguments`` (variables, their values in
    ``env``, read with NumPy's broadcasting over ``ndim`` axes unless
    ``indices`` gives a variable's Dask index): one Dask array per
    :class:`KernelOutput` of ``outputs``.

    A kernel of several outputs returns a tuple per chunk; one more small
    task per chunk and output takes each array out of it.  An index that is
    not an output axis is an axis the kernel reads whole (the shared axis of
    a product): the kernel's ``whole_axes`` name it."""
    indices = indices or {}
    ind = tuple(range(ndim))
    pairs = []
    for var in arguments:
        pairs += [as_lazy(_value(var, env)), indices.get(var) or _right_aligned(ndim, var)]
    name = _task_name(kernel)
    # New axes get indices no argument uses: an index an argument has and the
    # output lacks is an axis the kernel reads whole (contracted), and one the
    # output shares would be taken as the argument's axis instead of a new one.
    first_new = 1 + max((i for index in pairs[1::2] for i in index), default=ndim - 1)

    def layout(out: KernelOutput) -> tuple[tuple[int, ...], dict]:
        kept = out.var.ndim - len(out.new_axes)
        new = {first_new + i: n for i, n in enumerate(out.new_axes)}
        out_ind = tuple(range(kept)) + tuple(new)
        return out_ind, {"adjust_chunks": out.adjust or None, "new_axes": new or None,
                         "dtype": out.var.type.numpy_dtype, "meta": _meta(out.var)}

    if len(outputs) == 1:
        out_ind, options = layout(outputs[0])
        return [da.blockwise(kernel, out_ind, *pairs, name=name, **options)]
    tuples = da.blockwise(kernel, ind, *pairs, name=name, dtype=object,
                          meta=np.empty((0,) * ndim, dtype=object))
    return [da.blockwise(operator.getitem, out_ind, tuples, ind, k, None,
                         name=f"{name}-{k}", **options)
            for k, (out_ind, options) in enumerate(map(layout, outputs))]


# ----------------------------------------------------------------------------
# elementwise


def lower_elemwise(node, values, ctx) -> list:
    """One ``blockwise`` (an elementwise node has one output); broadcasting as
    NumPy's (length-1 axes)."""
    _check_broadcast(node, values)
    kernel, arguments = ctx.kernel(node, lambda: ([node], node.outputs, {}))
    out = node.outputs[0]
    return _run_kernel(kernel, arguments, dict(zip(node.inputs, values)), out.ndim,
                       [KernelOutput(out)])


def _check_broadcast(node, values) -> None:
    """NumPy's broadcast error for operands whose known lengths do not fit.

    ``blockwise`` lines chunks up by index and would take a length-2 axis
    beside a length-4 one without a word (a static length, e.g. of a
    shared variable, against an unknown one the graph could not check)."""
    shapes = [tuple(np.shape(v)) for v in values]
    if any(isinstance(n, float) and math.isnan(n) for shape in shapes for n in shape):
        return   # lengths Dask learns only when it computes: its own checks apply
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(f"{node.op}: operands could not be broadcast together with shapes "
                         f"{' '.join(str(shape) for shape in shapes)}") from None


# ----------------------------------------------------------------------------
# reductions: a kernel per chunk, Dask's tree over the partials

#: how partials of each reduction combine
COMBINE = {name: getattr(da, "sum" if name == "mean" else name)
           for name in COMBINED_REDUCTIONS}


def _partial_node(node):
    """A node reducing one chunk to its partial (keepdims; ``mean``: sum)."""
    op = node.op
    fn = "sum" if op.fn_name == "mean" else op.fn_name
    if isinstance(op, FusedReduce):
        partial = FusedReduce(op.composite, fn, op.axis, True)
    else:
        partial = Reduce(fn, op.axis, True)
    return partial.make_node(*node.inputs)


class Partial(NamedTuple):
    """How a region's kernel computes one sink's partial per chunk: the
    ``nodes`` it runs after the region's, and the partial ``var``."""

    nodes: list
    var: Variable


def _sink_partial(sink, region) -> Partial:
    """A reduction's keepdims partial; a contraction ``x.T @ e``'s product of
    the chunk's rows, with a leading axis of length 1 (one per chunk: the
    partials stack along it, and add up)."""
    if not is_contraction(sink):
        partial = _partial_node(sink)
        return Partial([partial], partial.outputs[0])
    product = sink.outputs[0]
    stacked = DimShuffle(product.ndim, ("x",) + tuple(range(product.ndim)))(product)
    helpers = [h for h in region.helpers if h.outputs[0] in sink.inputs]
    return Partial(helpers + [sink, stacked.owner], stacked)


def is_contraction(sink) -> bool:
    """Whether a region's ``sink`` is a product over its rows (not a reduction)."""
    return isinstance(sink.op, (Dot, MatMul))


def _combine(node, partials, shape) -> da.Array:
    """``node``'s result from the partials of chunks of an array of ``shape``
    (a contraction's partial products stack along a leading axis)."""
    op = node.op
    if isinstance(op, (Dot, MatMul)):
        return partials.sum(axis=0).astype(node.outputs[0].type.numpy_dtype, copy=False)
    total = COMBINE[op.fn_name](partials, axis=op.axis, keepdims=op.keepdims)
    if op.fn_name == "mean":
        total = total / math.prod(shape[a] for a in op.axis)
    return total.astype(node.outputs[0].type.numpy_dtype, copy=False)


def lower_reduce(node, values, ctx) -> list:
    op = node.op
    if op.fn_name not in COMBINE:
        raise LoweringError(f"dask linker: no tree reduction for {op.fn_name!r} ({op})")
    if not op.axis:   # reducing no axis: the op on each chunk, nothing to combine
        kernel, arguments = ctx.kernel(node, lambda: ([node], node.outputs, {}))
        return _run_kernel(kernel, arguments, dict(zip(node.inputs, values)),
                           node.outputs[0].ndim, [KernelOutput(node.outputs[0])])
    if any(0 in np.shape(v) for v in values if is_lazy(v)):
        # Nothing to reduce: the op on empty arrays of the same shapes (an
        # empty result, or NumPy's error for an empty axis without identity).
        empty = [np.zeros(v.shape, dtype=v.dtype) if is_lazy(v) else v for v in values]
        return [as_lazy(r) for r in _concrete(node, empty)]
    if not ctx.partial_reductions:
        return _reduce_whole(node, values, ctx)
    partial = ctx.made_once(("partial", node), lambda: _partial_node(node))
    kernel, arguments = ctx.kernel(node, lambda: ([partial], partial.outputs, {}))
    env = dict(zip(node.inputs, values))
    ndim = max(v.ndim for v in arguments)
    partials, = _run_kernel(kernel, arguments, env, ndim,
                            [KernelOutput(partial.outputs[0], {a: 1 for a in op.axis})])
    shape = da.core.broadcast_shapes(*[np.shape(env[v]) for v in arguments])
    return [_combine(node, partials, shape)]


def _keepdims_node(node):
    """``node``'s reduction (the same ``fn``: it sees whole axes), keeping its axes."""
    op = node.op
    if isinstance(op, FusedReduce):
        whole = FusedReduce(op.composite, op.fn_name, op.axis, True)
    else:
        whole = Reduce(op.fn_name, op.axis, True)
    return whole.make_node(*node.inputs)


def _reduce_whole(node, values, ctx) -> list:
    """``dask_partial_reductions`` switched off: the reduced axes of every
    lazy argument rechunked into one chunk, the reduction (keeping its axes)
    run on each chunk, and the axes dropped unless the op keeps them."""
    op = node.op
    whole = ctx.made_once(("whole", node), lambda: _keepdims_node(node))
    kernel, arguments = ctx.kernel(("whole", node), lambda: ([whole], whole.outputs, {}))
    env = dict(zip(node.inputs, values))
    ndim = max(v.ndim for v in arguments)
    reads = {}
    for var in arguments:
        value, lead = env[var], ndim - var.ndim
        if is_lazy(value):
            value = value.rechunk({a - lead: -1 for a in op.axis if a >= lead})
        reads[var] = value
    total, = _run_kernel(kernel, arguments, reads, ndim,
                         [KernelOutput(whole.outputs[0], {a: 1 for a in op.axis})])
    if not op.keepdims:
        total = total.squeeze(axis=op.axis)
    return [total.astype(node.outputs[0].type.numpy_dtype, copy=False)]


# ----------------------------------------------------------------------------
# regions: elementwise nodes and the partials of their reductions, one kernel


def _node_shape(node, shape_of) -> tuple:
    """The shape of a region node's output from its inputs' shapes (raises
    ValueError where they do not fit)."""
    if is_rows_product(node):
        (rows, inner), b = (shape_of(v) for v in node.inputs)
        if b[0] != inner:
            raise ValueError(f"{node.op}: shapes {(rows, inner)} and {b} do not fit")
        return (rows,) + tuple(b[1:])
    return np.broadcast_shapes(*[shape_of(v) for v in node.inputs])


def _product_indices(region, ndim: int) -> dict | None:
    """The Dask index of each operand of the region's products: a block of
    the matrix's rows and the whole shared axis (index ``ndim``), the whole
    other operand (its columns by blocks, as the result's).  None when an
    operand would need two indices (read by two products differently, or
    by an elementwise node too)."""
    indices: dict = {}
    for node in region.nodes:
        if not is_rows_product(node):
            continue
        a, b = node.inputs
        for var, index in ((a, (0, ndim)), (b, (ndim,) + tuple(range(1, b.ndim)))):
            if indices.setdefault(var, index) != index:
                return None
    contractions = [s for s in region.sinks if is_contraction(s)]
    for sink in contractions:
        x, _ = _contraction_operands(sink, region)
        if indices.setdefault(x, (0, ndim)) != (0, ndim):
            return None
    read_elementwise = {v for node in region.nodes + region.sinks
                        if not is_rows_product(node) and node not in contractions
                        for v in node.inputs}
    return None if read_elementwise & set(indices) else indices


def _contraction_operands(sink, region):
    """``(x, e)`` of a contraction sink ``x.T @ e`` (see :mod:`.regions`)."""
    a, b = sink.inputs
    helpers = {h.outputs[0]: h for h in region.helpers}
    x = helpers[a].inputs[0]
    e = helpers[b].inputs[0] if b in helpers else b
    return x, e


def _contraction_rows(sink, region, shape_of) -> tuple[int, ...]:
    """The rows a contraction sums over: ``e``'s shape, which ``x``'s rows
    must match (ValueError otherwise)."""
    x, e = _contraction_operands(sink, region)
    if shape_of(x)[0] != shape_of(e)[0]:
        raise ValueError(f"{sink.op}: {shape_of(x)} and {shape_of(e)} do not fit")
    return tuple(shape_of(e))


def _region_shape(region, env) -> tuple[int, ...] | None:
    """The one shape of every node of ``region`` for these values, or None
    when they differ (a length 1 broadcast at run time), when a length is not
    known, or when no argument is lazy."""
    shapes: dict = {}
    lazy = False

    def shape_of(var):
        nonlocal lazy
        if var in shapes:
            return shapes[var]
        value = _value(var, env)
        lazy = lazy or is_lazy(value)
        return tuple(np.shape(value))

    found = None
    for node in region.nodes + region.sinks:
        try:
            if node in region.nodes:
                shape = _node_shape(node, shape_of)
            elif is_contraction(node):
                shape = _contraction_rows(node, region, shape_of)
            else:
                shape = np.broadcast_shapes(*[shape_of(v) for v in node.inputs])
        except (TypeError, ValueError):
            return None
        if any(not isinstance(n, (int, np.integer)) for n in shape):
            return None
        if found is not None and shape != found:
            return None
        found = shape
        shapes.update((out, shape) for out in node.outputs)
    return found if lazy else None


def lower_region(region: Region, env, ctx) -> None:
    """All of ``region`` as one kernel per chunk (see :mod:`.regions`), or
    node by node when its nodes do not share one shape for these values."""
    shape = _region_shape(region, env)
    if shape is not None and 0 in shape:
        shape = None   # empty: the nodes one by one (a reduction says what it makes of that)
    indices = None if shape is None else _product_indices(region, len(shape))
    if indices is None:
        for node in region.all_nodes:
            lower_node(node, env, ctx)
        return
    partials = [ctx.made_once(("sink partial", sink), lambda s=sink: _sink_partial(s, region))
                for sink in region.sinks]
    kernel, arguments = ctx.kernel(region, lambda: (
        list(region.nodes) + [n for p in partials for n in p.nodes],
        list(region.outputs) + [p.var for p in partials],
        {var: (index.index(len(shape)),) for var, index in indices.items()}))
    outputs = [KernelOutput(var) for var in region.outputs]
    for sink, partial in zip(region.sinks, partials):
        if is_contraction(sink):
            x, _ = _contraction_operands(sink, region)
            columns = np.shape(_value(x, env))[1:]
            outputs.append(KernelOutput(partial.var, {0: 1},
                                        columns + (1,) * (sink.outputs[0].ndim - 1)))
        else:
            outputs.append(KernelOutput(partial.var, {a: 1 for a in sink.op.axis}))
    reads = _whole_inner_axis(region, arguments, env, indices, len(shape))
    results = _run_kernel(kernel, arguments, reads, len(shape), outputs, indices)
    env.update(zip(region.outputs, results))
    for sink, result in zip(region.sinks, results[len(region.outputs):]):
        env[sink.outputs[0]] = _combine(sink, result, shape)


def _whole_inner_axis(region, arguments, env, indices: dict, ndim: int) -> dict:
    """``env``, or a copy in which the region's arguments are one chunk along
    its axis 1, when a product of the region reads a matrix the region
    computes: that matrix's axis 1 is the product's inner axis, which the
    kernel needs whole, but it is made chunk by chunk along the region's axis
    1 (the product's columns, of the same length)."""
    computed = {out for node in region.nodes for out in node.outputs}
    if not any(is_rows_product(node) and node.inputs[0] in computed for node in region.nodes):
        return env
    reads = dict(env)
    for var in arguments:
        value = _value(var, env)
        index = indices.get(var) or _right_aligned(ndim, var)
        split = {axis: -1 for axis, i in enumerate(index)
                 if i == 1 and is_lazy(value) and len(value.chunks[axis]) > 1}
        if split:
            reads[var] = value.rechunk(split)
    return reads


def lower_sum_to(node, values, ctx) -> list:
    """The adjoint of broadcasting, as :class:`SumTo`'s ``perform`` (sums via
    :func:`lower_reduce`'s tree, through Dask's ``sum``)."""
    g, target = as_lazy(values[0]), tuple(int(d) for d in values[1:])
    lead = g.ndim - len(target)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, (have, want) in enumerate(zip(g.shape, target))
                 if want == 1 and have != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    if g.shape != target:
        raise ValueError(f"sum_to: an array of shape {values[0].shape} does not broadcast "
                         f"from {target}")
    return [g.astype(node.outputs[0].type.numpy_dtype, copy=False)]


# ----------------------------------------------------------------------------
# ops that need whole axes


def _op_axes(op, ndim: int) -> tuple[int, ...]:
    axis = op.axis
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        return (axis % ndim,) if ndim else ()
    return tuple(a % ndim for a in axis)


def lower_along_axes(node, values, ctx) -> list:
    """Rechunk the op's axes into one chunk each, then one kernel per chunk.
    (An op over every axis that returns them flattened, ``cumsum(x)`` of an
    n-d ``x``, runs on ``x`` flattened: the op on a vector.)"""
    (x_var,) = node.inputs
    x = as_lazy(values[0])
    if node.op.axis is None and node.outputs[0].ndim == 1 and x.ndim > 1:
        flat = ctx.made_once(("on a vector", node), lambda: _on_a_vector(node))
        x = x.rechunk(-1).reshape(-1)
        kernel, _ = ctx.kernel(node, lambda: ([flat], flat.outputs, {}))
        out = node.outputs[0]
        return [da.blockwise(kernel, (0,), x, (0,), name=_task_name(node.op),
                             dtype=out.type.numpy_dtype, meta=_meta(out))]
    axes = _op_axes(node.op, x.ndim)
    x = x.rechunk({a: -1 for a in axes})
    out = node.outputs[0]
    ind = tuple(range(x.ndim))
    if out.ndim == x.ndim:
        out_ind = ind
    elif out.ndim == x.ndim - len(axes):
        out_ind = tuple(a for a in ind if a not in axes)
    elif out.ndim == 0:
        out_ind = ()
    else:
        raise LoweringError(f"dask linker: {node.op} maps {x.ndim}-d to {out.ndim}-d, which "
                            "no chunk layout gives")
    whole = tuple(a for a in ind if a not in out_ind)
    kernel, _ = ctx.kernel(node, lambda: ([node], node.outputs, {x_var: whole}))
    # A reduction that keeps its axes (var(keepdims=True)) makes each of them
    # length 1: Dask must know, or the result claims the input's shape.
    kept_as_one = {a: 1 for a in axes if out.ndim == x.ndim and out.type.shape[a] == 1}
    return [da.blockwise(kernel, out_ind, x, ind, name=_task_name(node.op),
                         dtype=out.type.numpy_dtype, meta=_meta(out),
                         adjust_chunks=kept_as_one or None)]


def _on_a_vector(node):
    """``node``'s op applied to a vector of its input's dtype."""
    return node.op.make_node(TensorType(node.inputs[0].type.dtype, (None,))())


# ----------------------------------------------------------------------------
# products: Dask's blocked algorithms


def _cast(node, result) -> list:
    return [result.astype(node.outputs[0].type.numpy_dtype, copy=False)]


def _rows_product(node, values, ctx) -> list | None:
    """A matrix times a matrix or a vector whose shared axis is one chunk on
    both sides, as a kernel per block of rows (and of columns): no partial
    products to add, and a ``blockwise`` task Dask fuses with the
    elementwise tasks that read it.  None when the shapes or chunks differ."""
    a, b = (as_lazy(v) for v in values)
    if a.ndim != 2 or b.ndim not in (1, 2) or len(a.chunks[1]) != 1 or len(b.chunks[0]) != 1:
        return None
    a_var, b_var = node.inputs
    if a_var is b_var:   # a product of a matrix with itself: one argument, two indices
        return None
    if isinstance(a_var, Constant) or isinstance(b_var, Constant):
        return None   # a kernel holds its constants: it would take one argument, not two
    kernel, _ = ctx.kernel(node, lambda: ([node], node.outputs, {a_var: (1,), b_var: (0,)}))
    out = node.outputs[0]
    b_ind, out_ind = ((1,), (0,)) if b.ndim == 1 else ((1, 2), (0, 2))
    return [da.blockwise(kernel, out_ind, a, (0, 1), b, b_ind, name=_task_name(kernel),
                         dtype=out.type.numpy_dtype, meta=_meta(out))]


def lower_dot(node, values, ctx) -> list:
    return (_rows_product(node, values, ctx)
            or _cast(node, da.dot(as_lazy(values[0]), as_lazy(values[1]))))


def lower_matmul(node, values, ctx) -> list:
    return (_rows_product(node, values, ctx)
            or _cast(node, da.matmul(as_lazy(values[0]), as_lazy(values[1]))))


def lower_tensordot(node, values, ctx) -> list:
    op = node.op
    return _cast(node, da.tensordot(as_lazy(values[0]), as_lazy(values[1]),
                                    axes=(list(op.a_axes), list(op.b_axes))))


def lower_outer(node, values, ctx) -> list:
    return _cast(node, da.outer(as_lazy(values[0]), as_lazy(values[1])))


def lower_gemm(node, values, ctx) -> list:
    z, alpha, x, y, beta = values
    return _cast(node, beta * as_lazy(z) + alpha * da.matmul(as_lazy(x), as_lazy(y)))


# ----------------------------------------------------------------------------
# shape ops and indexing: Dask's own


def lower_dimshuffle(node, values, ctx) -> list:
    op, x = node.op, as_lazy(values[0])
    op.check_shapes(node, [x.shape], None)   # a dropped axis has length 1, or ValueError
    x = x[tuple(0 if a in op.drop else slice(None) for a in range(x.ndim))]
    kept = [e for e in op.new_order if e != "x"]
    remaining = [a for a in range(op.input_ndim) if a not in op.drop]
    x = x.transpose([remaining.index(e) for e in kept])
    return [x[tuple(None if e == "x" else slice(None) for e in op.new_order)]]


def lower_reshape(node, values, ctx) -> list:
    """Dask's reshape; where it cannot keep the chunks along the axes it
    merges, those (then all) axes become one chunk first."""
    x = as_lazy(values[0])
    shape = reshaped(x.shape, tuple(int(n) for n in values[1]))
    for whole in (range(1, x.ndim), range(x.ndim)):
        try:
            return [x.reshape(shape, merge_chunks=True)]
        except NotImplementedError:
            x = x.rechunk({a: -1 for a in whole})
    return [x.reshape(shape)]


def reshaped(old: tuple[int, ...], new: tuple[int, ...]) -> tuple[int, ...]:
    """``new`` with its one -1 resolved, checked as NumPy checks a reshape."""
    unknown = [i for i, n in enumerate(new) if n == -1]
    if len(unknown) > 1 or any(n < -1 for n in new):
        raise ValueError(f"reshape: a new shape has at most one -1 and no other negative "
                         f"length, got {new}")
    size, known = math.prod(old), math.prod(n for n in new if n != -1)
    if unknown and known and size % known == 0:
        new = new[:unknown[0]] + (size // known,) + new[unknown[0] + 1:]
    if math.prod(new) != size or -1 in new:
        raise ValueError(f"reshape: cannot reshape an array of shape {old} (size {size}) "
                         f"into shape {new}")
    return new


def lower_by_perform(node, values, ctx) -> list:
    """For ops whose ``perform`` only reads shapes and passes its input on
    (``specify_shape``): it works on a Dask array as it is."""
    return _concrete(node, values)


def lower_subtensor(node, values, ctx) -> list:
    return [as_lazy(values[0])[node.op.index(values[1:])]]


def lower_advanced_subtensor(node, values, ctx) -> list:
    return [as_lazy(values[0])[index_tuple(node.op.pattern, values[1:])]]


def lower_inc_subtensor(node, values, ctx) -> list:
    """``x`` with its region ``x[index]`` set to or incremented by ``v``: Dask's
    index assignment on a new array object (``x``'s graph is not changed).
    A ``None`` of the index is a length-1 axis of the region, not of ``x``:
    ``v`` is broadcast to the region and those axes are dropped."""
    op = node.op
    x, v, *scalars = values
    x = as_lazy(x)
    index = op.index_op.index(scalars)
    region = x[index]
    op.check_value_shape(np.shape(v), region.shape)
    dtype = node.outputs[0].type.numpy_dtype
    if 0 in region.shape:
        # Nothing to write (Dask refuses to assign to an empty region a value
        # that is not of size 1): x itself, a new array object.
        return [x.astype(dtype, copy=True)]
    v = da.broadcast_to(as_lazy(v), region.shape)
    new_axes = _new_axes_of(index, x.ndim)
    if new_axes:
        v = v.squeeze(axis=new_axes)
    index = tuple(i for i in index if i is not None)
    value = v if op.set_instead_of_inc else x[index] + v
    out = x.copy()
    out[index] = value.astype(dtype, copy=False)
    return [out]


def _new_axes_of(index: tuple, ndim: int) -> tuple[int, ...]:
    """The axes of ``array[index]`` that the ``None`` entries of a basic index make."""
    found, position = [], 0
    named = sum(1 for i in index if i is not None and i is not Ellipsis)
    for entry in index:
        if entry is None:
            found.append(position)
            position += 1
        elif entry is Ellipsis:
            position += ndim - named
        elif isinstance(entry, slice):
            position += 1
    return tuple(found)


def lower_split(node, values, ctx) -> list:
    """Slices of ``x`` along the axis, as ``np.split`` cuts them."""
    op, x = node.op, as_lazy(values[0])
    length = x.shape[op.axis]
    if op.equal:
        if length % op.n_outputs:
            raise ValueError(f"split: an axis of length {length} (axis {op.axis} of an array "
                             f"of shape {x.shape}) cannot be split into {op.n_outputs} equal "
                             "sections")
        step = length // op.n_outputs
        bounds = [None] + [step * i for i in range(1, op.n_outputs)] + [None]
    else:
        bounds = [None] + [int(p) for p in values[1:]] + [None]
    lead = (slice(None),) * op.axis
    return [x[lead + (slice(a, b),)] for a, b in zip(bounds[:-1], bounds[1:])]


def lower_join(node, values, ctx) -> list:
    arrays = [as_lazy(v) for v in values]
    if node.op.axis is None:
        arrays, axis = [a.ravel() for a in arrays], 0
    else:
        axis = node.op.axis
    return _cast(node, da.concatenate(arrays, axis=axis))


def lower_stack(node, values, ctx) -> list:
    return _cast(node, da.stack([as_lazy(v) for v in values], axis=node.op.axis))


def lower_alloc(node, values, ctx) -> list:
    """A broadcast value, lazily and chunked: even made from concrete inputs
    (a gradient spreading a mean over the rows), it may be as big as the
    data, and a concrete one would travel inside the graph."""
    value = values[0]
    shape = tuple(int(n) for n in values[1:])
    dtype = node.outputs[0].type.numpy_dtype
    if is_lazy(value) or any(n != 1 for n in np.shape(value)):
        return [da.broadcast_to(as_lazy(value), shape).astype(dtype, copy=False)]
    chunks = normalize_chunks("auto", shape, dtype=dtype)
    return [da.broadcast_to(as_lazy(np.asarray(value, dtype=dtype)), shape, chunks=chunks)]


def lower_expand_to(node, values, ctx) -> list:
    """The value itself when it has the shape already, else broadcast lazily
    (Dask arrays are never written, so no copy is needed either way); the
    op's own shape check gives its errors."""
    value, dims = values[0], tuple(int(n) for n in values[1:])
    node.op.check_shapes(node, [tuple(np.shape(value))], [dims])
    if tuple(np.shape(value)) == dims:
        return [value]
    return [da.broadcast_to(as_lazy(value), dims)]


def lower_scan(node, values, ctx) -> list:
    """A loop's steps run one after the other: one task runs the whole loop
    (the inputs whole, as NumPy arrays; the step compiled on the worker with
    the loop's inner mode), and each output is one chunk of that task.  The
    length of a nit-sot output, or of any output of a ``until`` loop, is
    known once the task has run (Dask's unknown chunk size, NaN).  A
    loop's backward pass (checkpointed, or not expanded) runs the same way, and
    so does a lazy ``ifelse`` (its task runs the branch it takes; its
    outputs' lengths are known once it ran, where they are not static)."""
    if isinstance(node.op, Scan):
        shapes = _scan_shapes(node, values)
    elif node.op.shape_from_values:
        shapes = [tuple(math.nan if d is None else d for d in out.type.shape)
                  for out in node.outputs]
    else:
        shapes = _inferred_shapes(node, values)
    return _one_task(node, values, shapes)


def lower_ifelse(node, values, ctx) -> list:
    """``ifelse``'s graph form (compiled without ``lazy_ifelse``): one task
    copies the chosen values; an output's length is known where both
    branches have it."""
    n = node.op.n_outputs
    then, other = values[1:1 + n], values[1 + n:]
    shapes = [tuple(a if a == b else math.nan for a, b in zip(np.shape(x), np.shape(y)))
              for x, y in zip(then, other)]
    return _one_task(node, values, shapes)


def _one_task(node, values, shapes) -> list:
    """``node`` run by one task on its inputs whole (the lazy ones passed as
    their chunks), each output one chunk of it, of ``shapes``."""
    lazy = tuple(i for i, value in enumerate(values) if is_lazy(value))
    args = [_chunk_values(value) if i in lazy else value for i, value in enumerate(values)]
    task = dask.delayed(_run_scan, nout=len(node.outputs), pure=True)(
        node.op, [var.type for var in node.inputs], lazy, *args)
    return [da.from_delayed(task[k], shape=shape, dtype=out.type.numpy_dtype)
            for k, (out, shape) in enumerate(zip(node.outputs, shapes))]


def _chunk_values(array: da.Array) -> list:
    """A lazy input of a loop's task as its chunks' delayed values (nested
    lists, one level per axis), each the array's own key.  Passed whole, the
    array would be finalized into the task's graph under new keys: the tasks
    computing it (another loop's, say) would run twice, once for this task and
    once for their other readers -- and at the same time, in two threads."""
    return array.to_delayed(optimize_graph=False).tolist()


def _inferred_shapes(node, values) -> list[tuple]:
    """The outputs' shapes from the inputs' (the op's ``infer_shape``)."""
    dims = node.op.infer_shape(node, [tuple(np.shape(v)) for v in values])
    return [concrete_dims(shape) for shape in dims]


def _scan_shapes(node, values) -> list[tuple]:
    """Each output's shape as far as it is known before the loop runs (a
    nit-sot's per-step dims inferred through the step from the inputs'
    shapes; NaN where only running tells)."""
    op = node.op
    parts = op.parts
    n_steps, _, inits, _ = parts.outer(list(values))
    n = math.nan if op.as_while else int(n_steps)
    stacked = [(n + len(init) if initial else n,) + tuple(np.shape(init)[1:])
               for init, initial in zip(inits, op.keeps_initial)]
    for j, out in enumerate(node.outputs[parts.n_states:parts.n_states + parts.n_nitsot]):
        stacked.append((n,) + _nit_sot_step_dims(node, parts.n_states + j, out, values))
    finals = [tuple(np.shape(init)[1:]) for init in inits]
    every = op.checkpoint_every
    checkpoints = [(-(-int(n_steps) // every),) + tuple(np.shape(init)) for init in inits] \
        if every else []
    return stacked + finals + checkpoints


def _nit_sot_step_dims(node, k: int, out, values) -> tuple:
    static = out.type.shape[1:]
    if None not in static:
        return tuple(static)
    try:
        return step_output_shape(node, k, values)
    except Exception:  # noqa: BLE001 -- unknown until the loop has run
        return tuple(math.nan if d is None else d for d in static)


def _joined(chunks):
    """An array from its chunks (nested lists, one level per axis): the chunk
    itself when there is one (no copy)."""
    one = chunks
    while isinstance(one, list) and len(one) == 1:
        one = one[0]
    return one if not isinstance(one, list) else np.block(chunks)


def _run_scan(op, input_types, lazy: tuple, *values) -> tuple:
    """The loop run on concrete values (a task: the op travels, not the graph);
    the inputs at the positions ``lazy`` come as their chunks, joined here."""
    node = op.make_node(*[t() for t in input_types])
    storage = [[None] for _ in node.outputs]
    values = [_joined(value) if i in lazy else value for i, value in enumerate(values)]
    op.perform(node, values, storage)
    return tuple(cell[0] for cell in storage)


#: the lowering of each op class a lazy value may reach
LOWERINGS: dict[type, Callable] = {
    Elemwise: lower_elemwise,
    Reduce: lower_reduce,
    FusedReduce: lower_reduce,
    SumTo: lower_sum_to,
    Softmax: lower_along_axes,
    LogSoftmax: lower_along_axes,
    LogSumExp: lower_along_axes,
    CumSum: lower_along_axes,
    CumProd: lower_along_axes,
    Sort: lower_along_axes,
    ArgSort: lower_along_axes,
    ArgReduce: lower_along_axes,
    Var: lower_along_axes,
    Dot: lower_dot,
    MatMul: lower_matmul,
    TensorDot: lower_tensordot,
    Outer: lower_outer,
    Gemm: lower_gemm,
    DimShuffle: lower_dimshuffle,
    Reshape: lower_reshape,
    SpecifyShape: lower_by_perform,
    Subtensor: lower_subtensor,
    AdvancedSubtensor: lower_advanced_subtensor,
    Alloc: lower_alloc,
    ExpandTo: lower_expand_to,
    Join: lower_join,
    Split: lower_split,
    IncSubtensor: lower_inc_subtensor,
    Stack: lower_stack,
    Trace: lower_by_perform,   # np.trace of a dask array is Dask's
    Scan: lower_scan,
    CheckpointedScanGrad: lower_scan,
    LazyIfElse: lower_scan,
    IfElse: lower_ifelse,
    LoopGradient: lower_scan,
}


def _lowering(op):
    for cls in type(op).__mro__:
        if cls in LOWERINGS:
            return LOWERINGS[cls]
    return None


def unsupported(fgraph) -> list:
    """The nodes a lazy value reaches that no entry of :data:`LOWERINGS`
    lowers (an op's shape is concrete: ``x.shape`` of a lazy ``x`` is not
    lazy; so are 0-d arguments, see :mod:`.linker`)."""
    lazy = lazy_variables(fgraph)
    return [node for node in fgraph.toposort()
            if not isinstance(node.op, Shape) and any(v in lazy for v in node.inputs)
            and _lowering(node.op) is None]


class _ComputeRefused(Exception):
    pass


def _refuse_to_compute(*args, **kwargs):
    raise _ComputeRefused()


def _concrete(node, values) -> list:
    """Run ``node`` at once on concrete values (shapes, constants)."""
    storage = [[None] for _ in node.outputs]
    node.op.perform(node, values, storage)
    return [cell[0] for cell in storage]


def lower_node(node, env, ctx) -> None:
    """``node``'s outputs into ``env``: lowered to Dask where an input is lazy,
    computed at once where all are concrete."""
    values = [_value(var, env) for var in node.inputs]
    if isinstance(node.op, Shape) and is_lazy(values[0]):
        outs = [np.asarray(values[0].shape, dtype=np.int64)]
    elif any(is_lazy(v) for v in values) or isinstance(node.op, ALWAYS_LAZY):
        try:
            outs = _lowering(node.op)(node, values, ctx)
        except _ComputeRefused:
            raise LoweringError(
                f"dask linker: {node.op} needs the value of a lazy input to build its "
                f"Dask graph (an index or a length given as a dask array?); pass it "
                f"as a NumPy value") from None
    else:
        outs = _concrete(node, values)
    env.update(zip(node.outputs, outs))


def lower_graph(fgraph, input_values: list, ctx) -> list:
    """The values of ``fgraph``'s outputs (lazy where they depend on a lazy
    input) for ``input_values`` (Dask arrays, or concrete values)."""
    env = {var: value for var, value in zip(fgraph.inputs, input_values)}
    with dask.config.set(scheduler=_refuse_to_compute):
        for unit in ctx.lowering_order(fgraph):
            try:
                if isinstance(unit, Region):
                    lower_region(unit, env, ctx)
                else:
                    lower_node(unit, env, ctx)
            except Exception as exc:
                nodes = unit.nodes + unit.sinks if isinstance(unit, Region) else (unit,)
                for node in nodes:     # the one whose name the message leads with
                    user_message(exc, node)
                updates = "".join(dict.fromkeys(step_note(n) for n in nodes))
                exc.add_note(f"tenure: raised while lowering "
                             f"{', '.join(user_call(n) for n in nodes)} to Dask"
                             f"{''.join(compiled_detail(n) for n in nodes)}{updates}")
                raise
    return [_value(var, env) for var in fgraph.outputs]
