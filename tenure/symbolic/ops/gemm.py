"""``Gemm``: ``beta * z + alpha * (x @ y)`` in one BLAS call.

``z + x @ y`` computed as written makes a full temporary for the product, then
a second array (or an in-place add) for the sum.  BLAS's ``gemm`` accumulates
the product straight into ``z``'s buffer: no temporary at all.  The
``specialize`` rewrite ``gemm`` (tenure/rewrites/specialize.py) builds this op
from ``z + alpha * dot(x, y)``-shaped expressions; the ``inplace`` rewrite
``gemm_inplace`` then lets it write into ``z`` itself wherever the
DestroyHandler proves nobody else needs ``z``'s old value (a shared variable
being updated, a mutable input, an intermediate with no other reader).

Inputs: ``z`` (m, n), ``alpha`` (0-d), ``x`` (m, k), ``y`` (k, n), ``beta``
(0-d), all of one dtype, float32 or float64.  The value is exactly what the
expression ``beta * z + alpha * matmul(x, y)`` gives, NumPy broadcasting
included: a length that was unknown when the graph was built may turn out to
be 1 at run time, and then ``z`` (or the product) is stretched as ``add``
would stretch it.  ``0 * inf`` is NaN as in the expression: BLAS skips the
product when ``alpha == 0`` and ignores ``z`` when ``beta == 0``, so those
cases take the NumPy path.

``inplace=False`` copies ``z`` first (into last call's output buffer when that
fits and aliases no input) and accumulates into the copy; ``inplace=True``
accumulates into ``z``'s own buffer and declares ``destroy_map = {0: [0]}``
(falling back to a copy when ``z`` is read-only or does not have the result's
shape, e.g. when it broadcasts).

How the BLAS call avoids copies: Fortran BLAS works on column-major
(F-contiguous) arrays.  An F-contiguous target is passed as it is; a
C-contiguous target ``z`` is passed as ``z.T`` (F-contiguous, same memory),
computing ``z.T = y.T @ x.T``.  The operands are passed with BLAS's transpose
flags so that neither a C- nor an F-contiguous ``x``/``y`` is copied.  Any
other layout of the target is staged through one contiguous copy (as much
memory as the product temporary of the plain NumPy path, and the same
rounding as the contiguous case).
"""

from __future__ import annotations

import numbers

import numpy as np

from tenure.symbolic import cost_facts
from tenure.symbolic.graph import Apply, Op, Variable
from tenure.symbolic.ops.elemwise import broadcast_static_shapes, broadcast_symbolic_shapes
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import TensorConstant, as_tensor_variable, constant

#: the dtypes Gemm computes in (those BLAS's sgemm / dgemm take)
GEMM_DTYPES = ("float32", "float64")
#: the same as NumPy dtypes, for the per-call test (``dtype.name`` builds a new
#: string on every access, which showed up as growth under tracemalloc)
_GEMM_NP_DTYPES = tuple(np.dtype(d) for d in GEMM_DTYPES)


def _shape_str(shape) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def _scalar_input(op_name: str, which: str, value, dtype: str) -> Variable:
    """``alpha`` / ``beta`` as a 0-d variable of ``dtype``.

    Numbers (Python or NumPy) and weakly typed Python-number constants are
    converted to ``dtype``, as NumPy converts a Python scalar; a symbolic
    scalar must already have the dtype.
    """
    if isinstance(value, TensorConstant) and value.weak:
        value = value.weak_value
    if not isinstance(value, Variable):
        arr = (np.asarray(value) if isinstance(value, (numbers.Number, np.generic, np.ndarray))
               else None)
        if arr is None or arr.ndim != 0 or arr.dtype.kind not in "biuf":
            raise TypeError(f"{op_name}: {which} must be a real number or a 0-d {dtype} "
                            f"tensor, got {type(value).__name__} {value!r}")
        return constant(arr.astype(dtype))
    var = as_tensor_variable(value)
    if var.ndim != 0:
        raise TypeError(f"{op_name}: {which} must be a 0-d (scalar) tensor, got {var} "
                        f"({var.type})")
    if var.dtype != dtype:
        raise TypeError(f"{op_name}: {which} must have the dtype of z ({dtype}), got {var} "
                        f"({var.type}); cast it first")
    return var


