"""The scalar op table: elementwise math written once.

Each :class:`ScalarOp` names one scalar function and its NumPy implementation
(a ufunc or a function with the ufunc calling convention ``impl(*arrays,
out=None)``).  Elementwise loops (:mod:`tenure.symbolic.ops.elemwise`), fusion
and every linker read this table, so a new scalar function is added here once.

Output dtypes are never written by hand: :meth:`ScalarOp.output_dtype` asks the
implementation itself on empty arrays, which reproduces NumPy 2's promotion
rules exactly (including weakly typed Python scalars).

Each op also carries its C implementation, written next to the NumPy one: a
template per kind of dtype (``"f": "exp{f}({0})"``) that :meth:`ScalarOp.c_code`
expands into a C expression.  The C code reproduces NumPy's results for every
dtype in :data:`C_DTYPES`: bit for bit, except transcendental functions (exp,
sin, ...: NumPy's own SIMD code, the C library's and its vector version agree
within a few ulps) and the documented platform choices of float-to-int casts.
The elementwise loop generator (:mod:`tenure.linkers.c.elemwise`) puts
:data:`C_SUPPORT_CODE` (the helpers the templates call) before the generated code.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

import numpy as np
import scipy.special


class ScalarOp:
    """One scalar function: ``name``, arity ``nin`` and NumPy ``impl``."""

    def __init__(self, name: str, nin: int, impl: Callable, doc: str = "", *,
                 c=None, c_dtypes: Callable | None = None, weak: str = "exact",
                 raises_for: str = ""):
        self.name = name
        #: dtype kinds of inputs for which some values make the op raise
        #: (integer powers with negative exponents)
        self.raises_for = raises_for
        self.nin = nin
        self.impl = impl
        self.doc = doc
        # C side (see c_code): templates by dtype kind (or a callable), the
        # rule for the computation dtypes when `impl` is not a ufunc, and how a
        # Python-number input converts to its computation dtype.
        self._c = {"biuf": c} if isinstance(c, str) else c
        self._c_dtypes = c_dtypes
        if weak not in _WEAK_POLICIES:
            raise ValueError(f"{name}: unknown weak-input policy {weak!r}")
        self._weak = weak

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

    # -- C code ------------------------------------------------------------------
    def c_input_dtypes(self, probes: list) -> list[np.dtype]:
        """The dtype each input is converted to before the C expression sees it
        (NumPy's loop dtypes), for inputs like ``probes`` (as in
        :meth:`output_dtype`).  Raises ``NotImplementedError`` when there is no
        C code for these inputs."""
        if self._c is None:
            raise NotImplementedError(f"{self.name} has no C code")
        if self._c_dtypes is not None:
            dtypes = self._c_dtypes(probes, self.output_dtype(probes))
        elif isinstance(self.impl, np.ufunc):
            signature = tuple(_resolve_probe(p) for p in probes) + (None,) * self.impl.nout
            dtypes = self.impl.resolve_dtypes(signature)[:self.nin]
        else:
            raise NotImplementedError(f"{self.name}: no rule for the C computation dtypes")
        dtypes = [np.dtype(d) for d in dtypes]
        check_c_dtypes(self.name, dtypes + [self.output_dtype(probes)])
        return dtypes

    def c_code(self, inputs: list[str], in_dtypes: list, out_dtype) -> str:
        """A C expression of type ``c_type(out_dtype)`` computing this op.

        ``inputs`` are C identifiers (or literals) holding the inputs already
        converted to ``in_dtypes`` (from :meth:`c_input_dtypes`); they may be
        used more than once.  Bool values are 0 or 1.  The expression may set
        error bits in the ``int tn_status`` in scope (``TN_ERR_*`` of
        :data:`C_SUPPORT_CODE`).  Raises ``NotImplementedError`` when the op
        has no C code for these dtypes.
        """
        in_dtypes = [np.dtype(d) for d in in_dtypes]
        out_dtype = np.dtype(out_dtype)
        check_c_dtypes(self.name, in_dtypes + [out_dtype])
        if self._c is None:
            raise NotImplementedError(f"{self.name} has no C code")
        if callable(self._c):
            return self._c(inputs, in_dtypes, out_dtype)
        kind = in_dtypes[-1].kind
        for kinds, template in self._c.items():
            if kind in kinds:
                return "(" + _expand(template, inputs, out_dtype) + ")"
        raise NotImplementedError(f"{self.name} has no C code for {in_dtypes[-1]} inputs")

    def has_c_code(self, probes: list | None = None) -> bool:
        """Whether the op has C code at all, or (given ``probes``) for such inputs."""
        if probes is None:
            return self._c is not None
        try:
            dtypes = self.c_input_dtypes(probes)
            self.c_code([f"a{k}" for k in range(self.nin)], dtypes, self.output_dtype(probes))
        except (NotImplementedError, TypeError, OverflowError):
            return False
        return True

    def c_weak_literal(self, position: int, value, dtype) -> str:
        """The Python number ``value`` (input ``position``) as a C literal of its
        computation dtype, converted the way NumPy converts it for this op.
        Raises ``OverflowError`` for an integer NumPy would reject."""
        dtype = np.dtype(dtype)
        if self._weak == "wrap":
            # np.where makes an array of the number's default dtype and casts it.
            with np.errstate(all="ignore"):
                converted = np.asarray(value).astype(dtype)
        elif self._weak == "saturate" and dtype.kind in "iu" and type(value) is int:
            # np.clip drops an integer bound beyond the dtype's range: the same as
            # clipping at the range's end.
            info = np.iinfo(dtype)
            converted = np.asarray(min(max(value, int(info.min)), int(info.max)), dtype=dtype)
        else:
            converted = np.asarray(value, dtype=dtype)
        return c_literal(converted, dtype)

    def c_fold(self, probes: list):
        """The result as a constant when NumPy's result cannot depend on the
        array inputs, else None.  Only comparisons fold: NumPy 2 compares an
        integer array with a Python integer outside its dtype's range (``int8 <
        1000``) exactly, which makes the answer the same for every element."""
        if self._weak != "compare":
            return None
        dtypes = self.c_input_dtypes(probes)
        if not any(_is_python_number(p) and d.kind in "iu" and not _fits(p, d)
                   for p, d in zip(probes, dtypes)):
            return None
        args = [p if _is_python_number(p) else _extremes(np.asarray(p).dtype) for p in probes]
        result = np.asarray(self.impl(*args))
        if result.size and bool((result == result.flat[0]).all()):
            return result.flat[0].item()
        return None


class Cast(ScalarOp):
    """Conversion to ``dtype`` (NumPy's ``astype``, unsafe casting)."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        super().__init__(f"cast_{self.dtype.name}", 1, self._cast,
                         c=_c_cast, c_dtypes=_cast_input_dtypes)

    def params(self) -> tuple:
        return (self.dtype.name,)

    def _cast(self, x, out=None):
        if out is None:
            return np.asarray(x).astype(self.dtype)
        np.copyto(out, x, casting="unsafe")
        return out


