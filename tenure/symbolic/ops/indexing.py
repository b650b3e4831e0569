"""Basic indexing: ``x[1, 2:n, None, ..., ::-1]`` as a :class:`Subtensor` view.

The index's structure is static and lives in the op (so equal indexings
merge); symbolic integers in it (``x[i]``, ``x[:n]``) are extra inputs of the
node after ``x``.  Constant integers stay in the op, which lets static lengths
be computed and out-of-range constants be reported when the graph is built.

Only basic indexing is supported for now: integer and boolean *array* indices
(advanced indexing) come later.
"""

from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass

import numpy as np

from tenure.symbolic.graph import Apply, Op, Variable
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops.shape import (
    dim_add, dim_floordiv, dim_lt, dim_max, dim_min, dim_sub, dim_where)
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import TensorConstant, as_tensor_variable


@dataclass(frozen=True)
class In:
    """A scalar of the index that is the node's input number ``pos`` (``x`` is 0)."""

    pos: int

    def __repr__(self) -> str:
        return f"${self.pos}"


# A scalar slot in the pattern is None (slice bounds only), a Python int, or In.
# Pattern entries, one per index item, with Ellipsis already expanded:
#   ("int", slot)                  removes the axis
#   ("slice", start, stop, step)   keeps it
#   ("newaxis",)                   inserts a length-1 axis


def _slot_str(slot) -> str:
    return "" if slot is None else repr(slot)


def _entry_str(entry) -> str:
    kind = entry[0]
    if kind == "int":
        return repr(entry[1])
    if kind == "newaxis":
        return "None"
    start, stop, step = (_slot_str(s) for s in entry[1:])
    return f"{start}:{stop}" + (f":{step}" if step else "")


def _check_int_in_range(index: int, length, axis: int, x) -> None:
    if length is not None and not -length <= index < length:
        raise IndexError(f"index {index} is out of bounds for axis {axis} of {x} ({x.type}), "
                         f"which has length {length}")


def _static_slice_length(entry, length):
    """The static length of a slice over an axis of static ``length`` (or None)."""
    _, start, stop, step = entry
    if length is None or any(isinstance(s, In) for s in (start, stop, step)):
        return None
    return len(range(*slice(start, stop, step).indices(length)))


class Subtensor(Op):
    """Basic indexing of input 0 by the static ``pattern`` (see module notes).

    The result is a view of the input, as with NumPy.
    """

    __props__ = ("pattern",)
    view_map = {0: [0]}

    def __init__(self, pattern):
        self.pattern = tuple(tuple(e) for e in pattern)
        self.n_scalars = sum(isinstance(s, In) for e in self.pattern for s in e[1:])
        #: number of input axes the pattern consumes
        self.consumed = sum(e[0] != "newaxis" for e in self.pattern)

    def __str__(self) -> str:
        return f"Subtensor{{{', '.join(_entry_str(e) for e in self.pattern)}}}"

    def make_node(self, x, *scalars):
        x = as_tensor_variable(x)
        if x.ndim != self.consumed:
            raise TypeError(f"{self}: expected a {self.consumed}-d input, got {x} ({x.type})")
        if len(scalars) != self.n_scalars:
            raise TypeError(f"{self}: expected {self.n_scalars} scalar input(s), got "
                            f"{len(scalars)}")
        scalars = [as_tensor_variable(s) for s in scalars]
        for i, s in enumerate(scalars, start=1):
            if s.ndim != 0 or s.type.numpy_dtype.kind not in "iu":
                raise TypeError(f"{self}: input {i} must be a 0-d integer tensor, got {s} "
                                f"({s.type})")
        out_shape = []
        axis = 0
        for entry in self.pattern:
            kind = entry[0]
            if kind == "newaxis":
                out_shape.append(1)
                continue
            length = x.type.shape[axis]
            if kind == "int":
                if isinstance(entry[1], int):
                    _check_int_in_range(entry[1], length, axis, x)
            else:
                if entry[3] == 0:
                    raise ValueError(f"{self}: slice step cannot be zero")
                out_shape.append(_static_slice_length(entry, length))
            axis += 1
        return Apply(self, [x, *scalars], [TensorType(x.dtype, tuple(out_shape))()])

    def _index(self, scalars) -> tuple:
        """The NumPy index tuple for the scalar input values ``scalars``."""
        def value(slot):
            if isinstance(slot, In):
                return int(scalars[slot.pos - 1])
            return slot

        index = []
        for entry in self.pattern:
            kind = entry[0]
            if kind == "int":
                index.append(value(entry[1]))
            elif kind == "slice":
                index.append(slice(value(entry[1]), value(entry[2]), value(entry[3])))
            else:
                index.append(None)
        # The pattern covers every axis; a trailing Ellipsis still matters: with
        # it, NumPy returns a 0-d view where `a[1, 2]` would give a scalar copy.
        index.append(...)
        return tuple(index)

    def perform(self, node, inputs, output_storage):
        x, *scalars = inputs
        output_storage[0][0] = x[self._index(scalars)]

    def infer_shape(self, node, input_shapes):
        static_out = node.outputs[0].type.shape
        x_dims = input_shapes[0]

        def dim(slot):
            if isinstance(slot, In):
                return ew.cast(node.inputs[slot.pos], "int64")
            return slot

        dims = []
        axis = 0
        for entry in self.pattern:
            kind = entry[0]
            if kind == "newaxis":
                dims.append(1)
                continue
            if kind == "slice":
                k = len(dims)
                if static_out[k] is not None:
                    dims.append(static_out[k])
                else:
                    dims.append(slice_length(x_dims[axis], *(dim(s) for s in entry[1:])))
            axis += 1
        return [tuple(dims)]


