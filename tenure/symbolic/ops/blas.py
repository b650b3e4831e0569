"""Products of arrays: :func:`dot`, :func:`matmul`, :func:`tensordot` and
:func:`outer`, with NumPy's semantics.

``dot`` is ``np.dot``: a 0-d operand multiplies elementwise, two vectors give
their inner product, and otherwise the last axis of ``a`` is summed against
the second-to-last axis of ``b`` (the only axis of a vector), every other axis
of both operands kept.  ``matmul`` is ``np.matmul`` (the ``@`` operator):
stacks of matrices over broadcast leading axes, a vector operand promoted to a
matrix and its axis removed again, and 0-d operands refused.

``tensordot`` is ``np.tensordot``: the axes ``axes[0]`` of ``a`` summed
against the axes ``axes[1]`` of ``b`` (an int ``n`` means ``a``'s last ``n``
axes against ``b``'s first ``n``), the result holding ``a``'s other axes then
``b``'s.  ``outer`` is ``np.outer``: both operands flattened first.

Output dtypes are what NumPy gives (``int8 @ int8`` is ``int8``, ``bool @
bool`` is ``bool``), found by asking NumPy on tiny arrays.  Known inner
lengths that differ are an error when the graph is built.

Gradients are products again: every product here is a tensordot of its
operands, and the gradient of a tensordot with respect to one operand is the
tensordot of the output gradient with the other operand over its free axes
(then axes put back in order).  ``matmul`` sums the gradients over broadcast
batch axes with ``sum_to``.  Gradients follow the convention of ``mul`` for
complex operands (no conjugation).
"""

from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from tenure.symbolic import cost_facts
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.ops.elemwise import broadcast_static_shapes, broadcast_symbolic_shapes
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import as_tensor_variable


def _shape_str(shape) -> str:
    """A shape for messages: unknown lengths shown as ``?``."""
    inner = ", ".join("?" if d is None else str(d) for d in shape)
    if len(shape) == 1:
        inner += ","
    return f"({inner})"


def _check_inner(fn_name: str, a_shape: tuple, b_shape: tuple, a_len, b_len,
                 b_axis: str) -> None:
    """``ValueError`` when the two summed lengths are both known and differ."""
    if a_len is not None and b_len is not None and a_len != b_len:
        raise ValueError(
            f"{fn_name}: shapes {_shape_str(a_shape)} and {_shape_str(b_shape)} are not "
            f"aligned: the last axis of the first ({a_len}) must match the {b_axis} axis of "
            f"the second ({b_len})")


def _output_dtype(fn_name: str, fn, a, b) -> np.dtype:
    """The dtype NumPy's ``fn`` gives for operands of ``a``'s and ``b``'s types.

    All-ones shapes are always aligned, so only dtypes can make NumPy refuse.
    """
    probes = [np.ones((1,) * v.ndim, dtype=v.dtype) for v in (a, b)]
    try:
        with np.errstate(all="ignore"):
            return np.asarray(fn(*probes)).dtype
    except TypeError as exc:
        raise TypeError(f"{fn_name}: unsupported operands {a} ({a.type}) and {b} ({b.type}): "
                        f"{exc}") from None


def _fits(buffer, shape: tuple, dtype: np.dtype) -> bool:
    """Whether a buffer left from an earlier call can take this output as it is."""
    return (isinstance(buffer, np.ndarray) and buffer.shape == shape
            and buffer.dtype == dtype and buffer.flags.writeable)


# --------------------------------------------------------------------------
# dot


def dot_shape(a_shape: tuple, b_shape: tuple) -> tuple:
    """The shape of ``np.dot(a, b)`` from the operands' shapes.

    Entries may be ints, ``None`` (unknown) or symbolic lengths; only ints and
    ``None`` are checked for alignment, so pass static shapes to validate.
    """
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    if not a_shape:
        return b_shape  # a 0-d operand scales the other
    if not b_shape:
        return a_shape
    return a_shape[:-1] + b_shape[:-2] + b_shape[-1:] if len(b_shape) >= 2 else a_shape[:-1]


