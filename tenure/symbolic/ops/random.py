"""Random draws: :class:`RandomVariable`, one op for every distribution.

A draw is a pure function of a *generator state*, a small ``uint64`` vector
``[key0, key1, n]``: the Philox4x64-10 counter-based generator's key and the
number of draws made with it.  Draw ``n`` reads Philox's blocks at the
counters ``[1 + b, 0, n, a]`` -- for ``a = 0``, the stream of NumPy's
``Philox(key=[key0, key1], counter=[0, 0, n, 0])`` -- so draws never overlap
however many numbers each takes, and the state after a draw is ``[key0,
key1, n + 1]``.  The op's outputs are that new state and the draw;
:class:`~tenure.random.RandomStream` makes the state a shared variable whose
``default_update`` is the new state, so a function advances it by itself.

``uniform``, ``normal``, ``bernoulli`` and ``integers`` are *counter-indexed*:
element ``i`` (C order) depends on the state and ``i`` alone -- uniform
float64 from word ``i`` (NumPy's ``random()``), float32 from 32-bit half
``i``, normal by Box-Muller on words ``2k, 2k + 1`` (``k = i // 2``), integers
by Lemire's multiply-and-reject on word ``i``, a rejected word followed by
word ``i`` of attempt ``a = 1, 2, ...`` -- so the C runtime
(``linkers/c/include/tenure_philox.h``) and a CUDA kernel compute any element
by itself and agree with this module's NumPy code, the reference.  The
affine parts are in the draw's dtype, the parameters rounded to it first.
``binomial`` with ``n = 1`` everywhere draws the bernoulli numbers;
otherwise ``binomial``, ``choice`` and ``permutation`` run NumPy's sequential
algorithms over the stream (NumPy's ``Generator`` on that Philox).

Because a draw depends on nothing but its inputs, every linker gives the
same numbers (``normal`` to a few ulps where a platform's ``log``, ``sin``
or ``cos`` differs), a checking linker can run a node twice, and merging two
equal draw nodes is right.

``inplace=True`` (the in-place rewrite, where the state is a shared variable
the function updates) writes the new state into the state's own buffer;
a draw is written into last call's buffer when it fits, so with a borrowed
output a call allocates nothing but small temporaries (the reference draws
:data:`CHUNK` elements at a time; the C runtime and the kernels none).

Errors are raised before anything is written: a parameter out of its
domain (a negative scale, ``p`` outside [0, 1], ``high < low``), a size that
is negative or that a parameter does not broadcast to, a bad state; each
names the parameter, what was expected and what came.

Gradients: ``normal`` and ``uniform`` are reparameterized (``loc + scale *
z``, ``low + (high - low) * u``, with ``z``/``u`` the standard draw of the
same state, which the op computes again with ``standard=True``); other
distributions raise a :class:`NotDifferentiableError` naming the parameter.
"""

from __future__ import annotations

import operator
from typing import Callable, NamedTuple

import numpy as np

from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.ops.creation import _dims_of
from tenure.symbolic.ops.elemwise import broadcast_static_shapes, broadcast_symbolic_shapes
from tenure.symbolic.ops.shape import as_dim
from tenure.symbolic.types import TensorType, normalize_dtype
from tenure.symbolic.variable import TensorConstant, as_tensor_variable

__all__ = ["CHUNK", "NotDifferentiableError", "RandomVariable", "STATE_LENGTH", "STATE_TYPE",
           "bounded_integers", "check_state", "initial_state", "perform_on_device",
           "random_variable", "single_trial", "standard_normal", "standard_uniform"]

#: the generator state: Philox's key (2 words) and the draw counter
STATE_LENGTH = 3
STATE_TYPE = TensorType("uint64", (STATE_LENGTH,))


class NotDifferentiableError(TypeError):
    """A gradient asked through a draw that has no reparameterization."""


