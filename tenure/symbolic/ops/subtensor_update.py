"""Writing into a region: ``set_subtensor(x[idx], v)`` and ``inc_subtensor(x[idx], v)``.

Both return a *new* variable: ``x`` with the region ``x[idx]`` replaced by
(or incremented by) ``v``, which broadcasts to the region's shape as in NumPy.
``idx`` is any index that :func:`~tenure.symbolic.ops.indexing.getitem`
accepts: basic indices give :class:`IncSubtensor`, integer arrays
:class:`AdvancedIncSubtensor`.  Where an integer array repeats an index,
``inc`` adds every contribution (like ``np.add.at``) and ``set`` keeps the last
write (like NumPy assignment).

By default the op copies ``x`` and writes into the copy.  With ``inplace=True``
it writes into ``x``'s own buffer and declares ``destroy_map = {0: [0]}``; the
in-place rewrites are the ones that switch it on, once the DestroyHandler has
checked that nothing else still needs ``x``.
"""

from __future__ import annotations

import numbers

import numpy as np

from tenure.symbolic.graph import Apply, Op, Variable
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops.indexing import (
    AdvancedSubtensor, Subtensor, _entry_str, advanced_region_shape, index_tuple)
from tenure.symbolic.types import _shape_str
from tenure.symbolic.variable import TensorConstant, as_tensor_variable, constant


def _fn_name(set_instead_of_inc: bool) -> str:
    return "set_subtensor" if set_instead_of_inc else "inc_subtensor"


def _check_value_dtype(v, x, fn: str) -> None:
    """``v`` must convert to ``x``'s dtype without changing kind (NumPy's
    ``same_kind`` rule for ``x[idx] += v``); Python numbers are weakly typed."""
    target = x.type.numpy_dtype
    if isinstance(v, TensorConstant) and v.weak:
        value = v.weak_value
        if isinstance(value, (bool, np.bool_)):
            ok = True
        elif isinstance(value, numbers.Integral):
            ok = target.kind in "iufc"
            if target.kind in "iu":
                info = np.iinfo(target)
                if not info.min <= value <= info.max:
                    raise ValueError(f"{fn}: the value {value} does not fit in {x.dtype}, the "
                                     f"dtype of {x}")
        elif isinstance(value, numbers.Real):
            ok = target.kind in "fc"
        else:
            ok = target.kind == "c"
        got = f"Python {type(value).__name__} {value!r}"
    else:
        ok = np.can_cast(v.type.numpy_dtype, target, "same_kind")
        got = f"{v} ({v.type})"
    if not ok:
        raise TypeError(f"{fn}: the value must be convertible to {x.dtype} (the dtype of {x}) "
                        f"without changing kind, got {got}; cast it first")


def _check_value_shape(v_shape, region_shape, fn: str, static: bool) -> None:
    """``v`` must broadcast to the region (right-aligned; None: unknown)."""
    fits = len(v_shape) <= len(region_shape) and all(
        a is None or b is None or a == 1 or a == b
        for a, b in zip(reversed(v_shape), reversed(region_shape)))
    if not fits:
        show = _shape_str if static else str
        raise ValueError(f"{fn}: a value of shape {show(tuple(v_shape))} cannot be broadcast to "
                         f"the indexed region of shape {show(tuple(region_shape))}")


