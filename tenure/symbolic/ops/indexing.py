"""Indexing: ``x[1, 2:n, None, ..., ::-1]`` (basic, a view) and ``x[idx]``,
``x[rows, cols]`` with integer arrays (advanced, a copy), plus ``take``.

The index's structure is static and lives in the op (so equal indexings
merge); symbolic integers and integer arrays in it (``x[i]``, ``x[:n]``,
``x[idx]``) are extra inputs of the node after ``x``.  Constant integers stay
in the op, which lets static lengths be computed and out-of-range constants be
reported when the graph is built.

* :class:`Subtensor` does basic indexing (ints, slices, ``None``, ``...``) and
  returns a view.
* :class:`AdvancedSubtensor` does NumPy's integer-array ("advanced") indexing,
  mixed with anything basic indexing allows, and returns a copy.  The index
  arrays (and the ints beside them) broadcast together; their broadcast shape
  replaces the indexed axes where those are adjacent, and goes first otherwise,
  exactly as in NumPy.  Boolean masks are not supported (use ``tn.where``).

Writing into a region (``set_subtensor``, ``inc_subtensor``) lives in
:mod:`tenure.symbolic.ops.subtensor_update`.
"""

from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass

import numpy as np

from tenure.symbolic.ops.axes import normalize_axis
from tenure.symbolic.graph import Apply, Op, Variable
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops.nonzero import Nonzero, outputs_of
from tenure.symbolic.ops.shape import (
    dim_add, dim_floordiv, dim_lt, dim_max, dim_min, dim_sub, dim_where, flatten,
    shape_tuple)
from tenure.symbolic.types import TensorType, _shape_str
from tenure.symbolic.variable import TensorConstant, as_tensor_variable, constant


@dataclass(frozen=True)
class In:
    """A scalar or array of the index that is the node's input number ``pos``
    (``x`` is 0)."""

    pos: int

    def __repr__(self) -> str:
        return f"${self.pos}"


# A scalar slot in the pattern is None (slice bounds only), a Python int, or In.
# Pattern entries, one per index item, with Ellipsis expanded into full slices:
#   ("int", slot)                  removes the axis
#   ("slice", start, stop, step)   keeps it
#   ("newaxis",)                   inserts a length-1 axis
# and in advanced patterns only:
#   ("array", In)                  an integer array (ndim >= 1) indexing one axis
#   ("ellipsis",)                  an Ellipsis that stands for no axis: it still
#                                  separates the array indices on either side


def _slot_str(slot) -> str:
    return "" if slot is None else repr(slot)


def _entry_str(entry) -> str:
    kind = entry[0]
    if kind == "int":
        return repr(entry[1])
    if kind == "array":
        return f"[{entry[1]!r}]"
    if kind == "newaxis":
        return "None"
    if kind == "ellipsis":
        return "..."
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


def _consumed(pattern) -> int:
    """The number of input axes a pattern indexes."""
    return sum(e[0] not in ("newaxis", "ellipsis") for e in pattern)


def _slots(pattern) -> dict[int, str]:
    """``{input position: "scalar" or "array"}`` for the pattern's inputs."""
    roles = {}
    for entry in pattern:
        for slot in entry[1:]:
            if isinstance(slot, In):
                roles[slot.pos] = "array" if entry[0] == "array" else "scalar"
    return roles


def index_tuple(pattern, values) -> tuple:
    """The NumPy index for ``pattern`` given the values of the node's index
    inputs (``values[k]`` is input ``k + 1``)."""
    def value(slot):
        if isinstance(slot, In):
            return int(values[slot.pos - 1])
        return slot

    index = []
    for entry in pattern:
        kind = entry[0]
        if kind == "int":
            index.append(value(entry[1]))
        elif kind == "slice":
            index.append(slice(value(entry[1]), value(entry[2]), value(entry[3])))
        elif kind == "array":
            index.append(values[entry[1].pos - 1])
        elif kind == "newaxis":
            index.append(None)
        else:
            index.append(Ellipsis)
    return tuple(index)


