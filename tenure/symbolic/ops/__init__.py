"""The op families, one file each; this module re-exports their user-facing functions."""

from tenure.symbolic.ops.elemwise import (  # noqa: F401
    Elemwise, abs, absolute, add, arccos, arccosh, arcsin, arcsinh, arctan, arctan2, arctanh,
    astype, bitwise_and, bitwise_or, bitwise_xor, cast, ceil, clip, cos, cosh, divide, eq, equal,
    erf, exp, exp2, expm1, floor, floor_divide, ge, greater, greater_equal, gt, invert, isinf,
    isnan, le, less, less_equal, log, log1p, log2, log10, logical_and, logical_not, logical_or,
    logical_xor, lt, maximum, minimum, mod, mul, multiply, neg, negative, neq, not_equal, power,
    reciprocal, rint, round, sigmoid, sign, sin, sinh, softplus, sqrt, square, sub, subtract,
    switch, tan, tanh, true_divide, trunc, where)
from tenure.symbolic.ops.reduce import (  # noqa: F401
    all, any, argmax, argmin, max, mean, min, prod, sum, sum_to)
from tenure.symbolic.ops.blas import dot, matmul  # noqa: F401
from tenure.symbolic.ops.shape import (  # noqa: F401
    expand_dims, flatten, get_vector_length, reshape, shape, shape_tuple, specify_shape, squeeze,
    stack_scalars, transpose)
from tenure.symbolic.ops.indexing import getitem  # noqa: F401
from tenure.symbolic.ops.creation import (  # noqa: F401
    alloc, arange, broadcast_to, eye, full, full_like, ones, ones_like, zeros, zeros_like)

# -- helper A (reduce.py, blas.py): var, std, cumsum, outer, tensordot ------
from tenure.symbolic.ops.reduce import cumprod, cumsum, std, var  # noqa: F401
from tenure.symbolic.ops.blas import outer, tensordot  # noqa: F401
# -- helper B (indexing.py): set_subtensor, inc_subtensor, take ------------
from tenure.symbolic.ops.indexing import take  # noqa: F401
from tenure.symbolic.ops.nonzero import nonzero  # noqa: F401
from tenure.symbolic.ops.ifelse import ifelse  # noqa: F401
from tenure.symbolic.ops.subtensor_update import inc_subtensor, set_subtensor  # noqa: F401
# -- helper C (join.py, nnet.py, sorting.py) --------------------------------
from tenure.symbolic.ops.join import concatenate, split, stack  # noqa: F401
from tenure.symbolic.ops.nnet import (  # noqa: F401
    gelu, log_softmax, logsumexp, one_hot, relu, softmax)
from tenure.symbolic.ops.sorting import argsort, sort  # noqa: F401
from tenure.symbolic.ops.trace import trace  # noqa: F401
from tenure.symbolic.ops.composed import linspace, pad, repeat, tile, tril, triu  # noqa: F401

__all__ = [name for name in dir() if not name.startswith("_")
           and name not in ("elemwise", "reduce", "blas", "indexing", "scalar", "creation",
                            "join", "nnet", "sorting", "subtensor_update", "composed")]