class _IncSubtensorBase(Op):
    """What the basic and advanced region updates share."""

    __props__ = ("pattern", "set_instead_of_inc", "inplace")
    _index_op_class: type = Op

    def __init__(self, pattern, set_instead_of_inc: bool = False, inplace: bool = False):
        #: the Subtensor / AdvancedSubtensor that reads the region
        self.index_op = self._index_op_class(pattern)
        self.pattern = self.index_op.pattern
        self.set_instead_of_inc = bool(set_instead_of_inc)
        self.inplace = bool(inplace)
        self.destroy_map = {0: [0]} if self.inplace else {}
        self.fn_name = _fn_name(self.set_instead_of_inc)

    def __str__(self) -> str:
        verb = "Set" if self.set_instead_of_inc else "Inc"
        kind = "Advanced" if isinstance(self.index_op, AdvancedSubtensor) else ""
        suffix = "_inplace" if self.inplace else ""
        return f"{kind}{verb}Subtensor{suffix}{{{', '.join(_entry_str(e) for e in self.pattern)}}}"

    def make_node(self, x, v, *index):
        x = as_tensor_variable(x)
        v = as_tensor_variable(v)
        # Reading the region checks the index against x and gives its static shape.
        region = self.index_op.make_node(x, *index).outputs[0]
        _check_value_dtype(v, x, self.fn_name)
        _check_value_shape(v.type.shape, region.type.shape, self.fn_name, static=True)
        return Apply(self, [x, v, *region.owner.inputs[1:]], [x.type()])

    def infer_shape(self, node, input_shapes):
        return [input_shapes[0]]

    # -- perform helpers --------------------------------------------------------
    def _target(self, x, inputs, cell):
        """The array to write into: ``x`` itself in place, else a copy of it
        (into last call's output buffer when that fits and aliases nothing)."""
        if self.inplace and x.flags.writeable:
            return x
        buf = cell[0]
        if (isinstance(buf, np.ndarray) and buf.shape == x.shape and buf.dtype == x.dtype
                and buf.flags.writeable
                and not any(np.may_share_memory(buf, i) for i in inputs
                            if isinstance(i, np.ndarray))):
            np.copyto(buf, x)
            return buf
        return x.copy()

    def check_value_shape(self, v_shape, region_shape) -> None:
        """``ValueError`` unless a value of ``v_shape`` broadcasts to the
        region (what every implementation of the update checks)."""
        _check_value_shape(tuple(v_shape), tuple(region_shape), self.fn_name, static=False)

    def _value(self, v, region_shape, out) -> np.ndarray:
        v = np.asarray(v)
        self.check_value_shape(v.shape, region_shape)
        if self.inplace and np.may_share_memory(v, out):
            v = v.copy()  # reading v while writing out must not see the writes
        return v

    # -- gradient -----------------------------------------------------------------
    def grad(self, inputs, output_grads):
        from tenure.symbolic.grad import is_differentiable
        from tenure.symbolic.ops.reduce import sum_to
        x, v, *index = inputs
        (gz,) = output_grads
        if gz is None:
            return [None] * len(inputs)
        gx = gv = None
        if is_differentiable(x):
            if self.set_instead_of_inc:
                # The region was overwritten: no gradient reaches x there.
                zero = constant(np.zeros((), dtype=gz.dtype))
                gx = type(self)(self.pattern, set_instead_of_inc=True)(gz, zero, *index)
            else:
                gx = gz
        if is_differentiable(v):
            g_region = self.index_op(gz, *index)
            if self.set_instead_of_inc and isinstance(self.index_op, AdvancedSubtensor):
                # A repeated index keeps only the last write: the values it
                # overwrote get no gradient.
                g_region = ew.where(self._winners(gz, g_region, index), g_region, 0)
            gv = sum_to(g_region, v)
        return [gx, gv] + [None] * len(index)

    def _winners(self, like, region, index):
        """A bool mask over the region: which of its positions wrote last (the
        one whose value stays in the result) -- found by writing position labels
        the same way and reading them back."""
        from tenure.symbolic.ops.creation import arange, full_like
        from tenure.symbolic.ops.shape import dim_prod, reshape, shape_tuple
        dims = shape_tuple(region)
        labels = reshape(arange(dim_prod(dims)), dims)
        blank = full_like(like, -1, dtype=labels.dtype)
        written = type(self)(self.pattern, set_instead_of_inc=True)(blank, labels, *index)
        return ew.equal(self.index_op(written, *index), labels)