def slice_length(n, start, stop, step):
    """The symbolic ``len(range(*slice(start, stop, step).indices(n)))``.

    Each argument is a dim (an int or a 0-d int64 variable); ``start``,
    ``stop`` and ``step`` may also be None.  Whatever is known now is decided
    now, so the graph only holds the branches that depend on run-time values.
    """
    if step is None:
        step = 1
    if isinstance(step, int):
        return _directed_slice_length(n, start, stop, step, step > 0)
    # The step's sign is only known at run time: build both and choose.  The
    # steps are clamped away from zero so neither branch divides by zero (a zero
    # step is an error anyway, raised by the indexing itself).
    forward = _directed_slice_length(n, start, stop, dim_max(step, 1), True)
    backward = _directed_slice_length(n, start, stop, dim_min(step, -1), False)
    return dim_where(dim_lt(0, step), forward, backward)


def _directed_slice_length(n, start, stop, step, forward: bool):
    # Python's slice.indices: a negative bound counts from the end; then bounds
    # are clamped to [0, n] going forward and to [-1, n - 1] going backward.
    low, high = (0, n) if forward else (-1, dim_sub(n, 1))

    def clamp(bound, default):
        if bound is None:
            return default
        from_end = dim_max(dim_add(bound, n), low)
        from_start = dim_min(bound, high)
        return dim_where(dim_lt(bound, 0), from_end, from_start)

    if forward:
        first, last = clamp(start, 0), clamp(stop, n)
        span, stride = dim_sub(last, first), step
    else:
        first, last = clamp(start, dim_sub(n, 1)), clamp(stop, -1)
        span, stride = dim_sub(first, last), dim_sub(0, step)
    # ceil(span / stride), and never negative.
    return dim_max(dim_floordiv(dim_add(span, dim_sub(stride, 1)), stride), 0)


# --------------------------------------------------------------------------
# Building the pattern from a Python index


def _advanced_error(item) -> TypeError:
    if isinstance(item, Variable):
        what = f"a {item.ndim}-d {item.dtype} tensor ({item})"
    elif isinstance(item, np.ndarray):
        what = f"an array of {item.dtype} with shape {item.shape}"
    else:
        what = f"{type(item).__name__} {item!r}"
    return TypeError(f"advanced indexing is not supported yet (integer and boolean array "
                     f"indices arrive later); got {what}. Basic indices are ints, 0-d integer "
                     "tensors, slices, None and ...")


def _scalar_slot(item, scalars: list, what: str):
    """A scalar index item as a slot: an int (constants fold), or In for a variable
    (which is appended to ``scalars``).  ``what`` names the item in errors."""
    if isinstance(item, Variable):
        var = as_tensor_variable(item)
        if var.ndim != 0 or var.type.numpy_dtype.kind not in "iu":
            raise TypeError(f"{what} must be ints or 0-d integer tensors, got {var} "
                            f"({var.type})")
        if isinstance(var, TensorConstant):
            return int(var.data)
        scalars.append(var)
        return In(len(scalars))
    try:
        return operator.index(item)
    except TypeError:
        raise TypeError(f"{what} must be ints or 0-d integer tensors, got "
                        f"{type(item).__name__} {item!r}") from None


def _item_entry(item, scalars: list):
    """The pattern entry for one index item (not Ellipsis)."""
    if item is None:
        return ("newaxis",)
    if isinstance(item, slice):
        return ("slice",) + tuple(
            None if bound is None else _scalar_slot(bound, scalars, "slice bounds")
            for bound in (item.start, item.stop, item.step))
    if isinstance(item, Variable):
        var = as_tensor_variable(item)
        # A 0-d bool is a (boolean) array index in NumPy, not an int.
        if var.ndim != 0 or var.dtype == "bool":
            raise _advanced_error(var)
        return ("int", _scalar_slot(var, scalars, "indices"))
    if isinstance(item, (bool, np.bool_, list, tuple, np.ndarray)):
        raise _advanced_error(item)
    if isinstance(item, (numbers.Integral, np.integer)):
        return ("int", operator.index(item))
    raise TypeError(f"invalid index {type(item).__name__} {item!r}: indices must be ints or "
                    "0-d integer tensors, slices, None or ... (floats are not indices)")


def getitem(x, index):
    """Basic indexing, as NumPy's ``x[index]`` (a view of ``x``).

    ``index`` holds ints and 0-d integer tensors, slices (bounds: None, ints or
    0-d integer tensors), ``None`` (a new axis) and at most one ``...``.
    """
    x = as_tensor_variable(x)
    items = index if isinstance(index, tuple) else (index,)
    if sum(item is Ellipsis for item in items) > 1:
        raise IndexError(f"an index can only have a single ellipsis ('...'); got {index!r}")
    scalars: list[Variable] = []
    entries = [None if item is Ellipsis else _item_entry(item, scalars) for item in items]
    consumed = sum(e is not None and e[0] != "newaxis" for e in entries)
    if consumed > x.ndim:
        raise IndexError(f"too many indices for {x}: it is {x.ndim}-dimensional ({x.type}), "
                         f"but {consumed} were indexed")
    # Expand the Ellipsis (or an implicit one at the end) into full slices so
    # the pattern names every axis.
    fill = [("slice", None, None, None)] * (x.ndim - consumed)
    if None in entries:
        at = entries.index(None)
        entries[at:at + 1] = fill
    else:
        entries.extend(fill)
    return Subtensor(entries)(x, *scalars)