def _check_dot_static(a_shape: tuple, b_shape: tuple) -> None:
    if not a_shape or not b_shape:
        return
    if len(b_shape) >= 2:
        _check_inner("dot", a_shape, b_shape, a_shape[-1], b_shape[-2], "second-to-last")
    else:
        _check_inner("dot", a_shape, b_shape, a_shape[-1], b_shape[0], "only")


def _product_flops(node, shapes) -> float:
    """``2 * m * n * k`` flops of a matrix product: each output element sums
    ``k`` products, ``k`` the first operand's last length (1 when either
    operand is 0-d, or the length is unknown)."""
    a, b = node.inputs[0], node.inputs[1]
    k = cost_facts.dim(a, shapes, -1) if a.type.ndim >= 1 and b.type.ndim >= 1 else 1
    return 2.0 * cost_facts.outputs_size(node, shapes) * k


def _matrix_operands(node):
    a, b = node.inputs
    return (a, b) if a.type.ndim >= 2 and b.type.ndim >= 2 else None


class Dot(Op):
    """``np.dot(a, b)`` for operands of any number of dimensions."""

    __props__ = ()

    def __str__(self) -> str:
        return "dot"

    def make_node(self, a, b) -> Apply:
        a, b = as_tensor_variable(a), as_tensor_variable(b)
        dtype = _output_dtype("dot", np.dot, a, b)
        _check_dot_static(a.type.shape, b.type.shape)
        out = TensorType(dtype, dot_shape(a.type.shape, b.type.shape))()
        return Apply(self, [a, b], [out])

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        _check_dot_static(tuple(input_shapes[0]), tuple(input_shapes[1]))
        return True

    def perform(self, node, inputs, output_storage):
        a, b = inputs
        cell = output_storage[0]
        dtype = node.outputs[0].type.numpy_dtype
        buffer = cell[0]
        # np.dot only writes into a C-contiguous out= of exactly its own dtype.
        if (isinstance(buffer, np.ndarray) and buffer.flags.c_contiguous
                and _aligned(a.shape, b.shape)
                and _fits(buffer, dot_shape(a.shape, b.shape), dtype)):
            # Two vectors give a NumPy scalar back even with out=; the buffer
            # holds the result either way.
            np.dot(a, b, out=buffer)
            cell[0] = buffer
        else:
            cell[0] = np.asarray(np.dot(a, b), dtype=dtype)

    def infer_shape(self, node, input_shapes):
        a_shape, b_shape = input_shapes
        symbolic = dot_shape(a_shape, b_shape)
        static = node.outputs[0].type.shape
        return [tuple(s if s is not None else d for s, d in zip(static, symbolic))]

    def flops(self, node, shapes) -> float:
        """``2 * m * n * k``: each output element sums ``k`` products."""
        return _product_flops(node, shapes)

    def matrix_operands(self, node):
        """Both operands, when both are matrices (or stacks of them)."""
        return _matrix_operands(node)

    def grad(self, inputs, output_grads):
        a, b = inputs
        (gz,) = output_grads
        if a.ndim == 0 or b.ndim == 0:
            # A scaling: the scalar's gradient sums over every element.
            from tenure.symbolic.ops.elemwise import mul
            ga = tensordot(gz, b, axes=b.ndim) if a.ndim == 0 else mul(gz, b)
            gb = mul(gz, a) if a.ndim == 0 else tensordot(a, gz, axes=a.ndim)
            return [_if_differentiable(a, ga), _if_differentiable(b, gb)]
        b_axis = b.ndim - 2 if b.ndim >= 2 else 0
        return tensordot_grads(a, b, (a.ndim - 1,), (b_axis,), gz)


def _aligned(a_shape: tuple, b_shape: tuple) -> bool:
    """Whether ``np.dot`` accepts these concrete shapes; when not, NumPy should
    raise its own error rather than one about the out= buffer."""
    if not a_shape or not b_shape:
        return True
    b_len = b_shape[-2] if len(b_shape) >= 2 else b_shape[0]
    return a_shape[-1] == b_len