def _check_index_inputs(op, pattern, index) -> list:
    """The index inputs as variables, checked against the pattern's slots."""
    roles = _slots(pattern)
    if len(index) != len(roles):
        raise TypeError(f"{op}: expected {len(roles)} index input(s), got {len(index)}")
    index = [as_tensor_variable(i) for i in index]
    for pos, var in enumerate(index, start=1):
        kind = var.type.numpy_dtype.kind
        if roles[pos] == "scalar":
            if var.ndim != 0 or kind not in "iu":
                raise TypeError(f"{op}: input {pos} must be a 0-d integer tensor, got {var} "
                                f"({var.type})")
        elif kind == "b":
            raise _mask_error(var)
        elif var.ndim == 0 or kind not in "iu":
            raise TypeError(f"{op}: input {pos} must be an integer array of at least 1 "
                            f"dimension, got {var} ({var.type})")
    return index


# --------------------------------------------------------------------------
# Basic indexing


class Subtensor(Op):
    """Basic indexing of input 0 by the static ``pattern`` (see module notes).

    The result is a view of the input, as with NumPy.
    """

    __props__ = ("pattern",)
    view_map = {0: [0]}

    def __init__(self, pattern):
        self.pattern = tuple(tuple(e) for e in pattern)
        for entry in self.pattern:
            if entry[0] not in ("int", "slice", "newaxis"):
                raise ValueError(f"Subtensor: basic patterns hold ints, slices and new axes, "
                                 f"got {entry!r} (array indices: AdvancedSubtensor)")
        self.n_scalars = sum(isinstance(s, In) for e in self.pattern for s in e[1:])
        #: number of input axes the pattern consumes
        self.consumed = _consumed(self.pattern)

    def __str__(self) -> str:
        return f"Subtensor{{{', '.join(_entry_str(e) for e in self.pattern)}}}"

    def make_node(self, x, *scalars):
        x = as_tensor_variable(x)
        if x.ndim != self.consumed:
            raise TypeError(f"{self}: expected a {self.consumed}-d input, got {x} ({x.type})")
        if len(scalars) != self.n_scalars:
            raise TypeError(f"{self}: expected {self.n_scalars} scalar input(s), got "
                            f"{len(scalars)}")
        scalars = _check_index_inputs(self, self.pattern, scalars)
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

    def index(self, scalars) -> tuple:
        """The NumPy index tuple for the scalar input values ``scalars``."""
        # The pattern covers every axis; a trailing Ellipsis still matters: with
        # it, NumPy returns a 0-d view where `a[1, 2]` would give a scalar copy.
        return index_tuple(self.pattern, scalars) + (...,)

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        """Slices never fail; constant integers fail only out of range, which
        the shape tells (left to ``perform``'s IndexError: False); integers
        given as inputs may fail on their values."""
        if self.n_scalars:
            return False
        axes = [entry for entry in self.pattern if entry[0] != "newaxis"]
        for entry, length in zip(axes, input_shapes[0]):
            if entry[0] == "int" and not -length <= entry[1] < length:
                return False
        return True

    def perform(self, node, inputs, output_storage):
        x, *scalars = inputs
        output_storage[0][0] = x[self.index(scalars)]

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

    def grad(self, inputs, output_grads):
        from tenure.symbolic.ops.subtensor_update import IncSubtensor
        return _indexing_grad(IncSubtensor(self.pattern), inputs, output_grads)


def _indexing_grad(inc_op, inputs, output_grads) -> list:
    """The gradient of ``x[idx]``: ``gz`` added into zeros shaped like ``x`` at
    ``idx`` (where an index repeats, its gradients add up)."""
    from tenure.symbolic.grad import is_differentiable
    from tenure.symbolic.ops.creation import zeros_like
    x, *index = inputs
    (gz,) = output_grads
    if gz is None or not is_differentiable(x):
        return [None] * len(inputs)
    return [inc_op(zeros_like(x), gz, *index)] + [None] * len(index)


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
# Advanced (integer array) indexing