def _softplus(x, out=None):
    # log(1 + exp(x)) without overflow for large x.
    return np.logaddexp(0, x, out=out)


def _relu(x, out=None):
    return np.maximum(x, 0, out=out)


def _where(cond, a, b, out=None):
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


def _clip(x, lo, hi, out=None):
    return np.clip(x, lo, hi, out=out)


# --------------------------------------------------------------------------
# C code: types, literals, conversions and the helpers the templates call


#: dtypes with C code.  float16 has none (NumPy computes it through float32
#: with its own rounding), nor complex (it needs templates of its own).
C_DTYPES = frozenset(("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                      "uint64", "float32", "float64"))

_C_TYPES = {"bool": "npy_bool", "float32": "npy_float32", "float64": "npy_float64",
            **{f"{s}int{b}": f"npy_{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64)}}

#: how a Python-number input converts to its computation dtype: as NumPy's
#: ufuncs do (out of range is an error), as np.where does (C-style wrap), or as
#: np.clip does (an integer bound beyond the dtype's range clips nothing);
#: "compare": like "exact", and out of range folds to a constant (ScalarOp.c_fold)
_WEAK_POLICIES = ("exact", "wrap", "saturate", "compare")


def c_type(dtype) -> str:
    """The C type holding one element of ``dtype`` (NumPy's ``npy_*`` names)."""
    name = np.dtype(dtype).name
    if name not in _C_TYPES:
        raise NotImplementedError(f"no C code for dtype {name}")
    return _C_TYPES[name]


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
    see :data:`C_SUPPORT_CODE`), int to narrower int wraps modulo 2**bits."""
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


def _c_support_code() -> str:
    """The C helpers behind the templates, one set per dtype."""
    parts = [_C_COMMON]
    for bits in (8, 16, 32, 64):
        for signed in (True, False):
            name = f"{'' if signed else 'u'}int{bits}"
            code = _C_INT_SIGNED if signed else _C_INT_UNSIGNED
            subs = {"@t@": name, "@T@": _C_TYPES[name],
                    "@U@": "npy_uint64" if bits == 64 else "npy_uint32"}
            for key, value in subs.items():
                code = code.replace(key, value)
            parts.append(code)
    for name, f, loge2 in (("float32", "f", "0.693147180559945309417232121458176568F"),
                           ("float64", "", "0.693147180559945309417232121458176568")):
        code = _C_FLOAT
        for key, value in {"@t@": name, "@T@": _C_TYPES[name], "@f@": f, "@LOGE2@": loge2}.items():
            code = code.replace(key, value)
        parts.append(code)
    parts.append("#endif /* TN_SCALAR_SUPPORT */\n")
    return "\n".join(parts)


_C_COMMON = r"""
#ifndef TN_SCALAR_SUPPORT
#define TN_SCALAR_SUPPORT
/* Helpers of tenure's scalar ops (tenure/symbolic/ops/scalar.py).  Needs
 * <Python.h> and <numpy/arrayobject.h> first.  Everything is static inline, so
 * what a module does not use costs nothing. */
#include <math.h>
#include <string.h>

/* Vector math (libmvec): the C runtime's vector_math.h, which comes first. */

/* The error bits the scalar code sets in `int tn_status` (TN_ERR_*) are
 * defined by the C runtime's scalar_errors.h, which comes first. */

static inline npy_bool tn_clip_bool(npy_bool x, npy_bool lo, npy_bool hi)
{ npy_bool t = x > lo ? x : lo; return t < hi ? t : hi; }

static inline npy_float32 tn_float32_from_bits(npy_uint32 bits)
{ npy_float32 x; memcpy(&x, &bits, sizeof x); return x; }
static inline npy_float64 tn_float64_from_bits(npy_uint64 bits)
{ npy_float64 x; memcpy(&x, &bits, sizeof x); return x; }

/* Float to int without C's undefined behaviour, reproducing what NumPy's casts
 * give on x86-64 (the truncating conversions cvttsd2si/cvttss2si yield the
 * "integer indefinite" value, the type's minimum, for NaN and out-of-range
 * values; narrower types take the low bits of a 32-bit conversion; unsigned
 * 32/64-bit go through the signed conversion, shifted by 2**31 / 2**63 for
 * large values).  A float32 argument converts to double exactly, so one set of
 * helpers serves both float types. */
static inline npy_int32 tn_trunc_i32(double x)
{ return (x > -2147483649.0 && x < 2147483648.0) ? (npy_int32)x : NPY_MIN_INT32; }
static inline npy_int64 tn_trunc_i64(double x)
{
    return (x >= -9223372036854775808.0 && x < 9223372036854775808.0) ? (npy_int64)x
                                                                       : NPY_MIN_INT64;
}
static inline npy_int8 tn_float_to_int8(double x) { return (npy_int8)tn_trunc_i32(x); }
static inline npy_int16 tn_float_to_int16(double x) { return (npy_int16)tn_trunc_i32(x); }
static inline npy_int32 tn_float_to_int32(double x) { return tn_trunc_i32(x); }
static inline npy_int64 tn_float_to_int64(double x) { return tn_trunc_i64(x); }
static inline npy_uint8 tn_float_to_uint8(double x) { return (npy_uint8)tn_trunc_i32(x); }
static inline npy_uint16 tn_float_to_uint16(double x) { return (npy_uint16)tn_trunc_i32(x); }
static inline npy_uint32 tn_float_to_uint32(double x)
{
    return x >= 2147483648.0 ? (npy_uint32)tn_trunc_i32(x - 2147483648.0) ^ 0x80000000u
                             : (npy_uint32)tn_trunc_i32(x);
}
static inline npy_uint64 tn_float_to_uint64(double x)
{
    return x >= 9223372036854775808.0
        ? (npy_uint64)tn_trunc_i64(x - 9223372036854775808.0) ^ 0x8000000000000000ULL
        : (npy_uint64)tn_trunc_i64(x);
}
"""

# Integer division follows NumPy: a zero divisor gives 0 (NumPy also warns; we
# do not), floor rounding and the divisor's sign for the remainder, and
# MIN // -1 wraps to MIN instead of trapping.  Products wrap in @U@.
_C_INT_SIGNED = r"""
static inline @T@ tn_floor_divide_@t@(@T@ a, @T@ b)
{
    if (b == 0) return 0;
    if (b == -1) return (@T@)(0u - (@U@)a);
    @T@ q = (@T@)(a / b);
    if (((a > 0) != (b > 0)) && (@T@)(q * b) != a) q--;
    return q;
}
static inline @T@ tn_mod_@t@(@T@ a, @T@ b)
{
    if (b == 0 || b == -1) return 0;
    @T@ r = (@T@)(a % b);
    return (r != 0 && ((r < 0) != (b < 0))) ? (@T@)(r + b) : r;
}
static inline @T@ tn_power_@t@(@T@ a, @T@ b, int *status)
{
    if (b < 0) { *status |= TN_ERR_NEGATIVE_POWER; return 0; }
    @U@ base = (@U@)a, result = 1, e = (@U@)b;
    for (; e; e >>= 1) { if (e & 1) result *= base; base *= base; }
    return (@T@)result;
}
static inline @T@ tn_clip_@t@(@T@ x, @T@ lo, @T@ hi)
{ @T@ t = x > lo ? x : lo; return t < hi ? t : hi; }
"""

_C_INT_UNSIGNED = r"""
static inline @T@ tn_floor_divide_@t@(@T@ a, @T@ b) { return b == 0 ? 0 : (@T@)(a / b); }
static inline @T@ tn_mod_@t@(@T@ a, @T@ b) { return b == 0 ? 0 : (@T@)(a % b); }
static inline @T@ tn_power_@t@(@T@ a, @T@ b, int *status)
{
    (void)status;
    @U@ base = a, result = 1, e = b;
    for (; e; e >>= 1) { if (e & 1) result *= base; base *= base; }
    return (@T@)result;
}
static inline @T@ tn_clip_@t@(@T@ x, @T@ lo, @T@ hi)
{ @T@ t = x > lo ? x : lo; return t < hi ? t : hi; }
"""

# NumPy's npy_divmod / npy_floor_divide / npy_remainder and logaddexp(0, x),
# step for step (the fmod-based quotient is what makes them agree with Python).
_C_FLOAT = r"""
static inline @T@ tn_divmod_@t@(@T@ a, @T@ b, @T@ *modulus)
{
    @T@ mod = fmod@f@(a, b), div, floordiv;
    if (!b) { *modulus = mod; return a / b; }
    div = (a - mod) / b;
    if (mod) {
        if (isless(b, 0) != isless(mod, 0)) { mod += b; div -= 1; }
    } else {
        mod = copysign@f@(0, b);
    }
    if (div) {
        floordiv = floor@f@(div);
        if (isgreater(div - floordiv, (@T@)0.5)) floordiv += 1;
    } else {
        floordiv = copysign@f@(0, a / b);
    }
    *modulus = mod;
    return floordiv;
}
static inline @T@ tn_floor_divide_@t@(@T@ a, @T@ b)
{ @T@ mod; return b ? tn_divmod_@t@(a, b, &mod) : a / b; }
static inline @T@ tn_mod_@t@(@T@ a, @T@ b)
{ @T@ mod; if (!b) return fmod@f@(a, b); tn_divmod_@t@(a, b, &mod); return mod; }
static inline @T@ tn_softplus_@t@(@T@ x)
{
    @T@ tmp;
    if (x == 0) return @LOGE2@;
    tmp = 0 - x;
    if (tmp > 0) return log1p@f@(exp@f@(-tmp));
    if (tmp <= 0) return x + log1p@f@(exp@f@(tmp));
    return tmp;  /* NaN */
}
static inline @T@ tn_clip_@t@(@T@ x, @T@ lo, @T@ hi)
{
    @T@ t = x != x ? x : (x > lo ? x : lo);  /* NaN anywhere propagates */
    return t != t ? t : (t < hi ? t : hi);
}
"""

#: the C helpers the templates call; :mod:`tenure.linkers.c.elemwise` emits it
#: once per module (it is guarded, so twice is harmless)
C_SUPPORT_CODE = _c_support_code()


# --------------------------------------------------------------------------
# The table


#: every scalar op, by name
TABLE: dict[str, ScalarOp] = {}


def _register(name: str, nin: int, impl: Callable, doc: str = "", **c) -> ScalarOp:
    """Add an op; ``c``: its C template(s) (``c=``), and when needed the rule for
    its C computation dtypes (``c_dtypes=``) and Python-number inputs (``weak=``)."""
    op = ScalarOp(name, nin, impl, doc, **c)
    TABLE[name] = op
    return op


# C templates (see ScalarOp.c_code and _expand): keys are dtype kinds of the
# (last) input's computation dtype; b bool, i signed, u unsigned, f float.
# Integer +, -, * wrap in {U} (C signed overflow is undefined); floats are plain C.
_WRAP = "({T})(({U}){0} %s ({U}){1})"
_MAX_F = "({0} > {1} || {0} != {0}) ? {0} : {1}"  # NaN wins; a tie gives {1}, like NumPy's SIMD
_MIN_F = "({0} < {1} || {0} != {0}) ? {0} : {1}"
_ABS_I = "({T})({0} < 0 ? 0u - ({U}){0} : ({U}){0})"
_SIGN_F = "{0} > 0 ? ({T})1 : {0} < 0 ? ({T})-1 : {0} == 0 ? ({T})0 : {0}"  # -0.0 gives +0.0


def _math(name: str) -> dict:
    """A C math function, float loops only (NumPy computes ints in float64, or
    float16 for 8-bit ints); ``expf`` for float32."""
    return {"f": name + "{f}({0})"}


# Arithmetic
add = _register("add", 2, np.add, "x + y", c={"b": "{0} | {1}", "iu": _WRAP % "+",
                                              "f": "{0} + {1}"})
sub = _register("sub", 2, np.subtract, "x - y", c={"iu": _WRAP % "-", "f": "{0} - {1}"})
mul = _register("mul", 2, np.multiply, "x * y", c={"b": "{0} & {1}", "iu": _WRAP % "*",
                                                   "f": "{0} * {1}"})
true_divide = _register("true_divide", 2, np.true_divide, "x / y", c={"f": "{0} / {1}"})
floor_divide = _register("floor_divide", 2, np.floor_divide, "x // y",
                         c="tn_floor_divide_{t}({0}, {1})")
mod = _register("mod", 2, np.remainder, "x % y (sign of y, like Python)", c="tn_mod_{t}({0}, {1})")
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


power = _register("power", 2, np.power, "x ** y", c=_Power(), raises_for="iu")
neg = _register("neg", 1, np.negative, "-x", c={"iu": "({T})(0u - ({U}){0})", "f": "-{0}"})
abs_ = _register("abs", 1, np.absolute, "|x|", c={"bu": "{0}", "i": _ABS_I, "f": "fabs{f}({0})"})
sign = _register("sign", 1, np.sign, "sign of x",
                 c={"i": "({T})(({0} > 0) - ({0} < 0))", "u": "({T})({0} > 0)", "f": _SIGN_F})
square = _register("square", 1, np.square, "x * x", c={"iu": "({T})(({U}){0} * ({U}){0})",
                                                       "f": "{0} * {0}"})
# For ints NumPy casts the double 1.0 / x: 1, -1 or 0 (1 / 0 is inf, cast as documented)
reciprocal = _register("reciprocal", 1, np.reciprocal, "1 / x (integer division for ints, as "
                       "NumPy)", c={"iu": "tn_float_to_{t}(1.0 / {0})", "f": "({T})1 / {0}"})
maximum = _register("maximum", 2, np.maximum, "elementwise max (NaN propagates)",
                    c={"b": "{0} | {1}", "iu": "{0} > {1} ? {0} : {1}", "f": _MAX_F})
minimum = _register("minimum", 2, np.minimum, "elementwise min (NaN propagates)",
                    c={"b": "{0} & {1}", "iu": "{0} < {1} ? {0} : {1}", "f": _MIN_F})
clip = _register("clip", 3, _clip, "x limited to [lo, hi]", c="tn_clip_{t}({0}, {1}, {2})",
                 c_dtypes=_same_as_output, weak="saturate")

# Transcendental
exp = _register("exp", 1, np.exp, c=_math("exp"))
log = _register("log", 1, np.log, c=_math("log"))
log1p = _register("log1p", 1, np.log1p, "log(1 + x), accurate for small x", c=_math("log1p"))
expm1 = _register("expm1", 1, np.expm1, "exp(x) - 1, accurate for small x", c=_math("expm1"))
sqrt = _register("sqrt", 1, np.sqrt, c=_math("sqrt"))
sin = _register("sin", 1, np.sin, c=_math("sin"))
cos = _register("cos", 1, np.cos, c=_math("cos"))
tanh = _register("tanh", 1, np.tanh, c=_math("tanh"))
sigmoid = _register("sigmoid", 1, scipy.special.expit, "1 / (1 + exp(-x))",
                    c={"f": "({T})1 / (({T})1 + exp{f}(-{0}))"})  # SciPy's own formula
softplus = _register("softplus", 1, _softplus, "log(1 + exp(x)), stable",
                     c={"f": "tn_softplus_{t}({0})"}, c_dtypes=_same_as_output)
relu = _register("relu", 1, _relu, "max(x, 0); NaN stays NaN", c_dtypes=_same_as_output,
                 c={"biu": "{0} > 0 ? {0} : ({T})0", "f": "({0} > 0 || {0} != {0}) ? {0} : ({T})0"})
erf = _register("erf", 1, scipy.special.erf, c=_math("erf"))  # C's erf; SciPy's is within ulps

# Comparisons and logic
less = _register("less", 2, np.less, "x < y", c=_Compare("<"), weak="compare")
less_equal = _register("less_equal", 2, np.less_equal, "x <= y", c=_Compare("<="), weak="compare")
greater = _register("greater", 2, np.greater, "x > y", c=_Compare(">"), weak="compare")
greater_equal = _register("greater_equal", 2, np.greater_equal, "x >= y", c=_Compare(">="),
                          weak="compare")
equal = _register("equal", 2, np.equal, "x == y", c=_Compare("=="), weak="compare")
not_equal = _register("not_equal", 2, np.not_equal, "x != y", c=_Compare("!="), weak="compare")
logical_and = _register("logical_and", 2, np.logical_and, c="{0} != 0 && {1} != 0")
logical_or = _register("logical_or", 2, np.logical_or, c="{0} != 0 || {1} != 0")
logical_xor = _register("logical_xor", 2, np.logical_xor, c="({0} != 0) != ({1} != 0)")
logical_not = _register("logical_not", 1, np.logical_not, c="{0} == 0")
bitwise_and = _register("bitwise_and", 2, np.bitwise_and, "x & y", c={"biu": "({T})({0} & {1})"})
bitwise_or = _register("bitwise_or", 2, np.bitwise_or, "x | y", c={"biu": "({T})({0} | {1})"})
bitwise_xor = _register("bitwise_xor", 2, np.bitwise_xor, "x ^ y", c={"biu": "({T})({0} ^ {1})"})
invert = _register("invert", 1, np.invert, "~x", c={"b": "!{0}", "iu": "({T})~{0}"})
isnan = _register("isnan", 1, np.isnan, c={"biu": "0", "f": "{0} != {0}"})
isinf = _register("isinf", 1, np.isinf, c={"biu": "0", "f": "isinf({0}) != 0"})
where = _register("where", 3, _where, "a where cond else b", c="{0} ? {1} : {2}",
                  c_dtypes=_where_dtypes, weak="wrap")