class IncSubtensor(_IncSubtensorBase):
    """``x`` with the basic-indexing region ``x[pattern]`` set to or incremented
    by ``v`` (inputs: ``x``, ``v``, then the index scalars, as for
    :class:`~tenure.symbolic.ops.indexing.Subtensor`)."""

    _index_op_class = Subtensor

    def perform(self, node, inputs, output_storage):
        x, v, *values = inputs
        out = self._target(x, inputs, output_storage[0])
        # A view of the region (0-d for all-int indices, thanks to the Ellipsis).
        region = out[self.index_op.index(values)]
        v = self._value(v, region.shape, out)
        if self.set_instead_of_inc:
            region[...] = v
        else:
            np.add(region, v, out=region, casting="unsafe")
        output_storage[0][0] = out


class AdvancedIncSubtensor(_IncSubtensorBase):
    """``x`` with the advanced-indexing region ``x[pattern]`` set to or
    incremented by ``v`` (inputs: ``x``, ``v``, then the index inputs, as for
    :class:`~tenure.symbolic.ops.indexing.AdvancedSubtensor`).

    Repeated indices: ``inc`` accumulates every contribution (``np.add.at``),
    ``set`` keeps the last write.
    """

    _index_op_class = AdvancedSubtensor

    def perform(self, node, inputs, output_storage):
        x, v, *values = inputs
        out = self._target(x, inputs, output_storage[0])
        if self.inplace:
            values = [a.copy() if isinstance(a, np.ndarray) and np.may_share_memory(a, out)
                      else a for a in values]
        index = index_tuple(self.pattern, values)
        region_shape = advanced_region_shape(self.pattern, out.shape, values)
        v = self._value(v, region_shape, out)
        if self.set_instead_of_inc:
            out[index] = v
            output_storage[0][0] = out
            return
        # np.add.at gets v already broadcast to the region: given a v that still
        # needs broadcasting, NumPy 2.4 sometimes adds the wrong elements.
        v = np.broadcast_to(v.astype(out.dtype, copy=False), region_shape)
        if any(e[0] == "newaxis" for e in self.pattern):
            # np.add.at misreads None in an index: add through the flat positions
            # of the region instead (the indexing itself follows NumPy exactly).
            positions = np.arange(out.size).reshape(out.shape)[index]
            flat = out.reshape(-1) if out.flags.c_contiguous else out.flatten()
            np.add.at(flat, positions, v)
            if not np.may_share_memory(flat, out):
                out[...] = flat.reshape(out.shape)
        else:
            np.add.at(out, index, v)
        output_storage[0][0] = out


def _update(x_sub, value, set_instead_of_inc: bool):
    fn = _fn_name(set_instead_of_inc)
    node = x_sub.owner if isinstance(x_sub, Variable) else None
    if node is None or not isinstance(node.op, (Subtensor, AdvancedSubtensor)):
        if not isinstance(x_sub, Variable):
            got = f"{type(x_sub).__name__} {x_sub!r}"
        elif node is None:
            got = f"{x_sub} ({x_sub.type}), which is not the result of indexing"
        else:
            got = f"{x_sub} ({x_sub.type}), computed by {node.op}, not by indexing"
        method = "set" if set_instead_of_inc else "inc"
        raise TypeError(f"{fn}: expected the result of indexing a tensor, as in "
                        f"tn.{fn}(x[idx], v) or x[idx].{method}(v); got {got}")
    cls = IncSubtensor if isinstance(node.op, Subtensor) else AdvancedIncSubtensor
    x, *index = node.inputs
    return cls(node.op.pattern, set_instead_of_inc=set_instead_of_inc)(x, value, *index)


def set_subtensor(x_sub, v):
    """``x`` with ``x[idx]`` replaced by ``v``, for ``x_sub = x[idx]`` (a new variable).

    ``v`` broadcasts to the region's shape.  Where an integer array index
    repeats, the last write wins, as in NumPy assignment.
    """
    return _update(x_sub, v, True)


def inc_subtensor(x_sub, v):
    """``x`` with ``v`` added to ``x[idx]``, for ``x_sub = x[idx]`` (a new variable).

    ``v`` broadcasts to the region's shape.  Where an integer array index
    repeats, every contribution is added (like ``np.add.at``).
    """
    return _update(x_sub, v, False)