def _layout(pattern, x_dims, adv_dims, slice_len) -> list:
    """The result's dims in NumPy's order: ``adv_dims`` (the broadcast shape of
    the array and int indices) replaces the indexed axes where those are
    adjacent in the index, and comes first otherwise.  ``slice_len(entry,
    axis_dim)`` gives a slice's length.  Works for static, symbolic and concrete
    dims alike."""
    parts: list = []  # None for an advanced item, else the dims it contributes
    axis = 0
    for entry in pattern:
        kind = entry[0]
        if kind in ("int", "array"):
            parts.append(None)
            axis += 1
        elif kind == "slice":
            parts.append((slice_len(entry, x_dims[axis]),))
            axis += 1
        elif kind == "newaxis":
            parts.append((1,))
        else:
            parts.append(())  # an empty Ellipsis: no axis, but a separator
    adv = [i for i, p in enumerate(parts) if p is None]
    if adv[-1] - adv[0] + 1 == len(adv):
        head = [d for p in parts[:adv[0]] for d in p]
        tail = [d for p in parts[adv[-1] + 1:] for d in p]
        return head + list(adv_dims) + tail
    return list(adv_dims) + [d for p in parts if p is not None for d in p]


def advanced_region_shape(pattern, x_shape: tuple, values) -> tuple:
    """The shape of ``x[index]`` for an advanced pattern, from ``x``'s shape and
    the index input values, without indexing.  Raises what NumPy would."""
    arrays = [np.shape(values[e[1].pos - 1]) for e in pattern if e[0] == "array"]
    try:
        adv = np.broadcast_shapes(*arrays)
    except ValueError:
        raise IndexError("shape mismatch: indexing arrays could not be broadcast together "
                         f"with shapes {' '.join(str(s) for s in arrays)}") from None

    def slice_len(entry, n):
        bounds = [int(values[s.pos - 1]) if isinstance(s, In) else s for s in entry[1:]]
        return len(range(*slice(*bounds).indices(n)))

    return tuple(_layout(pattern, tuple(x_shape), adv, slice_len))


class AdvancedSubtensor(Op):
    """NumPy's advanced indexing of input 0 by the static ``pattern``, which
    holds at least one integer array (see module notes).  The result is a copy.

    Inputs after ``x``: the symbolic ints, slice bounds and index arrays, in the
    order of the pattern's ``In`` slots.
    """

    __props__ = ("pattern",)

    def __init__(self, pattern):
        self.pattern = tuple(tuple(e) for e in pattern)
        if not any(e[0] == "array" for e in self.pattern):
            raise ValueError(f"AdvancedSubtensor: the pattern {self.pattern} holds no array "
                             "index (use Subtensor)")
        self.consumed = _consumed(self.pattern)
        self._arrays = tuple(e[1].pos for e in self.pattern if e[0] == "array")

    def __str__(self) -> str:
        return f"AdvancedSubtensor{{{', '.join(_entry_str(e) for e in self.pattern)}}}"

    def make_node(self, x, *index):
        x = as_tensor_variable(x)
        if x.ndim != self.consumed:
            raise TypeError(f"{self}: expected a {self.consumed}-d input, got {x} ({x.type})")
        index = _check_index_inputs(self, self.pattern, index)
        axis = 0
        for entry in self.pattern:
            kind = entry[0]
            if kind in ("newaxis", "ellipsis"):
                continue
            length = x.type.shape[axis]
            if kind == "int" and isinstance(entry[1], int):
                _check_int_in_range(entry[1], length, axis, x)
            elif kind == "array":
                var = index[entry[1].pos - 1]
                if isinstance(var, TensorConstant) and length is not None and var.data.size:
                    bad = var.data[(var.data < -length) | (var.data >= length)]
                    if bad.size:
                        _check_int_in_range(int(bad.flat[0]), length, axis, x)
            elif kind == "slice" and entry[3] == 0:
                raise ValueError(f"{self}: slice step cannot be zero")
            axis += 1
        out_shape = _layout(self.pattern, x.type.shape, self._static_adv_shape(index),
                            _static_slice_length)
        return Apply(self, [x, *index], [TensorType(x.dtype, tuple(out_shape))()])

    def _static_adv_shape(self, index) -> tuple:
        shapes = [index[pos - 1].type.shape for pos in self._arrays]
        try:
            return ew.broadcast_static_shapes(shapes)
        except ValueError:
            raise IndexError(f"{self}: shape mismatch: the index arrays cannot be broadcast "
                             f"together (static shapes "
                             f"{', '.join(_shape_str(s) for s in shapes)})") from None

    def perform(self, node, inputs, output_storage):
        x, *values = inputs
        # NumPy's own errors (out of bounds: index, axis and length) are clear.
        output_storage[0][0] = x[index_tuple(self.pattern, values)]

    def infer_shape(self, node, input_shapes):
        index = node.inputs[1:]
        adv_dims = ew.broadcast_symbolic_shapes(
            self._static_adv_shape(index), [input_shapes[pos] for pos in self._arrays],
            [index[pos - 1].type.shape for pos in self._arrays])

        def slice_len(entry, n):
            static = _static_slice_length(entry, n if isinstance(n, int) else None)
            if static is not None:
                return static
            bounds = [ew.cast(node.inputs[s.pos], "int64") if isinstance(s, In) else s
                      for s in entry[1:]]
            return slice_length(n, *bounds)

        return [tuple(_layout(self.pattern, input_shapes[0], adv_dims, slice_len))]

    def grad(self, inputs, output_grads):
        from tenure.symbolic.ops.subtensor_update import AdvancedIncSubtensor
        return _indexing_grad(AdvancedIncSubtensor(self.pattern), inputs, output_grads)