_dot = Dot()


def dot(a, b):
    """``np.dot(a, b)``: a 0-d operand multiplies, two vectors give their inner
    product, otherwise ``a``'s last axis is summed against ``b``'s second-to-last
    (or only) axis.  Python numbers become constants (int64, floatX, ...)."""
    return _dot(a, b)


# --------------------------------------------------------------------------
# matmul


def matmul_static_shape(a_shape: tuple, b_shape: tuple) -> tuple:
    """The shape of ``np.matmul(a, b)`` from static (or concrete) operand shapes.

    Raises ``ValueError`` for a 0-d operand, known inner lengths that differ
    and batch axes that cannot broadcast.
    """
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    for which, shape in (("first", a_shape), ("second", b_shape)):
        if not shape:
            raise ValueError(f"matmul: the {which} operand is 0-d (a scalar); matmul needs "
                             "at least 1 dimension on both sides (use mul to scale)")
    # A vector is a one-row (first operand) or one-column (second operand) matrix.
    a2 = (1,) + a_shape if len(a_shape) == 1 else a_shape
    b2 = b_shape + (1,) if len(b_shape) == 1 else b_shape
    _check_inner("matmul", a_shape, b_shape, a2[-1], b2[-2],
                 "second-to-last" if len(b_shape) >= 2 else "only")
    batch = broadcast_static_shapes(
        [a2[:-2], b2[:-2]],
        what=f"matmul: batch axes of {_shape_str(a_shape)} and {_shape_str(b_shape)}")
    rows = a2[-2:-1] if len(a_shape) >= 2 else ()
    cols = b2[-1:] if len(b_shape) >= 2 else ()
    return batch + rows + cols


class MatMul(Op):
    """``np.matmul(a, b)``: matrix products broadcast over leading axes."""

    __props__ = ()

    def __str__(self) -> str:
        return "matmul"

    def make_node(self, a, b) -> Apply:
        a, b = as_tensor_variable(a), as_tensor_variable(b)
        shape = matmul_static_shape(a.type.shape, b.type.shape)
        dtype = _output_dtype("matmul", np.matmul, a, b)
        return Apply(self, [a, b], [TensorType(dtype, shape)()])

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        matmul_static_shape(tuple(input_shapes[0]), tuple(input_shapes[1]))
        return True

    def perform(self, node, inputs, output_storage):
        a, b = inputs
        cell = output_storage[0]
        dtype = node.outputs[0].type.numpy_dtype
        buffer = cell[0]
        # matmul is a gufunc: any strides do for out=, only shape and dtype matter.
        # (An output shape the inputs do not give is simply a misfit, never an error
        # here; NumPy reports bad operands itself below.)
        if isinstance(buffer, np.ndarray) and _fits(buffer, _try_matmul_shape(a, b), dtype):
            np.matmul(a, b, out=buffer)
            cell[0] = buffer
        else:
            cell[0] = np.asarray(np.matmul(a, b), dtype=dtype)

    def infer_shape(self, node, input_shapes):
        a, b = node.inputs
        a_shape, b_shape = tuple(input_shapes[0]), tuple(input_shapes[1])
        static = node.outputs[0].type.shape
        # The output is the batch axes, then a's rows and b's columns (for matrices).
        batch_ndim = len(static) - (a.ndim >= 2) - (b.ndim >= 2)
        batch = broadcast_symbolic_shapes(static[:batch_ndim], [a_shape[:-2], b_shape[:-2]],
                                          [a.type.shape[:-2], b.type.shape[:-2]])
        rows = a_shape[-2:-1] if a.ndim >= 2 else ()
        cols = b_shape[-1:] if b.ndim >= 2 else ()
        symbolic = tuple(batch) + tuple(rows) + tuple(cols)
        return [tuple(s if s is not None else d for s, d in zip(static, symbolic))]

    def flops(self, node, shapes) -> float:
        """``2 * m * n * k``: each output element sums ``k`` products."""
        return _product_flops(node, shapes)

    def matrix_operands(self, node):
        """Both operands, when both are matrices (or stacks of them)."""
        return _matrix_operands(node)

    def grad(self, inputs, output_grads):
        from tenure.symbolic.grad import is_differentiable
        from tenure.symbolic.ops.reduce import sum_to
        from tenure.symbolic.ops.shape import expand_dims, squeeze
        a, b = inputs
        (gz,) = output_grads
        # Vectors as the matrices matmul makes of them: a is one row, b one column;
        # gz gets back the axes that were dropped from the result.
        a2 = expand_dims(a, 0) if a.ndim == 1 else a
        b2 = expand_dims(b, -1) if b.ndim == 1 else b
        if a.ndim == 1:
            gz = expand_dims(gz, -1 if gz.ndim == 0 else gz.ndim - 1)
        if b.ndim == 1:
            gz = expand_dims(gz, -1)
        ga = gb = None
        # Batch axes exist only when an operand has more than 2 dimensions;
        # without them there is nothing to sum back (and a bare product lets
        # later rewrites, such as gemm, recognise it).
        batched = a.ndim > 2 or b.ndim > 2
        if is_differentiable(a):
            ga = matmul(gz, _swap_last(b2))          # batch + (n, k)
            if a.ndim == 1:
                ga = squeeze(ga, axis=-2)
            if batched:
                ga = sum_to(ga, a)                    # sum over broadcast batch axes
        if is_differentiable(b):
            gb = matmul(_swap_last(a2), gz)           # batch + (k, m)
            if b.ndim == 1:
                gb = squeeze(gb, axis=-1)
            if batched:
                gb = sum_to(gb, b)
        return [ga, gb]