class Gemm(Op):
    """``beta * z + alpha * (x @ y)`` for float32/float64 matrices, through BLAS.

    Inputs ``(z, alpha, x, y, beta)``.  ``inplace=True`` accumulates into
    ``z``'s buffer (``destroy_map = {0: [0]}``); only the ``gemm_inplace``
    rewrite should create it, after the DestroyHandler has accepted it.
    """

    __props__ = ("inplace",)

    def __init__(self, inplace: bool = False):
        self.inplace = bool(inplace)
        self.destroy_map = {0: [0]} if self.inplace else {}

    def __str__(self) -> str:
        return "gemm_inplace" if self.inplace else "gemm"

    def make_node(self, z, alpha, x, y, beta=1) -> Apply:
        z, x, y = (as_tensor_variable(v) for v in (z, x, y))
        for which, var in (("z", z), ("x", x), ("y", y)):
            if var.ndim != 2:
                raise TypeError(f"{self}: {which} must be a matrix (2-d), got {var} "
                                f"({var.type}) with {var.ndim} dimension(s)")
        dtype = z.dtype
        if dtype not in GEMM_DTYPES:
            raise TypeError(f"{self}: z must be float32 or float64, got {z} ({z.type})")
        for which, var in (("x", x), ("y", y)):
            if var.dtype != dtype:
                raise TypeError(f"{self}: {which} must have the dtype of z ({dtype}), got "
                                f"{var} ({var.type}); cast it first")
        alpha = _scalar_input(str(self), "alpha", alpha, dtype)
        beta = _scalar_input(str(self), "beta", beta, dtype)
        (m, k), (k2, n) = x.type.shape, y.type.shape
        if k is not None and k2 is not None and k != k2:
            raise ValueError(f"{self}: x {_shape_str(x.type.shape)} and y "
                             f"{_shape_str(y.type.shape)} are not aligned: x has {k} "
                             f"column(s), y has {k2} row(s)")
        shape = broadcast_static_shapes(
            [z.type.shape, (m, n)],
            what=f"{self}: z {_shape_str(z.type.shape)} and x @ y {_shape_str((m, n))}")
        return Apply(self, [z, alpha, x, y, beta], [TensorType(dtype, shape)()])

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        z, _, x, y, _ = input_shapes
        if x[1] != y[0]:
            raise ValueError(f"{self}: x of shape {x} and y of shape {y} are not aligned: x "
                             f"has {x[1]} column(s), y has {y[0]} row(s)")
        try:
            np.broadcast_shapes(tuple(z), (x[0], y[1]))
        except ValueError:
            raise ValueError(f"{self}: z of shape {z} cannot be broadcast with x @ y of "
                             f"shape {(x[0], y[1])}") from None
        return True

    def perform(self, node, inputs, output_storage):
        z, alpha, x, y, beta = inputs
        cell = output_storage[0]
        dtype = node.outputs[0].type.numpy_dtype
        if x.shape[1] != y.shape[0]:
            raise ValueError(f"{self}: x of shape {x.shape} and y of shape {y.shape} are not "
                             f"aligned: x has {x.shape[1]} column(s), y has {y.shape[0]} row(s)")
        product_shape = (x.shape[0], y.shape[1])
        try:
            shape = np.broadcast_shapes(z.shape, product_shape)
        except ValueError:
            raise ValueError(f"{self}: z of shape {z.shape} cannot be broadcast with x @ y of "
                             f"shape {product_shape}") from None
        # Private scalars: alpha or beta could be views into z's buffer.
        alpha, beta = dtype.type(alpha), dtype.type(beta)
        if (self.inplace and isinstance(z, np.ndarray) and z.shape == shape
                and z.dtype == dtype and z.flags.writeable):
            target = z
            # x and y are read while z is written: they must not show its memory.
            x = x.copy(order="K") if np.may_share_memory(x, target) else x
            y = y.copy(order="K") if np.may_share_memory(y, target) else y
        else:
            target = _output_buffer(cell[0], shape, dtype, (z, x, y))
            np.copyto(target, z)
        accumulate(target, alpha, x, y, beta)
        cell[0] = target

    def infer_shape(self, node, input_shapes):
        z, _, x, y, _ = node.inputs
        z_shape, _, x_shape, y_shape, _ = input_shapes
        static = node.outputs[0].type.shape
        symbolic = broadcast_symbolic_shapes(
            static, [tuple(z_shape), (x_shape[0], y_shape[1])],
            [z.type.shape, (x.type.shape[0], y.type.shape[1])])
        return [tuple(s if s is not None else d for s, d in zip(static, symbolic))]

    def workspace_bytes(self, node, input_shapes, output_shapes):
        """BLAS accumulates in place: nothing.  A product that broadcasts to the
        result takes the NumPy path, which makes the product temporary."""
        _, _, x_shape, y_shape, _ = input_shapes
        if x_shape is None or y_shape is None:
            return 0
        product = (x_shape[0], y_shape[1])
        if tuple(output_shapes[0]) == product:
            return 0
        return product[0] * product[1] * node.outputs[0].type.numpy_dtype.itemsize

    def matrix_operands(self, node):
        """``x`` and ``y`` of ``z * beta + alpha * x @ y``."""
        return node.inputs[2], node.inputs[3]

    def broadcast_partners(self, node, shapes) -> list:
        """``z`` is broadcast against the product's shape."""
        x, y = shapes.get(node.inputs[2]), shapes.get(node.inputs[3])
        if x is None or y is None or len(x) < 1 or len(y) < 1:
            return []
        product = tuple(x[:-1]) + tuple(y[-1:]) if len(y) >= 2 else tuple(x[:-1])
        return [(node.inputs[0], [(None, product)])]

    def flops(self, node, shapes) -> float:
        """The product ``x @ y`` (``2 * m * n * k``), then the scaling and the
        sum: 3 per output element."""
        out_size = cost_facts.outputs_size(node, shapes)
        return 2.0 * out_size * cost_facts.dim(node.inputs[2], shapes, -1) + 3.0 * out_size

    def grad(self, inputs, output_grads):
        """The gradients of the unfused expression ``beta * z + alpha * matmul(x, y)``,
        by the rules of its own ops (broadcasting sums included)."""
        from tenure.symbolic.ops.blas import matmul
        from tenure.symbolic.ops.elemwise import add, mul
        z, alpha, x, y, beta = inputs
        (gz,) = output_grads
        if gz is None:
            return [None] * 5
        product = matmul(x, y)
        scaled_z, scaled_product = mul(beta, z), mul(alpha, product)
        total = add(scaled_z, scaled_product)
        g_scaled_z, g_scaled_product = total.owner.op.grad([scaled_z, scaled_product], [gz])
        g_beta, g_z = scaled_z.owner.op.grad([beta, z], [g_scaled_z])
        g_alpha, g_product = scaled_product.owner.op.grad([alpha, product], [g_scaled_product])
        g_x, g_y = product.owner.op.grad([x, y], [g_product])
        return [g_z, g_alpha, g_x, g_y, g_beta]