# --------------------------------------------------------------------------
# Building the pattern from a Python index


def _describe(item) -> str:
    if isinstance(item, Variable):
        return f"a {item.ndim}-d {item.dtype} tensor ({item})"
    if isinstance(item, np.ndarray):
        return f"an array of {item.dtype} with shape {item.shape}"
    return f"{type(item).__name__} {item!r}"


def _mask_error(item) -> TypeError:
    return TypeError(f"boolean indices are not supported here: x[mask] takes a mask of one "
                     f"axis or more; otherwise use tn.where (got {_describe(item)})")


def _scalar_slot(item, inputs: list, what: str):
    """A scalar index item as a slot: an int (constants fold), or In for a variable
    (which is appended to ``inputs``).  ``what`` names the item in errors."""
    if isinstance(item, Variable):
        var = as_tensor_variable(item)
        if var.ndim != 0 or var.type.numpy_dtype.kind not in "iu":
            raise TypeError(f"{what} must be ints or 0-d integer tensors, got {var} "
                            f"({var.type})")
        if isinstance(var, TensorConstant):
            return int(var.data)
        inputs.append(var)
        return In(len(inputs))
    try:
        return operator.index(item)
    except TypeError:
        raise TypeError(f"{what} must be ints or 0-d integer tensors, got "
                        f"{type(item).__name__} {item!r}") from None


def _has_variable(items) -> bool:
    return any(_has_variable(i) if isinstance(i, (list, tuple)) else isinstance(i, Variable)
               for i in items)


def _array_entry(item, inputs: list):
    """The entry for a list, tuple or ndarray index item."""
    if isinstance(item, (list, tuple)) and _has_variable(item):
        return _variable_entry(as_tensor_variable(list(item)), inputs)
    try:
        arr = np.asarray(item)
    except ValueError:
        raise TypeError(f"invalid index {_describe(item)}: an array index must be a "
                        "rectangular array of integers") from None
    if arr.dtype == bool:
        raise _mask_error(item)
    if arr.size == 0 and arr.dtype.kind == "f" and not isinstance(item, np.ndarray):
        arr = arr.astype(np.int64)  # NumPy reads an empty list as an integer index
    if arr.dtype.kind not in "iu":
        raise TypeError(f"array indices must be integers, got {_describe(item)}")
    if arr.ndim == 0:
        return ("int", int(arr))
    inputs.append(constant(arr))
    return ("array", In(len(inputs)))