def initial_state(seed: int, stream: int) -> np.ndarray:
    """The state of stream number ``stream`` seeded with ``seed``: a key
    derived from both by NumPy's ``SeedSequence``, counter 0."""
    key = np.random.SeedSequence(seed, spawn_key=(stream,)).generate_state(2, np.uint64)
    return np.array([key[0], key[1], 0], dtype=np.uint64)


def _generator(state: np.ndarray) -> np.random.Generator:
    counter = np.array([0, 0, state[2], 0], dtype=np.uint64)
    return np.random.Generator(np.random.Philox(key=state[:2].copy(), counter=counter))


# --------------------------------------------------------------------------
# Distributions: parameter names, checks, the draw


def _bad(dist: str, name: str, expected: str, value) -> ValueError:
    value = np.asarray(value)
    shown = value.item() if value.size == 1 else value.tolist() if value.size <= 8 else \
        f"an array of shape {value.shape}"
    return ValueError(f"{dist}: parameter {name!r} must be {expected}, got {shown}")


def _require(dist: str, name: str, value, ok, expected: str) -> None:
    """Raise naming ``name`` where the boolean array ``ok`` is False anywhere."""
    ok = np.asarray(ok)
    if not ok.all():
        value = np.asarray(value)
        bad = value if ok.ndim == 0 else np.broadcast_to(value, ok.shape)[~ok]
        raise _bad(dist, name, expected, bad[0] if bad.ndim else bad)


def _check_uniform(p):
    low, high = p
    _require("uniform", "low", low, np.isfinite(low), "finite")
    _require("uniform", "high", high, np.isfinite(high), "finite")
    _require("uniform", "high", high, np.greater_equal(high, low), ">= low")


def _check_normal(p):
    loc, scale = p
    _require("normal", "loc", loc, np.isfinite(loc), "finite")
    _require("normal", "scale", scale, np.greater_equal(scale, 0) & np.isfinite(scale),
             "finite and >= 0")


def _check_p(dist, p):
    _require(dist, "p", p, (np.greater_equal(p, 0) & np.less_equal(p, 1)),
             "a probability in [0, 1]")


def _check_bernoulli(p):
    _check_p("bernoulli", p[0])


def _check_binomial(p):
    n, prob = p
    _require("binomial", "n", n, np.greater_equal(n, 0), ">= 0")
    _check_p("binomial", prob)


def _check_integers(p):
    low, high = p
    _require("integers", "high", high, np.greater(high, low), "greater than low (high is "
             "excluded)")


# The counter-indexed draws (uniform, normal, bernoulli, integers): element
# i of a draw is a function of the state and i alone (see the module doc and
# linkers/c/include/tenure_philox.h, which the C runtime and the CUDA kernels
# compute the same numbers with).  Written here with NumPy's own Philox.

#: 2**-53: a 53-bit integer to a double in [0, 1)
_TO_UNIT = 2.0 ** -53
#: 2 pi as the C code writes it
_TWO_PI = 6.283185307179586
_LOW32 = np.uint64(0xFFFFFFFF)
#: elements drawn at a time: the temporaries of a chunk stay a few kB, so a
#: draw into last call's buffer allocates no memory that grows with it
CHUNK = 4096