def _output_buffer(buffer, shape: tuple, dtype: np.dtype, inputs) -> np.ndarray:
    """Last call's output buffer when it can take the result (right shape and
    dtype, writeable, contiguous, sharing memory with no input); else a new array."""
    if (isinstance(buffer, np.ndarray) and buffer.shape == shape and buffer.dtype == dtype
            and buffer.flags.writeable
            and (buffer.flags.c_contiguous or buffer.flags.f_contiguous)
            and not any(isinstance(v, np.ndarray) and np.may_share_memory(buffer, v)
                        for v in inputs)):
        return buffer
    return np.empty(shape, dtype=dtype)


# --------------------------------------------------------------------------
# The computation, on arrays


_BLAS_GEMM: dict = {}


def _blas_gemm(dtype: np.dtype):
    """SciPy's ``sgemm`` / ``dgemm`` for ``dtype`` (looked up once)."""
    fn = _BLAS_GEMM.get(dtype)
    if fn is None:
        from scipy.linalg.blas import get_blas_funcs
        (fn,) = get_blas_funcs(("gemm",), dtype=dtype)
        _BLAS_GEMM[dtype] = fn
    return fn


def _fortran_operand(a: np.ndarray) -> tuple[np.ndarray, int]:
    """``(array, trans)`` with ``op(array) == a`` (``op`` transposing when
    ``trans``) and, when ``a`` is contiguous either way, ``array`` F-contiguous,
    so that the BLAS wrapper does not copy it."""
    if a.flags.f_contiguous:
        return a, 0
    if a.flags.c_contiguous:
        return a.T, 1
    return a, 0  # the wrapper makes the F-contiguous copy itself