def _swap_last(x):
    """``x`` with its last two axes swapped (a view)."""
    from tenure.symbolic.ops.shape import transpose
    order = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return transpose(x, order)


def _try_matmul_shape(a: np.ndarray, b: np.ndarray):
    """The output shape of ``np.matmul(a, b)``, or None when NumPy would refuse."""
    try:
        return matmul_static_shape(a.shape, b.shape)
    except ValueError:
        return None


_matmul = MatMul()


def matmul(a, b):
    """``a @ b`` as ``np.matmul``: matrix products over broadcast leading axes; a
    vector operand acts as a one-row (left) or one-column (right) matrix whose
    extra axis is then dropped.  0-d operands raise ``ValueError``."""
    return _matmul(a, b)


# --------------------------------------------------------------------------
# tensordot


def _if_differentiable(var, g):
    from tenure.symbolic.grad import is_differentiable
    return g if is_differentiable(var) else None


def _axes_list(value, which: str) -> tuple:
    """One side of a ``tensordot`` axes pair: an int or a sequence of ints."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"tensordot: axes for {which} must be ints, got {value!r}")
    if isinstance(value, (numbers.Integral, np.integer)):
        return (int(value),)
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"tensordot: axes for {which} must be an int or a sequence of ints, "
                        f"got {type(value).__name__} {value!r}") from None
    for item in items:
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (numbers.Integral,
                                                                       np.integer)):
            raise TypeError(f"tensordot: axes for {which} must be ints, got "
                            f"{type(item).__name__} {item!r} in {value!r}")
    return tuple(int(i) for i in items)


def _normalize_side(axes: tuple, ndim: int, which: str) -> tuple:
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"tensordot: axis {a} is out of range for {which}, which has "
                             f"{ndim} dimension(s)")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"tensordot: axes {axes} for {which} name the same axis twice")
    return tuple(out)


def normalize_tensordot_axes(axes, a_ndim: int, b_ndim: int) -> tuple[tuple, tuple]:
    """``np.tensordot``'s ``axes`` as two equally long tuples of non-negative axes.

    An int ``n`` means the last ``n`` axes of ``a`` and the first ``n`` of ``b``;
    a pair gives the axes of ``a`` and of ``b`` (each an int or a sequence),
    summed pairwise.
    """
    if isinstance(axes, (numbers.Integral, np.integer)) and not isinstance(axes, (bool,
                                                                                  np.bool_)):
        n = operator.index(axes)
        if n < 0:
            raise ValueError(f"tensordot: axes must be a non-negative int or a pair of axis "
                             f"sequences, got {n}")
        if n > a_ndim or n > b_ndim:
            raise ValueError(f"tensordot: axes={n} sums over {n} axes, but the operands have "
                             f"{a_ndim} and {b_ndim} dimensions")
        return tuple(range(a_ndim - n, a_ndim)), tuple(range(n))
    try:
        a_side, b_side = axes
    except (TypeError, ValueError):
        raise TypeError(f"tensordot: axes must be an int or a pair (axes of a, axes of b), "
                        f"got {axes!r}") from None
    a_axes = _axes_list(a_side, "the first operand")
    b_axes = _axes_list(b_side, "the second operand")
    if len(a_axes) != len(b_axes):
        raise ValueError(f"tensordot: axes {axes!r} pair {len(a_axes)} axes of the first "
                         f"operand with {len(b_axes)} of the second; the counts must be equal")
    return (_normalize_side(a_axes, a_ndim, "the first operand"),
            _normalize_side(b_axes, b_ndim, "the second operand"))


def free_axes(ndim: int, summed: tuple) -> tuple:
    """The axes of an operand of ``ndim`` axes that a tensordot summing
    ``summed`` keeps, in order."""
    return tuple(i for i in range(ndim) if i not in summed)


def _check_tensordot_lengths(a_shape, b_shape, a_axes, b_axes) -> None:
    for i, j in zip(a_axes, b_axes):
        la, lb = a_shape[i], b_shape[j]
        if la is not None and lb is not None and la != lb:
            raise ValueError(
                f"tensordot: shapes {_shape_str(a_shape)} and {_shape_str(b_shape)} are not "
                f"aligned: axis {i} of the first (length {la}) is summed against axis {j} of "
                f"the second (length {lb})")


class TensorDot(Op):
    """``np.tensordot(a, b, axes=(a_axes, b_axes))`` with normalized axes (two
    equally long tuples of distinct non-negative ints)."""

    __props__ = ("a_axes", "b_axes")

    def __init__(self, a_axes, b_axes):
        self.a_axes = tuple(operator.index(i) for i in a_axes)
        self.b_axes = tuple(operator.index(i) for i in b_axes)
        if len(self.a_axes) != len(self.b_axes):
            raise ValueError(f"TensorDot: {self.a_axes} and {self.b_axes} differ in length")
        if any(i < 0 for i in self.a_axes + self.b_axes):
            raise ValueError(f"TensorDot: axes must be non-negative, got {self.a_axes} and "
                             f"{self.b_axes} (normalize them with normalize_tensordot_axes)")

    def __str__(self) -> str:
        return f"tensordot{{axes=({self.a_axes}, {self.b_axes})}}"

    def numpy_axes(self):
        return (list(self.a_axes), list(self.b_axes))

    def make_node(self, a, b) -> Apply:
        a, b = as_tensor_variable(a), as_tensor_variable(b)
        for which, var, axes in (("first", a, self.a_axes), ("second", b, self.b_axes)):
            for i in axes:
                if i >= var.ndim:
                    raise ValueError(f"tensordot: axis {i} is out of range for the {which} "
                                     f"operand {var} ({var.type})")
            if len(set(axes)) != len(axes):
                raise ValueError(f"tensordot: axes {axes} of the {which} operand repeat")
        _check_tensordot_lengths(a.type.shape, b.type.shape, self.a_axes, self.b_axes)
        dtype = _output_dtype("tensordot",
                              lambda p, q: np.tensordot(p, q, axes=self.numpy_axes()), a, b)
        shape = (tuple(a.type.shape[i] for i in free_axes(a.ndim, self.a_axes))
                 + tuple(b.type.shape[i] for i in free_axes(b.ndim, self.b_axes)))
        return Apply(self, [a, b], [TensorType(dtype, shape)()])

    def check_aligned(self, a_shape: tuple, b_shape: tuple) -> None:
        """``ValueError`` unless the summed axes of the two shapes have equal lengths."""
        for i, j in zip(self.a_axes, self.b_axes):
            if a_shape[i] != b_shape[j]:
                raise ValueError(
                    f"tensordot: shapes {a_shape} and {b_shape} are not aligned: axis {i} of "
                    f"the first (length {a_shape[i]}) is summed against axis {j} of the "
                    f"second (length {b_shape[j]})")

    def perform(self, node, inputs, output_storage):
        a, b = inputs
        self.check_aligned(a.shape, b.shape)
        dtype = node.outputs[0].type.numpy_dtype
        cell = output_storage[0]
        buffer = cell[0]
        if (a.dtype == b.dtype == dtype and isinstance(buffer, np.ndarray)
                and buffer.flags.c_contiguous and _fits(buffer, self._shape(a, b), dtype)
                and not np.may_share_memory(buffer, a) and not np.may_share_memory(buffer, b)):
            # np.tensordot's own steps, the product written into last call's
            # (or the plan's) buffer: the same numbers, no result allocated
            # (np.tensordot takes no out=).
            left, right = _as_matrix(a, self.a_axes, False), _as_matrix(b, self.b_axes, True)
            np.dot(left, right, out=buffer.reshape(left.shape[0], right.shape[1]))
        else:
            cell[0] = np.asarray(np.tensordot(a, b, axes=self.numpy_axes()), dtype=dtype)

    def _shape(self, a, b) -> tuple:
        return (tuple(a.shape[i] for i in free_axes(a.ndim, self.a_axes))
                + tuple(b.shape[i] for i in free_axes(b.ndim, self.b_axes)))

    def infer_shape(self, node, input_shapes):
        a, b = node.inputs
        a_shape, b_shape = input_shapes
        symbolic = (tuple(a_shape[i] for i in free_axes(a.ndim, self.a_axes))
                    + tuple(b_shape[i] for i in free_axes(b.ndim, self.b_axes)))
        static = node.outputs[0].type.shape
        return [tuple(s if s is not None else d for s, d in zip(static, symbolic))]

    def flops(self, node, shapes) -> float:
        """``2 * out_size * k``, ``k`` the product of ``a``'s summed lengths
        (0 when ``a``'s shape is unknown)."""
        shape = shapes.get(node.inputs[0])
        k = math.prod(shape[i] for i in self.a_axes) if shape is not None else 0
        return 2.0 * cost_facts.outputs_size(node, shapes) * k

    def grad(self, inputs, output_grads):
        a, b = inputs
        return tensordot_grads(a, b, self.a_axes, self.b_axes, output_grads[0])


def _permute_back(t, source_axes: list):
    """``t``, whose axis ``k`` stands for axis ``source_axes[k]`` of some operand,
    with its axes put in that operand's order."""
    from tenure.symbolic.ops.shape import transpose
    order = tuple(int(k) for k in np.argsort(source_axes))
    return t if order == tuple(range(len(order))) else transpose(t, order)


def tensordot_grads(a, b, a_axes: tuple, b_axes: tuple, gz) -> list:
    """Gradients of ``tensordot(a, b, (a_axes, b_axes))`` given the output's ``gz``
    (None for an operand that is not differentiable).

    ``gz`` holds ``a``'s free axes then ``b``'s.  Summing it against ``b`` over
    ``b``'s free axes leaves ``a``'s free axes and ``b``'s summed axes, which
    stand for ``a``'s summed axes (paired in order); likewise for ``b``.
    """
    from tenure.symbolic.grad import is_differentiable
    a_free, b_free = free_axes(a.ndim, a_axes), free_axes(b.ndim, b_axes)
    ga = gb = None
    if is_differentiable(a):
        t = _tensordot(gz, b, tuple(range(len(a_free), gz.ndim)), b_free)
        pairs = dict(zip(b_axes, a_axes))
        ga = _permute_back(t, list(a_free) + [pairs[j] for j in sorted(b_axes)])
    if is_differentiable(b):
        t = _tensordot(a, gz, a_free, tuple(range(len(a_free))))
        pairs = dict(zip(a_axes, b_axes))
        gb = _permute_back(t, [pairs[i] for i in sorted(a_axes)] + list(b_free))
    return [ga, gb]


def _as_matrix(x: np.ndarray, summed: tuple, summed_first: bool) -> np.ndarray:
    """``x`` as ``np.tensordot`` makes each operand a matrix: its free axes
    on one side, the ``summed`` ones on the other (first for the second
    operand), reshaped (a copy where the move needs one)."""
    free = free_axes(x.ndim, summed)
    n_free = int(np.prod([x.shape[i] for i in free], dtype=np.int64))
    n_summed = int(np.prod([x.shape[i] for i in summed], dtype=np.int64))
    if summed_first:
        return x.transpose(list(summed) + list(free)).reshape(n_summed, n_free)
    return x.transpose(list(free) + list(summed)).reshape(n_free, n_summed)


def _tensordot(a, b, a_axes, b_axes):
    return TensorDot(a_axes, b_axes)(a, b)


def tensordot(a, b, axes=2):
    """``np.tensordot(a, b, axes)``: ``axes`` an int ``n`` (``a``'s last ``n`` axes
    summed against ``b``'s first ``n``) or a pair ``(axes of a, axes of b)`` of
    ints or sequences, summed pairwise.  The result holds ``a``'s remaining
    axes, then ``b``'s.  Known lengths that differ raise ``ValueError``."""
    a, b = as_tensor_variable(a), as_tensor_variable(b)
    a_axes, b_axes = normalize_tensordot_axes(axes, a.ndim, b.ndim)
    return _tensordot(a, b, a_axes, b_axes)


# --------------------------------------------------------------------------
# outer


def _flat_length(shape: tuple):
    return int(np.prod(shape, dtype=np.int64)) if None not in shape else None


class Outer(Op):
    """``np.outer(a, b)``: ``a`` and ``b`` flattened, ``out[i, j] = a[i] * b[j]``."""

    __props__ = ()

    def __str__(self) -> str:
        return "outer"

    def make_node(self, a, b) -> Apply:
        a, b = as_tensor_variable(a), as_tensor_variable(b)
        dtype = _output_dtype("outer", np.outer, a, b)
        shape = (_flat_length(a.type.shape), _flat_length(b.type.shape))
        return Apply(self, [a, b], [TensorType(dtype, shape)()])

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        return True   # any two arrays have an outer product

    def perform(self, node, inputs, output_storage):
        a, b = inputs
        cell = output_storage[0]
        dtype = node.outputs[0].type.numpy_dtype
        if _fits(cell[0], (a.size, b.size), dtype):
            np.outer(a, b, out=cell[0])
        else:
            cell[0] = np.asarray(np.outer(a, b), dtype=dtype)

    def infer_shape(self, node, input_shapes):
        from tenure.symbolic.ops.shape import dim_prod
        static = node.outputs[0].type.shape
        symbolic = (dim_prod(input_shapes[0]), dim_prod(input_shapes[1]))
        return [tuple(s if s is not None else d for s, d in zip(static, symbolic))]

    def grad(self, inputs, output_grads):
        from tenure.symbolic.grad import is_differentiable
        a, b = inputs
        (gz,) = output_grads
        ga = gb = None
        if is_differentiable(a):
            ga = _unflatten(dot(gz, _flat(b)), a)
        if is_differentiable(b):
            gb = _unflatten(dot(_flat(a), gz), b)
        return [ga, gb]


def _flat(x):
    from tenure.symbolic.ops.shape import flatten
    return x if x.ndim == 1 else flatten(x)


def _unflatten(g, like):
    from tenure.symbolic.ops.shape import reshape, shape_tuple
    return g if like.ndim == 1 else reshape(g, shape_tuple(like))


_outer = Outer()


def outer(a, b):
    """``np.outer(a, b)``: the 2-d product ``a.ravel()[i] * b.ravel()[j]`` (both
    operands are flattened first, whatever their number of dimensions)."""
    return _outer(a, b)
