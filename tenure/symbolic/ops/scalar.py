"""The scalar op table: elementwise math written once.

Each :class:`ScalarOp` names one scalar function and its NumPy implementation
(a ufunc or a function with the ufunc calling convention ``impl(*arrays,
out=None)``).  Elementwise loops (:mod:`tenure.symbolic.ops.elemwise`), fusion
and every linker read this table, so a new scalar function is added here once.

Output dtypes are never written by hand: :meth:`ScalarOp.output_dtype` asks the
implementation itself on empty arrays, which reproduces NumPy 2's promotion
rules exactly (including weakly typed Python scalars).

How each op is written in C is the linkers' business: the table of C
expressions per op is :mod:`tenure.linkers.c.scalar_code`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.special

from tenure.symbolic.device import is_device_array


class ScalarOp:
    """One scalar function: ``name``, arity ``nin`` and NumPy ``impl``."""

    def __init__(self, name: str, nin: int, impl: Callable, doc: str = "", *,
                 raises_for: str = ""):
        self.name = name
        #: dtype kinds of inputs for which some values make the op raise
        #: (integer powers with negative exponents)
        self.raises_for = raises_for
        self.nin = nin
        self.impl = impl
        self.doc = doc

    def params(self) -> tuple:
        """What distinguishes two ops of the same name (e.g. a cast's dtype)."""
        return ()

    def may_raise(self, kinds: str) -> bool:
        """Whether some input values of these dtype kinds make the op raise."""
        return any(k in self.raises_for for k in kinds)

    def __eq__(self, other) -> bool:
        return (type(self) is type(other) and self.name == other.name
                and self.params() == other.params())

    def __hash__(self) -> int:
        return hash((type(self), self.name, self.params()))

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__

    def output_dtype(self, probes: list) -> np.dtype:
        """The dtype NumPy gives ``impl`` for inputs like ``probes``.

        ``probes`` holds empty arrays for typed inputs and Python numbers for
        weakly typed ones.  Raises ``TypeError`` for dtypes the function does
        not support and ``OverflowError`` for Python numbers out of range.
        """
        with np.errstate(all="ignore"):
            result = self.impl(*probes)
        return np.asarray(result).dtype

    def __call__(self, *arrays, out=None):
        return self.impl(*arrays, out=out)


class Cast(ScalarOp):
    """Conversion to ``dtype`` (NumPy's ``astype``, unsafe casting)."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        super().__init__(f"cast_{self.dtype.name}", 1, self._cast)

    def params(self) -> tuple:
        return (self.dtype.name,)

    def _cast(self, x, out=None):
        if out is None:
            # A device array (CuPy's) casts on its device; anything else as NumPy.
            return x.astype(self.dtype) if is_device_array(x) else np.asarray(x).astype(self.dtype)
        np.copyto(out, x, casting="unsafe")
        return out


def _softplus(x, out=None):
    # log(1 + exp(x)) without overflow for large x.
    return np.logaddexp(0, x, out=out)


def _relu(x, out=None):
    return np.maximum(x, 0, out=out)


def _check_python_ints_fit(*values) -> None:
    """NumPy 2.5's rule for Python integers among ``where``'s values: the
    result's dtype is decided without them (weakly typed, NEP 50), and each
    must then fit it, else ``OverflowError`` ("Python integer 1000 out of
    bounds for int8", as NumPy's ufuncs say for ``int8 + 1000``).  NumPy 2.4's
    ``np.where`` wrapped such a value silently; tenure follows 2.5 whichever
    is installed."""
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if not ints:
        return
    dtype = np.result_type(*(v if isinstance(v, (int, float, complex)) else
                             v.dtype if hasattr(v, "dtype") else np.asarray(v).dtype
                             for v in values))
    if dtype.kind not in "iu":
        return
    info = np.iinfo(dtype)
    for v in ints:
        if not info.min <= v <= info.max:
            raise OverflowError(f"Python integer {v} out of bounds for {dtype}")


def _where(cond, a, b, out=None):
    _check_python_ints_fit(a, b)
    if out is None:
        return np.where(cond, a, b)
    cond = np.asarray(cond, dtype=bool)
    if np.may_share_memory(out, cond):
        cond = cond.copy()  # written in place into the condition: read it first
    if np.may_share_memory(out, a) and not np.may_share_memory(out, b):
        # Written into `a` (in place): its kept positions already hold `a`.
        np.copyto(out, b, casting="unsafe", where=~cond)
        return out
    # Fill from `b`, then overwrite where cond holds; both broadcast into `out`.
    np.copyto(out, b, casting="unsafe")
    np.copyto(out, a, casting="unsafe", where=cond)
    return out


def _round(x, out=None):
    # np.round with no decimals: halves to even, as rint, but integers (and
    # their dtype) unchanged; np.round has no ufunc of its own.
    return np.round(x, out=out)


def _clip(x, lo, hi, out=None):
    return np.clip(x, lo, hi, out=out)


# --------------------------------------------------------------------------
# C code: types, literals, conversions and the helpers the templates call


# --------------------------------------------------------------------------
# The table


#: every scalar op, by name
TABLE: dict[str, ScalarOp] = {}


def _register(name: str, nin: int, impl: Callable, doc: str = "", **kwargs) -> ScalarOp:
    """Add an op (``kwargs``: :class:`ScalarOp`'s, ``raises_for``)."""
    op = ScalarOp(name, nin, impl, doc, **kwargs)
    TABLE[name] = op
    return op


# Arithmetic
add = _register("add", 2, np.add, "x + y")
sub = _register("sub", 2, np.subtract, "x - y")
mul = _register("mul", 2, np.multiply, "x * y")
true_divide = _register("true_divide", 2, np.true_divide, "x / y")
floor_divide = _register("floor_divide", 2, np.floor_divide, "x // y")
mod = _register("mod", 2, np.remainder, "x % y (sign of y, like Python)")
power = _register("power", 2, np.power, "x ** y", raises_for="iu")
neg = _register("neg", 1, np.negative, "-x")
abs_ = _register("abs", 1, np.absolute, "|x|")
sign = _register("sign", 1, np.sign, "sign of x")
square = _register("square", 1, np.square, "x * x")
reciprocal = _register("reciprocal", 1, np.reciprocal,
                       "1 / x (integer division for ints, as NumPy)")
maximum = _register("maximum", 2, np.maximum, "elementwise max (NaN propagates)")
minimum = _register("minimum", 2, np.minimum, "elementwise min (NaN propagates)")
clip = _register("clip", 3, _clip, "x limited to [lo, hi]")

# Rounding (exact; floor, ceil, trunc and round keep integers as they are)
floor = _register("floor", 1, np.floor, "largest integer <= x")
ceil = _register("ceil", 1, np.ceil, "smallest integer >= x")
trunc = _register("trunc", 1, np.trunc, "x rounded towards zero")
rint = _register("rint", 1, np.rint, "nearest integer, halves to even (integers give floats)")
round_ = _register("round", 1, _round, "nearest integer, halves to even (as np.round)")

# Transcendental
exp = _register("exp", 1, np.exp)
log = _register("log", 1, np.log)
log1p = _register("log1p", 1, np.log1p, "log(1 + x), accurate for small x")
expm1 = _register("expm1", 1, np.expm1, "exp(x) - 1, accurate for small x")
sqrt = _register("sqrt", 1, np.sqrt)
sin = _register("sin", 1, np.sin)
cos = _register("cos", 1, np.cos)
tanh = _register("tanh", 1, np.tanh)
sigmoid = _register("sigmoid", 1, scipy.special.expit, "1 / (1 + exp(-x))")
softplus = _register("softplus", 1, _softplus, "log(1 + exp(x)), stable")
relu = _register("relu", 1, _relu, "max(x, 0); NaN stays NaN")
erf = _register("erf", 1, scipy.special.erf)
tan = _register("tan", 1, np.tan)
arcsin = _register("arcsin", 1, np.arcsin)
arccos = _register("arccos", 1, np.arccos)
arctan = _register("arctan", 1, np.arctan)
arctan2 = _register("arctan2", 2, np.arctan2, "the angle of the point (x2, x1): arctan(x1 / x2) "
                    "in its quadrant")
sinh = _register("sinh", 1, np.sinh)
cosh = _register("cosh", 1, np.cosh)
arcsinh = _register("arcsinh", 1, np.arcsinh)
arccosh = _register("arccosh", 1, np.arccosh)
arctanh = _register("arctanh", 1, np.arctanh)
log2 = _register("log2", 1, np.log2)
log10 = _register("log10", 1, np.log10)
exp2 = _register("exp2", 1, np.exp2, "2 ** x")

# Comparisons and logic
less = _register("less", 2, np.less, "x < y")
less_equal = _register("less_equal", 2, np.less_equal, "x <= y")
greater = _register("greater", 2, np.greater, "x > y")
greater_equal = _register("greater_equal", 2, np.greater_equal, "x >= y")
equal = _register("equal", 2, np.equal, "x == y")
not_equal = _register("not_equal", 2, np.not_equal, "x != y")
logical_and = _register("logical_and", 2, np.logical_and)
logical_or = _register("logical_or", 2, np.logical_or)
logical_xor = _register("logical_xor", 2, np.logical_xor)
logical_not = _register("logical_not", 1, np.logical_not)
bitwise_and = _register("bitwise_and", 2, np.bitwise_and, "x & y")
bitwise_or = _register("bitwise_or", 2, np.bitwise_or, "x | y")
bitwise_xor = _register("bitwise_xor", 2, np.bitwise_xor, "x ^ y")
invert = _register("invert", 1, np.invert, "~x")
isnan = _register("isnan", 1, np.isnan)
isinf = _register("isinf", 1, np.isinf)
where = _register("where", 3, _where, "a where cond else b")