def _blas_into(c: np.ndarray, alpha, a: np.ndarray, b: np.ndarray, beta) -> None:
    """``c = beta * c + alpha * (a @ b)`` for an F-contiguous ``c``, in ``c``'s buffer."""
    gemm = _blas_gemm(c.dtype)
    a_arr, trans_a = _fortran_operand(a)
    b_arr, trans_b = _fortran_operand(b)
    result = gemm(float(alpha), a_arr, b_arr, beta=float(beta), c=c, trans_a=trans_a,
                  trans_b=trans_b, overwrite_c=True)
    if not np.shares_memory(result, c):
        # The wrapper worked on a copy (it should not for an F-contiguous,
        # aligned c of the right dtype): put the result where it belongs.
        c[...] = result


def _numpy_into(target: np.ndarray, alpha, x: np.ndarray, y: np.ndarray, beta) -> None:
    """``target = beta * target + alpha * (x @ y)`` with NumPy (one temporary:
    the product), broadcasting the product to ``target`` if need be."""
    product = np.matmul(x, y)
    if alpha != 1:
        np.multiply(product, alpha, out=product, casting="unsafe")
    if beta != 1:
        np.multiply(target, beta, out=target, casting="unsafe")
    np.add(target, product, out=target, casting="unsafe")


def accumulate(target: np.ndarray, alpha, x: np.ndarray, y: np.ndarray, beta) -> None:
    """``target = beta * target + alpha * (x @ y)``, written into ``target``.

    ``target`` must be writeable and have the broadcast shape of itself and the
    product, and ``x`` and ``y`` must not share its memory.  BLAS does the work
    (no temporary) when ``target`` is C- or F-contiguous; other layouts go
    through one contiguous copy; a broadcast product, empty operands and a zero
    ``alpha`` or ``beta`` (where BLAS would skip a NaN) take the NumPy path.
    """
    m, k, n = x.shape[0], x.shape[1], y.shape[1]
    if (target.shape != (m, n) or target.size == 0 or k == 0 or alpha == 0 or beta == 0
            or target.dtype not in _GEMM_NP_DTYPES):
        _numpy_into(target, alpha, x, y, beta)
        return
    if target.flags.c_contiguous:
        _blas_into(target.T, alpha, y.T, x.T, beta)     # z.T = y.T @ x.T, column-major
    elif target.flags.f_contiguous:
        _blas_into(target, alpha, x, y, beta)
    else:
        staged = np.array(target, order="K")            # contiguous, one way or the other
        accumulate(staged, alpha, x, y, beta)
        np.copyto(target, staged)
