"""Products of arrays: :func:`dot` and :func:`matmul`, with NumPy's semantics.

``dot`` is ``np.dot``: a 0-d operand multiplies elementwise, two vectors give
their inner product, and otherwise the last axis of ``a`` is summed against
the second-to-last axis of ``b`` (the only axis of a vector), every other axis
of both operands kept.  ``matmul`` is ``np.matmul`` (the ``@`` operator):
stacks of matrices over broadcast leading axes, a vector operand promoted to a
matrix and its axis removed again, and 0-d operands refused.

Output dtypes are what NumPy gives (``int8 @ int8`` is ``int8``, ``bool @
bool`` is ``bool``), found by asking NumPy on tiny arrays.  Known inner
lengths that differ are an error when the graph is built.
"""

from __future__ import annotations

import numpy as np

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