def _words(state: np.ndarray, start: int, count: int, attempt: int = 0) -> np.ndarray:
    """Words ``start .. start + count - 1`` (``start`` a multiple of 4) of the
    draw's stream at ``attempt``: Philox's blocks at ``[1 + b, 0, n, attempt]``."""
    counter = np.array([start // 4, 0, state[2], attempt], dtype=np.uint64)
    return np.random.Philox(key=state[:2].copy(), counter=counter).random_raw(count)


def _halves(state: np.ndarray, start: int, count: int) -> np.ndarray:
    """32-bit halves ``start ..`` (``start`` a multiple of 8): word j's low
    half, then its high half."""
    words = _words(state, start // 2, (count + 1) // 2)
    halves = np.empty(2 * len(words), np.uint64)
    halves[0::2], halves[1::2] = words & _LOW32, words >> np.uint64(32)
    return halves[:count]


def standard_uniform(state: np.ndarray, start: int, count: int, dtype) -> np.ndarray:
    """Elements ``start ..`` of a uniform draw in [0, 1) of ``dtype``:
    float64 from a word's top 53 bits, float32 from a half's top 24, float16
    from its top 11 (each exact, so never 1)."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return (_words(state, start, count) >> np.uint64(11)).astype(np.float64) * _TO_UNIT
    bits = 24 if dtype == np.float32 else 11
    top = (_halves(state, start, count) >> np.uint64(32 - bits)).astype(dtype)
    return top * np.asarray(2.0 ** -bits, dtype)


def standard_normal(state: np.ndarray, start: int, count: int) -> np.ndarray:
    """Elements ``start ..`` (``start`` a multiple of 4) of a standard normal
    draw, in float64: Box-Muller on the word pairs ``2k, 2k + 1`` (elements
    ``2k`` and ``2k + 1``: element ``i`` reads words ``i - i % 2`` and the next)."""
    pairs = (count + 1) // 2
    words = _words(state, start, 2 * pairs)
    u1 = ((words[0::2] >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * _TO_UNIT
    u2 = (words[1::2] >> np.uint64(11)).astype(np.float64) * _TO_UNIT
    r = np.sqrt(-2.0 * np.log(u1))
    theta = _TWO_PI * u2
    z = np.empty(2 * pairs)
    z[0::2], z[1::2] = r * np.cos(theta), r * np.sin(theta)
    return z[:count]


def _mulhilo(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(high, low)`` words of the 128-bit products of uint64 arrays."""
    shift = np.uint64(32)
    a_lo, a_hi, b_lo, b_hi = a & _LOW32, a >> shift, b & _LOW32, b >> shift
    cross1, cross2 = a_lo * b_hi, a_hi * b_lo
    middle = ((a_lo * b_lo) >> shift) + (cross1 & _LOW32) + (cross2 & _LOW32)
    high = a_hi * b_hi + (cross1 >> shift) + (cross2 >> shift) + (middle >> shift)
    return high, a * b


def bounded_integers(state: np.ndarray, start: int, low: np.ndarray,
                     high: np.ndarray) -> np.ndarray:
    """Elements ``start ..`` of an integer draw in ``[low, high)`` (int64
    vectors, high > low): Lemire's multiply and reject, a rejected element
    taking its word of the next attempt."""
    low = low.astype(np.uint64)
    span = high.astype(np.uint64) - low
    top, bottom = _mulhilo(_words(state, start, len(span)), span)
    threshold = (~span + np.uint64(1)) % span
    for i in np.flatnonzero(bottom < threshold):       # about span / 2**64 of them
        word, attempt = start + int(i), 0
        while bottom[i] < threshold[i]:
            attempt += 1
            block = _words(state, word - word % 4, 4, attempt)
            top[i:i + 1], bottom[i:i + 1] = _mulhilo(block[word % 4:word % 4 + 1],
                                                     span[i:i + 1])
    return (low + top).view(np.int64)


def _in_chunks(out: np.ndarray, params, fill: Callable) -> None:
    """``fill(start, count, params) -> values`` for each chunk of ``out``
    (C-contiguous), the parameters as 0-d arrays or that chunk's elements."""
    flat = out.reshape(-1)
    whole = [p.reshape(()) if p.size == 1 else np.broadcast_to(p, out.shape).reshape(-1)
             for p in params]
    for start in range(0, flat.size, CHUNK):
        stop = min(start + CHUNK, flat.size)
        chunk = [p if p.ndim == 0 else p[start:stop] for p in whole]
        np.copyto(flat[start:stop], fill(start, stop - start, chunk), casting="unsafe")


def _draw_uniform(state, params, out, standard):
    dtype = out.dtype

    def fill(start, count, chunk):
        u = standard_uniform(state, start, count, dtype)
        if not standard:
            low, high = chunk
            np.multiply(u, np.subtract(high, low), out=u)
            np.add(u, low, out=u)
        return u
    _in_chunks(out, [np.asarray(p, dtype) for p in params], fill)


def _draw_normal(state, params, out, standard):
    dtype = out.dtype

    def fill(start, count, chunk):
        z = standard_normal(state, start, count).astype(dtype)
        if not standard:
            loc, scale = chunk
            np.multiply(z, scale, out=z)
            np.add(z, loc, out=z)
        return z
    _in_chunks(out, [np.asarray(p, dtype) for p in params], fill)


def _draw_bernoulli(state, params, out, standard):
    _in_chunks(out, [np.asarray(params[0])], lambda start, count, chunk: np.less(
        standard_uniform(state, start, count, np.float64), chunk[0]))


def _draw_integers(state, params, out, standard):
    def fill(start, count, chunk):
        low, high = (np.broadcast_to(p, (count,)) for p in chunk)
        return bounded_integers(state, start, low, high)
    _in_chunks(out, [np.asarray(p, np.int64) for p in params], fill)


def single_trial(node) -> bool:
    """Whether ``node`` draws ``binomial`` with ``n`` a constant 1 (one
    element): the bernoulli numbers, which the C runtime and the CUDA
    kernels compute too."""
    op = node.op
    if not isinstance(op, RandomVariable) or op.dist != "binomial":
        return False
    n = node.inputs[1 + (op.n_size or 0)]
    return isinstance(n, TensorConstant) and np.size(n.data) == 1 and np.all(n.data == 1)


def _draw_binomial(state, params, out, standard):
    n, p = params
    if np.all(np.equal(n, 1)):
        # One trial: the bernoulli numbers (counter-indexed, as every linker draws them).
        _draw_bernoulli(state, [p], out, standard)
        return
    # In chunks from one generator: the numbers of one draw of the whole (each
    # element takes the stream where the last left it), without its temporary.
    generator = _generator(state)
    _in_chunks(out, [np.asarray(n, np.int64), np.asarray(p, np.float64)],
               lambda start, count, chunk: generator.binomial(*chunk, size=count))


def _check_choice(params, shape, replace):
    a = params[0]
    population = int(a) if a.ndim == 0 else a.shape[0]
    n = int(np.prod(shape, dtype=np.int64))
    if a.ndim == 0 and population < 1 and n:
        raise _bad("choice", "a", "a positive integer (the population size)", a)
    if a.ndim == 1 and population == 0 and n:
        raise ValueError("choice: parameter 'a' must not be empty when samples are taken, "
                         "got an array of shape (0,)")
    if len(params) == 2:
        p = params[1]
        if p.shape != (population,):
            raise ValueError(f"choice: parameter 'p' must have one probability per element "
                             f"of a (shape ({population},)), got shape {p.shape}")
        _check_p("choice", p)
        # summed in order (cumsum's last), as the C runtime sums: the same float
        total = float(np.cumsum(p, dtype=np.float64)[-1]) if population else 0.0
        if population and not abs(total - 1.0) <= np.sqrt(np.finfo(np.float64).eps):
            raise ValueError(f"choice: parameter 'p' must sum to 1, got a sum of {total!r}")
        if not replace and n > np.count_nonzero(p):
            raise ValueError(f"choice: size {tuple(shape)} asks for {n} samples without "
                             f"replacement, but parameter 'p' gives only "
                             f"{np.count_nonzero(p)} element(s) a nonzero probability")
    if not replace and n > population:
        raise ValueError(f"choice: size {tuple(shape)} asks for {n} samples without "
                         f"replacement from parameter 'a', which has only {population}")


def _draw_choice(state, params, out, standard, replace=True):
    a = params[0]
    p = params[1] if len(params) == 2 else None
    population = int(a) if a.ndim == 0 else a
    np.copyto(out, _generator(state).choice(population, size=out.shape, replace=replace, p=p),
              casting="unsafe")


def _draw_permutation(state, params, out, standard):
    (x,) = params
    np.copyto(out, _generator(state).permutation(int(x) if x.ndim == 0 else x), casting="unsafe")


class Distribution(NamedTuple):
    #: parameter names, in input order
    params: tuple[str, ...]
    #: ``check(params)``: ValueError naming a parameter out of its domain
    check: Callable | None
    #: ``draw(state, params, out, standard)`` into ``out``
    draw: Callable
    #: "float", "int" or "any": the dtypes a draw may have
    kind: str
    #: whether parameters broadcast with ``size`` (False: choice, permutation)
    elementwise: bool = True


DISTRIBUTIONS: dict[str, Distribution] = {
    "uniform": Distribution(("low", "high"), _check_uniform, _draw_uniform, "float"),
    "normal": Distribution(("loc", "scale"), _check_normal, _draw_normal, "float"),
    "binomial": Distribution(("n", "p"), _check_binomial, _draw_binomial, "any"),
    "bernoulli": Distribution(("p",), _check_bernoulli, _draw_bernoulli, "any"),
    "integers": Distribution(("low", "high"), _check_integers, _draw_integers, "int"),
    "choice": Distribution(("a", "p"), None, _draw_choice, "any", elementwise=False),
    "permutation": Distribution(("x",), None, _draw_permutation, "any", elementwise=False),
}

#: the distributions whose draws have gradients (reparameterized)
REPARAMETERIZED = ("uniform", "normal")


# --------------------------------------------------------------------------
# The op


class RandomVariable(Op):
    """One draw of ``dist``: inputs ``[state, *size dims, *params]``, outputs
    ``[new state, draw]``.

    ``n_size``: the number of size dims (None: the shape comes from the
    parameters: their broadcast shape for elementwise distributions, ``()``
    for ``choice``, the permuted length or shape for ``permutation``).
    ``replace``: ``choice`` only.  ``standard=True`` draws the standard
    variate (``uniform(0, 1)``, ``normal(0, 1)``) of the same shape and state
    (the gradient's ``u``/``z``).  ``inplace=True`` writes the new state into
    the state's buffer (``destroy_map = {0: [0]}``).
    """

    __props__ = ("dist", "dtype", "n_size", "replace", "standard", "inplace")

    def __init__(self, dist: str, dtype: str, n_size: int | None = None,
                 replace: bool | None = None, standard: bool = False, inplace: bool = False):
        if dist not in DISTRIBUTIONS:
            raise ValueError(f"RandomVariable: unknown distribution {dist!r}; expected one of "
                             f"{', '.join(DISTRIBUTIONS)}")
        self.dist = dist
        self.dtype = normalize_dtype(dtype, what=dist)
        self.n_size = None if n_size is None else operator.index(n_size)
        self.replace = None if replace is None else bool(replace)
        self.standard = bool(standard)
        self.inplace = bool(inplace)
        self.destroy_map = {0: [0]} if self.inplace else {}

    @property
    def spec(self) -> Distribution:
        return DISTRIBUTIONS[self.dist]

    def clone(self, **changes) -> RandomVariable:
        props = {name: getattr(self, name) for name in self.__props__}
        props.update(changes)
        return RandomVariable(**props)

    def __str__(self) -> str:
        extra = "".join(f", {name}" for name in ("standard", "inplace") if getattr(self, name))
        return f"RandomVariable{{{self.dist}, {self.dtype}{extra}}}"

    # -- building ------------------------------------------------------------

    def make_node(self, state, *rest):
        state = as_tensor_variable(state)
        if not STATE_TYPE.is_compatible_replacement(state.type):
            raise TypeError(f"{self.dist}: the generator state must be a uint64 vector of "
                            f"length {STATE_LENGTH} ({STATE_TYPE}), got {state} "
                            f"({state.type})")
        k = self.n_size or 0
        dims = [as_tensor_variable(d) for d in rest[:k]]
        for i, d in enumerate(dims):
            if d.ndim != 0 or d.type.numpy_dtype.kind not in "iu":
                raise TypeError(f"{self.dist}: size[{i}] must be a 0-d integer, got {d} "
                                f"({d.type})")
        params = [as_tensor_variable(p) for p in rest[k:]]
        names = self.spec.params
        if not (len(params) == len(names) or (self.dist == "choice" and len(params) == 1)):
            raise TypeError(f"{self.dist}: expected the parameters {', '.join(names)}, got "
                            f"{len(params)} value(s)")
        out_shape = self._static_shape(dims, params)
        if self.spec.check is not None and not self.standard and all(
                isinstance(p, TensorConstant) for p in params):
            self.spec.check([np.asarray(p.data) for p in params])
        out = TensorType(self.dtype, out_shape)()
        return Apply(self, [state, *dims, *params], [STATE_TYPE(), out])

    def _static_shape(self, dims, params) -> tuple:
        size = None if self.n_size is None else tuple(
            int(d.data) if isinstance(d, TensorConstant) else None for d in dims)
        if self.dist == "permutation":
            (x,) = params
            if x.ndim == 0:
                return (int(x.data),) if isinstance(x, TensorConstant) else (None,)
            return x.type.shape
        if not self.spec.elementwise:
            return () if size is None else size
        shapes = [p.type.shape for p in params]
        if size is None:
            return broadcast_static_shapes(shapes, what=self.dist)
        for name, shape in zip(self.spec.params, shapes):
            if len(shape) > len(size) or any(
                    s not in (None, 1) and d is not None and s != d
                    for s, d in zip(shape[::-1], size[::-1])):
                raise ValueError(f"{self.dist}: parameter {name!r} of shape "
                                 f"{_shape_str(shape)} does not broadcast to size "
                                 f"{_shape_str(size)}")
        return size

    def infer_shape(self, node, input_shapes):
        k = self.n_size or 0
        params = node.inputs[1 + k:]
        param_shapes = input_shapes[1 + k:]
        if self.n_size is not None:
            dims = tuple(as_dim(d) for d in node.inputs[1:1 + k])
        elif self.dist == "permutation":
            x = params[0]
            dims = (as_dim(x),) if x.ndim == 0 else tuple(param_shapes[0])
        elif not self.spec.elementwise:
            dims = ()
        else:
            dims = broadcast_symbolic_shapes(node.outputs[1].type.shape, param_shapes,
                                             [p.type.shape for p in params])
        return [(STATE_LENGTH,), dims]

    # -- running -------------------------------------------------------------

    def _check_size(self, size: tuple, params) -> None:
        for i, d in enumerate(size):
            if d < 0:
                raise ValueError(f"{self.dist}: size must hold lengths >= 0, got "
                                 f"size[{i}] = {d} (size {size})")
        if self.spec.elementwise:
            for name, p in zip(self.spec.params, params):
                try:
                    fits = np.broadcast_shapes(np.shape(p), size) == size
                except ValueError:
                    fits = False
                if not fits:
                    raise ValueError(f"{self.dist}: parameter {name!r} of shape "
                                     f"{np.shape(p)} does not broadcast to size {size}")

    def _check_values(self, params, shape: tuple) -> None:
        """The parameters' domains (ValueError naming the parameter)."""
        if self.dist == "choice":
            _check_choice(params, shape, self.replace)
        elif self.spec.check is not None and not self.standard:
            self.spec.check(params)

    def check_shapes(self, node, input_shapes, output_shapes) -> bool:
        """A draw whose parameters are constants (checked when it was built)
        fails only on shapes: checked here, so that a call need not back up
        the state it advances in place; with symbolic parameters it may
        fail on their values (False)."""
        params = node.inputs[1 + (self.n_size or 0):]
        if not all(isinstance(p, TensorConstant) for p in params):
            return False
        values = [np.asarray(p.data) for p in params]
        shape = tuple(output_shapes[1])
        if self.n_size is not None:
            self._check_size(shape, values)
        self._check_values(values, shape)
        return True

    def draw_shape(self, dims, params) -> tuple:
        """The draw's shape for these size lengths and parameters (anything
        with a ``shape``: a device's arrays too), checked against each other
        but not the parameters' values (ValueError naming what is wrong)."""
        if self.n_size is not None:
            size = tuple(int(d) for d in dims)
            self._check_size(size, params)
            return size
        if self.dist == "permutation":
            x = params[0]
            if x.ndim == 0:
                if int(x) < 0:
                    raise _bad("permutation", "x", "a length >= 0 (or an array)", x)
                return (int(x),)
            return x.shape
        if not self.spec.elementwise:
            return ()
        try:
            return np.broadcast_shapes(*(np.shape(p) for p in params))
        except ValueError:
            shapes = ", ".join(f"{n} {np.shape(p)}" for n, p in zip(self.spec.params, params))
            raise ValueError(f"{self.dist}: the parameters' shapes do not broadcast together: "
                             f"{shapes}") from None

    def checked_shape(self, dims, params) -> tuple:
        """The draw's shape for these size lengths and parameters (arrays),
        once every check of them has passed (ValueError naming what is wrong)."""
        shape = self.draw_shape(dims, params)
        self._check_values(params, shape)
        return shape

    def perform(self, node, inputs, output_storage):
        state = inputs[0]
        k = self.n_size or 0
        dims, params = inputs[1:1 + k], [np.asarray(p) for p in inputs[1 + k:]]
        check_state(state, self.dist)
        # Every check before anything is written: a call that raises here
        # has changed no buffer (the state included).
        shape = self.checked_shape(dims, params)
        dtype = node.outputs[1].type.numpy_dtype
        cell = output_storage[1]
        if not (isinstance(cell[0], np.ndarray) and cell[0].shape == shape
                and cell[0].dtype == dtype and cell[0].flags.writeable
                and cell[0].flags.c_contiguous
                and not any(np.may_share_memory(cell[0], v) for v in inputs
                            if isinstance(v, np.ndarray))):
            cell[0] = np.empty(shape, dtype)
        if self.dist == "choice":
            _draw_choice(state, params, cell[0], self.standard, self.replace)
        else:
            self.spec.draw(state, params, cell[0], self.standard)
        output_storage[0][0] = self._advanced(state, output_storage[0][0])

    def _advanced(self, state: np.ndarray, buffer) -> np.ndarray:
        """The state after this draw: into ``state`` itself when in place,
        else into last call's buffer when it is not ``state``'s memory."""
        if self.inplace:
            new = state
        elif (isinstance(buffer, np.ndarray) and buffer.shape == state.shape
              and buffer.dtype == state.dtype and buffer.flags.writeable
              and not np.may_share_memory(buffer, state)):
            new = buffer
            new[...] = state
        else:
            new = state.copy()
        new[2] += np.uint64(1)
        return new

    def grad(self, inputs, output_grads):
        from tenure.symbolic.ops.reduce import sum_to
        k = self.n_size or 0
        params = inputs[1 + k:]
        gz = output_grads[1]
        none = [None] * (1 + k)
        if self.dist not in REPARAMETERIZED or self.standard:
            names = [n for n, p in zip(self.spec.params, params)
                     if p.type.numpy_dtype.kind in "fc"]
            raise NotDifferentiableError(
                f"grad: a {self.dist} draw has no gradient with respect to its parameters "
                f"({', '.join(names) or 'none are float'}): only normal and uniform draws are "
                "reparameterized; cut the path with tn.stop_gradient(draw) if the draw is "
                "meant as a constant")
        if gz is None:
            return none + [None] * len(params)
        standard = self.clone(standard=True, inplace=False)(*inputs)[1]
        if self.dist == "normal":
            g_first, g_second = gz, gz * standard                     # loc, scale
        else:
            g_first, g_second = gz * (1 - standard), gz * standard    # low, high
        return none + [sum_to(g_first, params[0]), sum_to(g_second, params[1])]


def check_state(state, dist: str, is_array: Callable | None = None) -> None:
    """ValueError unless ``state`` is a generator state: a uint64 array of
    shape (3,) -- a NumPy one, or one ``is_array`` accepts (a device's)."""
    array = is_array(state) if is_array is not None else isinstance(state, np.ndarray)
    if not (array and tuple(state.shape) == (STATE_LENGTH,) and state.dtype == np.uint64):
        got = (f"shape {tuple(state.shape)}, dtype {state.dtype}" if array
               else type(state).__name__)
        raise ValueError(f"{dist}: the generator state must be a uint64 array of shape "
                         f"({STATE_LENGTH},), got {got}")


def _shape_str(shape) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + \
        ("," if len(shape) == 1 else "") + ")"


def random_variable(dist: str, state, params, size=None, dtype=None, replace=None):
    """The node's ``(new state, draw)`` for a draw of ``dist`` from ``state``
    (see :class:`~tenure.random.RandomStream` for the user-facing calls)."""
    spec = DISTRIBUTIONS[dist]
    params = [as_tensor_variable(p) for p in params]
    if dtype is None:
        if spec.kind == "float":
            dtype = normalize_dtype(None)
        elif dist in ("choice", "permutation") and params[0].ndim > 0:
            dtype = params[0].dtype
        else:
            dtype = "int64"
    dtype = normalize_dtype(dtype, what=f"{dist}: dtype")
    kind = np.dtype(dtype).kind
    if spec.kind == "float" and kind != "f":
        raise TypeError(f"{dist}: dtype must be a float dtype, got {dtype}")
    if spec.kind == "int" and kind not in "iu":
        raise TypeError(f"{dist}: dtype must be an integer dtype, got {dtype}")
    for name, p in zip(spec.params, params):
        if p.type.numpy_dtype.kind not in "biuf":
            raise TypeError(f"{dist}: parameter {name!r} must be a real number or array, got "
                            f"{p} ({p.type})")
    if dist in ("integers", "binomial") or (dist == "choice" and params[0].ndim == 0) or (
            dist == "permutation" and params[0].ndim == 0):
        for name, p in zip(spec.params, params):
            if name in ("low", "high", "n", "a", "x") and p.type.numpy_dtype.kind not in "iu":
                raise TypeError(f"{dist}: parameter {name!r} must be an integer, got {p} "
                                f"({p.type})")
    if dist == "choice":
        if params[0].ndim > 1:
            raise TypeError(f"choice: parameter 'a' must be an int or a vector, got "
                            f"{params[0]} ({params[0].type})")
        if len(params) == 2 and params[1].ndim != 1:
            raise TypeError(f"choice: parameter 'p' must be a vector, got {params[1]} "
                            f"({params[1].type})")
    if dist == "permutation" and size is not None:
        raise TypeError("permutation: takes no size (the draw has x's length or shape)")
    dims = () if size is None else _dims_of(size, f"{dist}: size")
    op = RandomVariable(dist, dtype, None if size is None else len(dims), replace=replace)
    return op(state, *dims, *params)


def perform_on_device(node, inputs, cells, runtime) -> None:
    """The CUDA linker's draws without a kernel (``binomial``, ``choice``,
    ``permutation``, array parameters: see :mod:`tenure.linkers.cuda.random`):
    the draw made on the host by :meth:`RandomVariable.perform` -- the same
    numbers as every other linker -- and written into the device buffers: the
    state's own when in place, last call's draw buffer when it fits (no
    device allocation in steady state)."""
    to_host = [runtime.to_host(v) if runtime.is_device_array(v) else v for v in inputs]
    host_cells = [[None], [None]]
    node.op.perform(node, to_host, host_cells)
    new_state, draw = host_cells[0][0], host_cells[1][0]
    if node.op.inplace:
        runtime.copy_into(inputs[0], new_state)
        cells[0][0] = inputs[0]
    else:
        cells[0][0] = runtime.from_host(new_state)
    old = cells[1][0]
    if (runtime.is_device_array(old) and tuple(old.shape) == draw.shape
            and old.dtype == draw.dtype and old.flags.c_contiguous):
        runtime.copy_into(old, draw)
    else:
        cells[1][0] = runtime.from_host(np.asarray(draw, order="C"))   # (0-d stays 0-d)
