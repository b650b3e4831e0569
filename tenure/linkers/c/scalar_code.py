"""The C of the scalar ops: one table of C expressions per op, for every
linker that writes C (the C linker's loops today; the CUDA linker's kernels
are to take theirs from here too).

:data:`tenure.symbolic.ops.scalar.TABLE` says what each scalar op computes
(its NumPy implementation, its dtypes); :data:`EXPRESSIONS` says how, in C:
per op name an :class:`Expression` -- a template per kind of the computation
dtype (``"f": "exp{f}({0})"``, expanded by :func:`c_code`), or a callable;
the rule for the computation dtypes where the implementation is not a ufunc;
and how a Python-number input converts to its computation dtype.  The C
reproduces NumPy's results for every dtype in :data:`~.cgen.C_DTYPES`: bit
for bit, except transcendental functions (exp, sin, ...: NumPy's own SIMD
code, the C library's and its vector version agree within a few ulps) and
the documented platform choices of float-to-int casts.

A Python-number input reaches the C as its value converted to the
computation dtype (:func:`c_weak_value`): a loop parameter, or a literal
(:func:`c_weak_literal`) where the value changes the code
(:func:`c_weak_in_code`).

The helpers the expressions call (``tn_floor_divide_int8``, ...) are a real
header, ``include/scalar_ops.h.src`` (one family per dtype kind, through
:mod:`.ctemplate`): :func:`support_code` is its text, which a loop library
puts before its loops.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from tenure.linkers.c import ctemplate
from tenure.linkers.c.cgen import C_DTYPES, C_TYPES
from tenure.symbolic.ops.scalar import TABLE, Cast, ScalarOp

__all__ = ["EXPRESSIONS", "Expression", "c_code", "c_convert", "c_fold", "c_input_dtypes",
           "c_literal", "c_type", "c_weak_in_code", "c_weak_literal", "c_weak_value",
           "check_c_dtypes", "has_c_code", "support_code"]

#: the helpers' header (see the module doc)
SUPPORT_HEADER = Path(__file__).parent / "include" / "scalar_ops.h.src"

#: how a Python-number input converts to its computation dtype: as NumPy's
#: ufuncs do (out of range is an error), as np.where does (C-style wrap), or as
#: np.clip does (an integer bound beyond the dtype's range clips nothing);
#: "compare": like "exact", and out of range folds to a constant (c_fold)
WEAK_POLICIES = ("exact", "wrap", "saturate", "compare")


@dataclass(frozen=True)
class Expression:
    """One op's C: ``templates`` by dtype kind (b bool, i signed, u unsigned,
    f float; a str is every kind) or a callable ``(inputs, in_dtypes,
    out_dtype) -> str``; ``dtypes(probes, out_dtype)``: the computation
    dtypes, where the op's implementation is not a ufunc; ``weak``: one of
    :data:`WEAK_POLICIES`."""

    templates: object
    dtypes: Callable | None = None
    weak: str = "exact"

    def __post_init__(self):
        if self.weak not in WEAK_POLICIES:
            raise ValueError(f"unknown weak-input policy {self.weak!r}")


def c_type(dtype) -> str:
    """The C type holding one element of ``dtype`` (NumPy's ``npy_*`` names)."""
    name = np.dtype(dtype).name
    if name not in C_TYPES:
        raise NotImplementedError(f"no C code for dtype {name}")
    return C_TYPES[name]


def check_c_dtypes(what: str, dtypes) -> None:
    """``NotImplementedError`` naming ``what`` unless every dtype has C code."""
    for d in dtypes:
        if np.dtype(d).name not in C_DTYPES:
            raise NotImplementedError(f"{what} has no C code for dtype {np.dtype(d).name}")


def _is_python_number(value) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, (np.generic, np.ndarray))