def _variable_entry(var, inputs: list):
    var = as_tensor_variable(var)
    # A bool of any ndim (even 0-d) is a boolean mask in NumPy, not an int.
    if var.dtype == "bool":
        raise _mask_error(var)
    if var.ndim == 0:
        return ("int", _scalar_slot(var, inputs, "indices"))
    if var.type.numpy_dtype.kind not in "iu":
        raise TypeError(f"array indices must be integer tensors, got {var} ({var.type})")
    inputs.append(var)
    return ("array", In(len(inputs)))


def _item_entry(item, inputs: list):
    """The pattern entry for one index item (not Ellipsis)."""
    if item is None:
        return ("newaxis",)
    if isinstance(item, slice):
        return ("slice",) + tuple(
            None if bound is None else _scalar_slot(bound, inputs, "slice bounds")
            for bound in (item.start, item.stop, item.step))
    if isinstance(item, Variable):
        return _variable_entry(item, inputs)
    if isinstance(item, (bool, np.bool_)):
        raise _mask_error(item)
    if isinstance(item, (numbers.Integral, np.integer)):
        return ("int", operator.index(item))
    if isinstance(item, (list, tuple, np.ndarray)):
        return _array_entry(item, inputs)
    raise TypeError(f"invalid index {type(item).__name__} {item!r}: indices must be ints or "
                    "0-d integer tensors, integer arrays (lists, ndarrays or tensors), slices, "
                    "None or ... (floats are not indices)")


def getitem(x, index):
    """NumPy's ``x[index]``.

    ``index`` holds ints and 0-d integer tensors, slices (bounds: None, ints or
    0-d integer tensors), ``None`` (a new axis), at most one ``...``, and
    integer arrays: lists, ndarrays or integer tensors of any ndim, with
    negative indices counting from the end.  Without arrays the result is a
    view of ``x`` (:class:`Subtensor`); with them it is a copy
    (:class:`AdvancedSubtensor`).  A boolean mask of ``k >= 1`` axes indexes
    the ``k`` axes it covers as NumPy's ``x[mask.nonzero()]`` does
    (:mod:`.nonzero`: the result's length along them is known only when it
    runs; a mask whose shape differs from those axes raises NumPy's
    ``IndexError``).  A 0-d mask (``x[True]``) is not supported.
    """
    x = as_tensor_variable(x)
    items = index if isinstance(index, tuple) else (index,)
    if sum(item is Ellipsis for item in items) > 1:
        raise IndexError(f"an index can only have a single ellipsis ('...'); got {index!r}")
    items = _masks_as_indices(x, items)
    inputs: list[Variable] = []
    entries = [None if item is Ellipsis else _item_entry(item, inputs) for item in items]
    consumed = sum(e is not None and e[0] != "newaxis" for e in entries)
    if consumed > x.ndim:
        raise IndexError(f"too many indices for {x}: it is {x.ndim}-dimensional ({x.type}), "
                         f"but {consumed} were indexed")
    advanced = any(e is not None and e[0] == "array" for e in entries)
    # Expand the Ellipsis (or an implicit one at the end) into full slices so
    # the pattern names every axis.
    fill = [("slice", None, None, None)] * (x.ndim - consumed)
    if None in entries:
        at = entries.index(None)
        if advanced and not fill and _advanced_on_both_sides(entries, at):
            # NumPy: even an Ellipsis standing for no axis keeps the array
            # indices on either side apart (their result axes go first).
            fill = [("ellipsis",)]
        entries[at:at + 1] = fill
    else:
        entries.extend(fill)
    if advanced:
        return AdvancedSubtensor(entries)(x, *inputs)
    return Subtensor(entries)(x, *inputs)


