"""Shape lifting: a shape computed from the ops' ``infer_shape`` instead of from
the tensor itself, so that asking for ``exp(x).shape[0]`` does not compute
``exp(x)``.  Part of the canonicalize phase.
"""

from __future__ import annotations

import numpy as np

from tenure.rewrites.canonicalize import _fully_static, same_dtype
from tenure.rewrites.engine import register_node_rewrite
from tenure.symbolic.fgraph import OUTPUT
from tenure.symbolic.graph import Apply, Variable, ancestors
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops.indexing import Subtensor
from tenure.symbolic.ops.shape import MakeVector, Shape, infer_dims
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import TensorConstant


def _lifted_dims(x: Variable) -> tuple | None:
    """``x``'s shape as dims (ints and 0-d int64 variables) computed from the
    shapes of its ancestors through the ops' ``infer_shape``, or ``None``.

    Like :func:`tenure.symbolic.ops.shape.shape_tuple`, but with a memo that
    lives for this call only: rewriting changes what a node reads, so dims
    remembered from before could bring back a subgraph that was rewritten
    away.
    """
    try:
        return infer_dims(x, {})
    except Exception:  # noqa: BLE001 - an infer_shape that cannot say: do not lift
        return None


def _dim_variable(dim) -> Variable | None:
    """A dim as a 0-d int64 variable (ints become constants)."""
    if isinstance(dim, int):
        return TensorConstant(TensorType("int64", ()), np.array(dim, dtype=np.int64))
    if not isinstance(dim, Variable) or dim.ndim != 0:
        return None
    return dim if dim.dtype == "int64" else ew.cast(dim, "int64")


def _needs(dims: list[Variable], x: Variable) -> bool:
    """Whether computing ``dims`` needs ``x``'s node to run."""
    return any(v is x or (x.owner is not None and v.owner is x.owner)
               for v in ancestors(dims))


@register_node_rewrite("canonicalize", tags=("shape",))
def shape_lift(fgraph, node):
    """``shape(x)`` becomes a vector built without ``x``.

    When ``x``'s static shape is fully known: that constant.  Otherwise, when
    ``x`` is computed by an op with ``infer_shape``, the dims derived from
    the shapes of its inputs (recursively, as ``shape_tuple`` does), so that
    ``x`` itself need not be computed when only its shape is used.  Exact:
    ``infer_shape`` states the shape the op produces.  (One difference: an op
    that would fail at run time, e.g. on mismatched lengths, no longer runs
    when only its shape was needed.)  Does not fire when the dims would still
    need ``x``, nor when the vector is only read as ``shape(x)[i]`` (that is
    :func:`shape_index_lift`'s, which builds only the dims that are read).
    """
    if not isinstance(node.op, Shape):
        return None
    x = node.inputs[0]
    if _fully_static(x.type.shape):
        return TensorConstant(TensorType("int64", (x.ndim,)),
                              np.array(x.type.shape, dtype=np.int64).reshape(x.ndim))
    if x.owner is None:
        return None
    clients = fgraph.clients.get(node.outputs[0], [])
    if clients and all(c != OUTPUT and _int_index(c) is not None for c, _ in clients):
        return None  # only read as shape(x)[i]: shape_index_lift builds just those dims
    dims = _lifted_dims(x)
    if dims is None:
        return None
    items = [_dim_variable(d) for d in dims]
    if any(v is None for v in items) or _needs(items, x):
        return None
    return MakeVector("int64")(*items)


def _int_index(node: Apply) -> int | None:
    """``k`` when ``node`` is ``v[k]`` for a 1-d ``v`` and a constant int ``k``."""
    if not isinstance(node.op, Subtensor) or len(node.inputs) != 1:
        return None
    pattern = node.op.pattern
    if len(pattern) != 1 or pattern[0][0] != "int" or not isinstance(pattern[0][1], int):
        return None
    n = node.inputs[0].type.shape[0]
    k = pattern[0][1]
    if n is None:
        return k if k >= 0 else None
    return k % n if -n <= k < n else None


@register_node_rewrite("canonicalize", tags=("shape",))
def shape_index_lift(fgraph, node):
    """``shape(x)[i]`` (a constant ``i``) becomes the ``i``-th dim of ``x``
    derived without ``x`` (see :func:`shape_lift`); a static length becomes a
    constant.  Fires even when other dims of ``x`` would need ``x``."""
    k = _int_index(node)
    if k is None:
        return None
    vec = node.inputs[0]
    if vec.owner is None or not isinstance(vec.owner.op, Shape):
        return None
    x = vec.owner.inputs[0]
    if k >= x.ndim:
        return None
    if x.type.shape[k] is not None:
        return _dim_variable(x.type.shape[k])
    if x.owner is None:
        return None
    dims = _lifted_dims(x)
    if dims is None:
        return None
    dim = _dim_variable(dims[k])
    if dim is None or _needs([dim], x):
        return None
    return dim


@register_node_rewrite("canonicalize", tags=("shape",))
def make_vector_index(fgraph, node):
    """``make_vector(a, b, ...)[i]`` (a constant ``i``) becomes the ``i``-th item
    (cast to the vector's dtype, as ``make_vector`` does)."""
    k = _int_index(node)
    if k is None:
        return None
    vec = node.inputs[0]
    if vec.owner is None or not isinstance(vec.owner.op, MakeVector):
        return None
    if k >= len(vec.owner.inputs):
        return None
    item = vec.owner.inputs[k]
    out = node.outputs[0]
    if isinstance(item, TensorConstant) and item.weak:
        return TensorConstant(out.type, np.array(item.data, dtype=out.type.numpy_dtype))
    new = ew.cast(item, out.dtype)
    return new if same_dtype(out, new) and new.ndim == 0 else None


@register_node_rewrite("canonicalize", tags=("shape",))
def make_vector_of_shape(fgraph, node):
    """``make_vector(shape(y)[0], ..., shape(y)[n-1])`` (int64, ``n = y.ndim``)
    becomes ``shape(y)``: one node instead of ``n + 1``."""
    if not isinstance(node.op, MakeVector) or node.op.dtype != "int64" or not node.inputs:
        return None
    y = None
    for i, item in enumerate(node.inputs):
        if item.owner is None or _int_index(item.owner) != i:
            return None
        vec = item.owner.inputs[0]
        if vec.owner is None or not isinstance(vec.owner.op, Shape):
            return None
        if y is None:
            y = vec.owner.inputs[0]
        elif vec.owner.inputs[0] is not y:
            return None
    if y.ndim != len(node.inputs):
        return None
    return Shape()(y)