def _resolve_probe(probe):
    """A probe as ``ufunc.resolve_dtypes`` takes it: a dtype, or the Python type
    of a weakly typed number (a Python bool is not weak in NumPy 2)."""
    if isinstance(probe, bool):
        return np.dtype(bool)
    if _is_python_number(probe):
        return type(probe)
    return np.asarray(probe).dtype


def _fits(value, dtype: np.dtype) -> bool:
    info = np.iinfo(dtype)
    return int(info.min) <= value <= int(info.max)


def _extremes(dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.array([info.min, info.max], dtype)
    if dtype.kind == "f":
        return np.array([-np.inf, np.inf], dtype)
    return np.array([False, True])


def c_literal(value, dtype) -> str:
    """``value`` (already representable in ``dtype``) as an exact C literal."""
    dtype = np.dtype(dtype)
    v = np.asarray(value, dtype=dtype)[()]
    ctype = c_type(dtype)
    if dtype.kind == "b":
        return "1" if v else "0"
    if dtype.kind == "u":
        return f"(({ctype}){int(v)}ULL)"
    if dtype.kind == "i":
        if v == np.iinfo(dtype).min:  # -9223372036854775808 is not a C literal
            return f"(({ctype})({int(v) + 1}LL - 1))"
        return f"(({ctype}){int(v)}LL)"
    if np.isnan(v):  # keep the payload and sign bit exactly
        bits = v.view(np.uint32 if dtype.itemsize == 4 else np.uint64)
        return f"tn_{dtype.name}_from_bits({int(bits)}ULL)"
    suffix = "f" if dtype.itemsize == 4 else ""
    if np.isinf(v):
        return f"({'-' if v < 0 else ''}HUGE_VAL{suffix.upper()})"
    return f"(({ctype}){float(v).hex()}{suffix})"  # hexadecimal: exact


def c_convert(expr: str, src, dst) -> str:
    """C expression converting ``expr`` from ``src`` to ``dst`` like NumPy's
    unsafe cast: to bool is ``!= 0`` (NaN is true), float to int goes through
    the ``tn_float_to_*`` helpers (defined for NaN, inf and out-of-range values:
    see :func:`support_code`), int to narrower int wraps modulo 2**bits."""
    src, dst = np.dtype(src), np.dtype(dst)
    check_c_dtypes("cast", (src, dst))
    if src == dst:
        return expr
    if dst.kind == "b":
        return f"({expr} != 0)"
    if src.kind == "f" and dst.kind in "iu":
        return f"tn_float_to_{dst.name}({expr})"
    return f"(({c_type(dst)}){expr})"


def _expand(template: str, inputs: list[str], out_dtype: np.dtype) -> str:
    """Fill a template: ``{0}``.. the inputs, ``{T}`` the C type of the result,
    ``{U}`` the unsigned type integer arithmetic wraps in (signed overflow is
    undefined in C, and uint16 * uint16 would overflow a signed int), ``{t}``
    the dtype name (helper suffix), ``{f}`` the C math suffix ("f" for float32)."""
    return template.format(*inputs, T=c_type(out_dtype),
                           U="npy_uint64" if out_dtype.itemsize == 8 else "npy_uint32",
                           t=out_dtype.name, f="f" if out_dtype == np.float32 else "")


@lru_cache(maxsize=None)
def support_code() -> str:
    """The helpers the expressions call (include-guarded: twice is harmless)."""
    return ctemplate.expand(SUPPORT_HEADER.read_text(), None)


# --------------------------------------------------------------------------
# Reading the table


def expression(op: ScalarOp) -> Expression:
    """``op``'s entry (``NotImplementedError`` when it has none)."""
    if isinstance(op, Cast):
        return _CAST
    entry = EXPRESSIONS.get(op.name)
    known = TABLE.get(op.name)
    # (another op of the same name -- a user's -- is not the table's op)
    if entry is None or known is None or known.impl is not op.impl:
        raise NotImplementedError(f"{op.name} has no C code")
    return entry


def c_input_dtypes(op: ScalarOp, probes: list) -> list[np.dtype]:
    """The dtype each input is converted to before the C expression sees it
    (NumPy's loop dtypes), for inputs like ``probes`` (empty arrays for typed
    inputs, Python numbers for weak ones).  ``NotImplementedError`` when there
    is no C code for these inputs."""
    entry = expression(op)
    if entry.dtypes is not None:
        dtypes = entry.dtypes(probes, op.output_dtype(probes))
    elif isinstance(op.impl, np.ufunc):
        signature = tuple(_resolve_probe(p) for p in probes) + (None,) * op.impl.nout
        dtypes = op.impl.resolve_dtypes(signature)[:op.nin]
    else:
        raise NotImplementedError(f"{op.name}: no rule for the C computation dtypes")
    dtypes = [np.dtype(d) for d in dtypes]
    check_c_dtypes(op.name, dtypes + [op.output_dtype(probes)])
    return dtypes


def c_code(op: ScalarOp, inputs: list[str], in_dtypes: list, out_dtype) -> str:
    """A C expression of type ``c_type(out_dtype)`` computing ``op``.

    ``inputs`` are C identifiers (or literals) holding the inputs already
    converted to ``in_dtypes`` (from :func:`c_input_dtypes`); they may be
    used more than once.  Bool values are 0 or 1.  The expression may set
    error bits in the ``int tn_status`` in scope (``TN_ERR_*`` of the C
    runtime's ``scalar_errors.h``).  ``NotImplementedError`` when the op has
    no C code for these dtypes.
    """
    in_dtypes = [np.dtype(d) for d in in_dtypes]
    out_dtype = np.dtype(out_dtype)
    check_c_dtypes(op.name, in_dtypes + [out_dtype])
    templates = expression(op).templates
    if callable(templates):
        return templates(inputs, in_dtypes, out_dtype)
    if isinstance(templates, str):
        templates = {"biuf": templates}
    kind = in_dtypes[-1].kind
    for kinds, template in templates.items():
        if kind in kinds:
            return "(" + _expand(template, inputs, out_dtype) + ")"
    raise NotImplementedError(f"{op.name} has no C code for {in_dtypes[-1]} inputs")


def has_c_code(op: ScalarOp, probes: list | None = None) -> bool:
    """Whether ``op`` has C code at all, or (given ``probes``) for such inputs."""
    try:
        expression(op)
        if probes is None:
            return True
        dtypes = c_input_dtypes(op, probes)
        c_code(op, [f"a{k}" for k in range(op.nin)], dtypes, op.output_dtype(probes))
    except (NotImplementedError, TypeError, OverflowError):
        return False
    return True


def c_weak_literal(op: ScalarOp, position: int, value, dtype) -> str:
    """The Python number ``value`` (input ``position``) as a C literal of its
    computation dtype, converted the way NumPy converts it for this op.
    Raises ``OverflowError`` for an integer NumPy would reject."""
    return c_literal(c_weak_value(op, position, value, dtype), dtype)


def c_weak_value(op: ScalarOp, position: int, value, dtype) -> np.ndarray:
    """The Python number ``value`` (input ``position``) converted to its
    computation dtype the way NumPy converts it for this op (a 0-d array:
    its bytes are what C reads, as a literal or a loop parameter).  Raises
    ``OverflowError`` for an integer NumPy would reject."""
    dtype = np.dtype(dtype)
    weak = expression(op).weak
    if weak == "wrap":
        # np.where makes an array of the number's default dtype and casts it.
        with np.errstate(all="ignore"):
            converted = np.asarray(value).astype(dtype)
    elif weak == "saturate" and dtype.kind in "iu" and type(value) is int:
        # np.clip drops an integer bound beyond the dtype's range: the same as
        # clipping at the range's end.
        info = np.iinfo(dtype)
        converted = np.asarray(min(max(value, int(info.min)), int(info.max)), dtype=dtype)
    else:
        converted = np.asarray(value, dtype=dtype)
    return converted


#: float powers whose constant operand the C compiler computes without calling
#: ``pow`` -- (position, value): x**2 is x*x, x**-1 is 1/x, x**1, x**0, 1**x;
#: 0.5 is NumPy's sqrt (:class:`_Power`)
_POWERS_IN_CODE = {(1, 2.0), (1, -1.0), (1, 1.0), (1, 0.0), (1, 0.5), (0, 1.0)}

#: integer exponents up to this are literals: the compiler unrolls the power
#: into a few multiplications (about 2.5 times faster for ``x ** 3``)
SMALL_INT_EXPONENT = 8


def c_weak_in_code(op: ScalarOp, position: int, value, dtype) -> bool:
    """Whether the Python number ``value`` (input ``position`` of ``op``,
    computation dtype ``dtype``) changes the C code, so that it must be a
    literal in it; else it is a loop parameter, read at run time (one loop
    serves every value).  The value is code where it selects other
    arithmetic, and only there:

    - a float power by 2, -1, 1, 0 or 0.5, or of 1: the compiler folds these,
      or NumPy takes the square root, and the results differ from ``pow``'s
      (:data:`_POWERS_IN_CODE`);
    - an integer power by 0 to :data:`SMALL_INT_EXPONENT`: a few
      multiplications instead of a loop;
    - an integer divisor of ``floor_divide`` or ``mod``: division by a
      constant is a multiplication, and vectorizes (4 to 15 times faster
      than dividing).

    Comparisons that :func:`c_fold` decides never read the number."""
    dtype = np.dtype(dtype)
    if op.name == "power" and position == 1 and dtype.kind in "iu":
        return 0 <= int(c_weak_value(op, position, value, dtype)) <= SMALL_INT_EXPONENT
    if op.name == "power" and dtype.kind == "f":
        converted = float(c_weak_value(op, position, value, dtype))
        return (position, converted) in _POWERS_IN_CODE
    return op.name in ("floor_divide", "mod") and position == 1 and dtype.kind in "iu"


def c_fold(op: ScalarOp, probes: list):
    """The result as a constant when NumPy's result cannot depend on the
    array inputs, else None.  Only comparisons fold: NumPy 2 compares an
    integer array with a Python integer outside its dtype's range (``int8 <
    1000``) exactly, which makes the answer the same for every element."""
    if expression(op).weak != "compare":
        return None
    dtypes = c_input_dtypes(op, probes)
    if not any(_is_python_number(p) and d.kind in "iu" and not _fits(p, d)
               for p, d in zip(probes, dtypes)):
        return None
    args = [p if _is_python_number(p) else _extremes(np.asarray(p).dtype) for p in probes]
    result = np.asarray(op.impl(*args))
    if result.size and bool((result == result.flat[0]).all()):
        return result.flat[0].item()
    return None


# --------------------------------------------------------------------------
# The table


class _Compare:
    """C code of a comparison (a class, not a closure: ops stay picklable).
    NumPy compares int64 with uint64 exactly (its mixed ``qQ``/``Qq`` loops),
    so a negative signed side decides alone."""

    _SWAPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
    _NEGATIVE_VS_UNSIGNED = {"<": 1, "<=": 1, ">": 0, ">=": 0, "==": 0, "!=": 1}

    def __init__(self, symbol: str):
        self.symbol = symbol

    def __call__(self, inputs, in_dtypes, out_dtype) -> str:
        (a, b), op = inputs, self.symbol
        ka, kb = in_dtypes[0].kind, in_dtypes[1].kind
        if ka == "i" and kb == "u":
            return f"({a} < 0 ? {self._NEGATIVE_VS_UNSIGNED[op]} : (npy_uint64){a} {op} {b})"
        if ka == "u" and kb == "i":
            swapped = self._NEGATIVE_VS_UNSIGNED[self._SWAPPED[op]]
            return f"({b} < 0 ? {swapped} : {a} {op} (npy_uint64){b})"
        return f"({a} {op} {b})"


def _c_cast(inputs, in_dtypes, out_dtype) -> str:
    return c_convert(inputs[0], in_dtypes[0], out_dtype)


def _same_as_output(probes, out_dtype) -> list:
    """Every input converted to the output dtype (clip, relu, softplus)."""
    return [out_dtype] * len(probes)


def _where_dtypes(probes, out_dtype) -> list:
    return [np.dtype(bool), out_dtype, out_dtype]


def _cast_input_dtypes(probes, out_dtype) -> list:
    # A Python number is made an array of its default dtype, then cast.
    return [np.asarray(probes[0]).dtype]


class _Power:
    """C code of ``power``.  NumPy computes an array to the scalar power 0.5 as
    its square root, which differs from ``pow`` at -inf (nan, not inf) and at
    -0.0 (-0.0, not 0.0): a Python-number exponent 0.5 (a literal here) gets
    ``sqrt`` too.  (A class, not a closure: ops stay picklable.)"""

    def __call__(self, inputs, in_dtypes, out_dtype) -> str:
        a, b = inputs
        if out_dtype.kind in "iu":
            return "(" + _expand("tn_power_{t}({0}, {1}, &tn_status)", inputs, out_dtype) + ")"
        if out_dtype.kind != "f":
            raise NotImplementedError(f"power has no C code for {in_dtypes[-1]} inputs")
        if b == c_literal(np.asarray(0.5, in_dtypes[1]), in_dtypes[1]):
            return "(" + _expand("sqrt{f}({0})", inputs, out_dtype) + ")"
        return "(" + _expand("pow{f}({0}, {1})", inputs, out_dtype) + ")"


def float_power_by_a_scalar(inputs, out_dtype) -> str:
    """C code of float ``power`` whose exponent is one number for the whole
    array (a 0-d operand): NumPy then takes the square root for an exponent
    of 0.5 (see :class:`_Power`), decided at run time here."""
    return "(" + _expand("({1} == 0.5 ? sqrt{f}({0}) : pow{f}({0}, {1}))", inputs,
                         np.dtype(out_dtype)) + ")"



# Templates: keys are dtype kinds of the (last) input's computation dtype.
# Integer +, -, * wrap in {U} (C signed overflow is undefined); floats are plain C.
_WRAP = "({T})(({U}){0} %s ({U}){1})"
_MAX_F = "({0} > {1} || {0} != {0}) ? {0} : {1}"  # NaN wins; a tie gives {1}, like NumPy's SIMD
_MIN_F = "({0} < {1} || {0} != {0}) ? {0} : {1}"
_ABS_I = "({T})({0} < 0 ? 0u - ({U}){0} : ({U}){0})"
_SIGN_F = "{0} > 0 ? ({T})1 : {0} < 0 ? ({T})-1 : {0} == 0 ? ({T})0 : {0}"  # -0.0 gives +0.0


def _math(name: str) -> Expression:
    """A C math function, float loops only (NumPy computes ints in float64, or
    float16 for 8-bit ints); ``expf`` for float32."""
    return Expression({"f": name + "{f}({0})"})


_CAST = Expression(_c_cast, dtypes=_cast_input_dtypes)

#: the C of every scalar op of :data:`tenure.symbolic.ops.scalar.TABLE` that has C code
EXPRESSIONS: dict[str, Expression] = {
    # Arithmetic
    "add": Expression({"b": "{0} | {1}", "iu": _WRAP % "+", "f": "{0} + {1}"}),
    "sub": Expression({"iu": _WRAP % "-", "f": "{0} - {1}"}),
    "mul": Expression({"b": "{0} & {1}", "iu": _WRAP % "*", "f": "{0} * {1}"}),
    "true_divide": Expression({"f": "{0} / {1}"}),
    "floor_divide": Expression("tn_floor_divide_{t}({0}, {1})"),
    "mod": Expression("tn_mod_{t}({0}, {1})"),
    "power": Expression(_Power()),
    "neg": Expression({"iu": "({T})(0u - ({U}){0})", "f": "-{0}"}),
    "abs": Expression({"bu": "{0}", "i": _ABS_I, "f": "fabs{f}({0})"}),
    "sign": Expression({"i": "({T})(({0} > 0) - ({0} < 0))", "u": "({T})({0} > 0)",
                        "f": _SIGN_F}),
    "square": Expression({"iu": "({T})(({U}){0} * ({U}){0})", "f": "{0} * {0}"}),
    # For ints NumPy casts the double 1.0 / x: 1, -1 or 0 (1 / 0 is inf, cast as documented)
    "reciprocal": Expression({"iu": "tn_float_to_{t}(1.0 / {0})", "f": "({T})1 / {0}"}),
    "maximum": Expression({"b": "{0} | {1}", "iu": "{0} > {1} ? {0} : {1}", "f": _MAX_F}),
    "minimum": Expression({"b": "{0} & {1}", "iu": "{0} < {1} ? {0} : {1}", "f": _MIN_F}),
    "clip": Expression("tn_clip_{t}({0}, {1}, {2})", dtypes=_same_as_output, weak="saturate"),
    # Transcendental
    **{name: _math(name) for name in ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos",
                                      "tanh", "erf",   # C's erf; SciPy's is within ulps
                                      "tan", "sinh", "cosh", "log2", "log10", "exp2")},
    # NumPy's arc functions are C's a... functions
    **{name: _math(name.replace("arc", "a")) for name in ("arcsin", "arccos", "arctan",
                                                          "arcsinh", "arccosh", "arctanh")},
    "arctan2": Expression({"f": "atan2{f}({0}, {1})"}),
    # Rounding: IEEE-exact, as NumPy's loops (rint rounds halves to even in the
    # default rounding mode, which nothing here changes); integers unchanged
    **{name: Expression({"biu": "{0}", "f": f"{name}{{f}}({{0}})"})
       for name in ("floor", "ceil", "trunc")},
    "round": Expression({"iu": "{0}", "f": "rint{f}({0})"}, dtypes=_same_as_output),
    "rint": _math("rint"),
    "sigmoid": Expression({"f": "({T})1 / (({T})1 + exp{f}(-{0}))"}),  # SciPy's own formula
    "softplus": Expression({"f": "tn_softplus_{t}({0})"}, dtypes=_same_as_output),
    "relu": Expression({"biu": "{0} > 0 ? {0} : ({T})0",
                        "f": "({0} > 0 || {0} != {0}) ? {0} : ({T})0"}, dtypes=_same_as_output),
    # Comparisons and logic
    **{name: Expression(_Compare(symbol), weak="compare")
       for name, symbol in (("less", "<"), ("less_equal", "<="), ("greater", ">"),
                            ("greater_equal", ">="), ("equal", "=="), ("not_equal", "!="))},
    "logical_and": Expression("{0} != 0 && {1} != 0"),
    "logical_or": Expression("{0} != 0 || {1} != 0"),
    "logical_xor": Expression("({0} != 0) != ({1} != 0)"),
    "logical_not": Expression("{0} == 0"),
    "bitwise_and": Expression({"biu": "({T})({0} & {1})"}),
    "bitwise_or": Expression({"biu": "({T})({0} | {1})"}),
    "bitwise_xor": Expression({"biu": "({T})({0} ^ {1})"}),
    "invert": Expression({"b": "!{0}", "iu": "({T})~{0}"}),
    "isnan": Expression({"biu": "0", "f": "{0} != {0}"}),
    "isinf": Expression({"biu": "0", "f": "isinf({0}) != 0"}),
    "where": Expression("{0} ? {1} : {2}", dtypes=_where_dtypes, weak="wrap"),
}