def _mask_of(item):
    """``item`` as a boolean mask variable of one axis or more, or None when
    it is not a mask (a 0-d one stays for ``_item_entry`` to refuse)."""
    if isinstance(item, Variable):
        var = as_tensor_variable(item)
        return var if var.dtype == "bool" and var.ndim > 0 else None
    if isinstance(item, (list, tuple, np.ndarray)) and not isinstance(item, (str, bytes)):
        try:
            arr = np.asarray(item)
        except ValueError:
            return None
        return constant(arr) if arr.dtype == bool and arr.ndim > 0 else None
    return None


def _axes_taken(item) -> int:
    """How many of ``x``'s axes an (expanded) index item indexes."""
    if item is None or item is Ellipsis:
        return 0
    mask = _mask_of(item)
    return mask.ndim if mask is not None else 1


def _masks_as_indices(x, items: tuple) -> tuple:
    """``items`` with each boolean mask replaced by its nonzero indices (one
    integer vector per axis it covers), checked against those axes' lengths."""
    if not any(_mask_of(item) is not None for item in items):
        return items
    dims = shape_tuple(x)
    taken = [_axes_taken(item) for item in items]
    ellipsis = next((j for j, item in enumerate(items) if item is Ellipsis), None)
    result = []
    for j, item in enumerate(items):
        mask = _mask_of(item)
        if mask is None:
            result.append(item)
            continue
        start = (x.ndim - sum(taken[j:]) if ellipsis is not None and ellipsis < j
                 else sum(taken[:j]))
        if start < 0 or start + mask.ndim > x.ndim:
            raise IndexError(f"too many indices for {x}: it is {x.ndim}-dimensional "
                             f"({x.type}), but the index covers {sum(taken)} axes")
        lengths = [constant(np.int64(d)) if isinstance(d, int) else d
                   for d in dims[start:start + mask.ndim]]
        result.extend(outputs_of(Nonzero(start)(mask, *lengths)))
    return tuple(result)


def _advanced_on_both_sides(entries, at: int) -> bool:
    def adv(part):
        return any(e[0] in ("int", "array") for e in part)
    return adv(entries[:at]) and adv(entries[at + 1:])


def take(x, indices, axis=None, mode="raise"):
    """NumPy's ``take``: the elements of ``x`` at ``indices`` along ``axis``.

    With ``axis=None`` ``x`` is flattened first.  ``indices`` is an int, a list
    or array of ints, or an integer tensor; the result has ``x``'s axes with
    ``axis`` replaced by ``indices``' axes.  ``mode``: ``"raise"`` (an index
    out of range is an ``IndexError``; negative indices count from the end),
    ``"wrap"`` or ``"clip"``, as in NumPy.
    """
    x = as_tensor_variable(x)
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"take: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
    if axis is None:
        if x.ndim != 1:
            x = flatten(x)
        axis = 0
    else:
        axis = normalize_axis(axis, x.ndim, "take")
    if isinstance(indices, (bool, np.bool_)) or (
            isinstance(indices, (np.ndarray, Variable)) and indices.dtype == "bool"):
        raise _mask_error(indices)
    if mode != "raise":
        indices = _fold_indices(indices, shape_tuple(x)[axis], mode)
    return getitem(x, (slice(None),) * axis + (indices,))


def _fold_indices(indices, n, mode: str):
    """``indices`` brought into ``[0, n)`` by wrapping or clipping."""
    if not isinstance(indices, Variable) and not (
            isinstance(indices, (list, tuple)) and _has_variable(indices)):
        arr = np.asarray(indices)
        if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
            raise TypeError(f"take: indices must be integers, got {_describe(indices)}")
        arr = arr.astype(np.int64)
        if isinstance(n, int):
            if n == 0 and arr.size:
                raise IndexError("take: cannot take from an empty axis")
            return np.mod(arr, n) if mode == "wrap" else np.clip(arr, 0, n - 1)
        indices = constant(arr)
    idx = as_tensor_variable(indices)
    if idx.type.numpy_dtype.kind not in "iu":
        raise TypeError(f"take: indices must be integers, got {_describe(idx)}")
    idx = ew.cast(idx, "int64")
    if mode == "wrap":
        return ew.mod(idx, n)
    return ew.clip(idx, 0, dim_sub(n, 1))
