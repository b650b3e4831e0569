"""Random graphs over chunked arrays, for the differential tests of the dask
linker (test_differential.py): a hypothesis strategy drawing the lengths of
the inputs' axes, a graph over them (elementwise chains with broadcasting,
reductions over any axes, ``dot``/``matmul``/``tensordot``/``outer``,
contractions over the rows ``x.T @ e``, reshapes, transposes, indexing,
joins, ops along an axis), optionally the gradients of a scalar loss built
from it, and a chunking of every input.

A graph is a :class:`Recipe`: steps naming an op and the earlier terms it
reads, independent of the lengths (the graph reads them from its inputs'
shapes), so that one compiled function serves every example drawing the same
recipe; the lengths only decide which steps are possible.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
from hypothesis import strategies as st

import tenure as tn

#: the inputs every graph may read: name, axes (in lengths ``n``, ``m``, ``k``), chunked
INPUTS = (("X", "nm"), ("Z", "nm"), ("v", "m"), ("u", "n"), ("W", "mk"))
#: the shared variable every graph may read (one chunk: a shared value is not cut)
SHARED = ("w", "m")
#: the 0-d input (stays a NumPy value in the dask linker)
SCALAR = "s"


class Op(NamedTuple):
    """A step kind: ``shape(shapes) -> shape`` (None where it does not apply to
    operands of ``shapes``) and ``build(*variables) -> variable``."""

    arity: int
    shape: Callable
    build: Callable


def _same(*shapes):
    return shapes[0]


def _broadcast(a, b):
    try:
        out = np.broadcast_shapes(a, b)
    except ValueError:
        return None
    return out if len(out) <= 2 else None


def _reduce_shape(axis, keepdims):
    def shape(a):
        if axis is not None and (len(a) == 0 or max(np.atleast_1d(axis)) >= len(a)):
            return None
        if len(a) == 0:
            return None
        axes = range(len(a)) if axis is None else np.atleast_1d(axis)
        return tuple(1 if i in axes else n for i, n in enumerate(a)) if keepdims \
            else tuple(n for i, n in enumerate(a) if i not in axes)
    return shape


def _dot_shape(a, b):
    if not (1 <= len(a) <= 2 and 1 <= len(b) <= 2) or a[-1] != b[0]:
        return None
    return a[:-1] + b[1:]


def _contraction_shape(a, b):
    """``a.T @ b`` summing over the rows of both."""
    if len(a) != 2 or not 1 <= len(b) <= 2 or a[0] != b[0]:
        return None
    return a[1:] + b[1:]


def _tensordot_shape(a, b):
    """Over ``a``'s last axis and ``b``'s first."""
    if not (a and b) or a[-1] != b[0] or len(a) + len(b) - 2 > 2:
        return None
    return a[:-1] + b[1:]


def _sliced(index):
    def shape(a):
        if len(a) < len(index):
            return None
        out = []
        for n, part in zip(a, index):
            if isinstance(part, int):
                continue
            if n < 2:
                return None
            out.append(len(range(n)[part]))
        return tuple(out) + a[len(index):]
    return shape


def _when(predicate, shape):
    return lambda *s: shape(*s) if predicate(*s) else None


UNARY = {
    "tanh": tn.tanh, "sin": tn.sin, "sigmoid": tn.sigmoid, "square": tn.square,
    "affine": lambda x: x * 1.5 + 0.25, "exp_tanh": lambda x: tn.exp(tn.tanh(x)),
}
BINARY = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "sub": lambda a, b: a - b,
          "maximum": tn.maximum}
REDUCTIONS = ("sum", "mean", "max", "min", "prod")

OPS: dict[str, Op] = {}
#: the op names of each family (a step draws a family, then one of its ops)
FAMILIES: dict[str, list[str]] = {}


def _add(family: str, name: str, op: Op) -> None:
    OPS[name] = op
    FAMILIES.setdefault(family, []).append(name)


def _reduction(fn, axis, keep) -> Op:
    def build(x):
        return getattr(tn, fn)(x, axis=axis, keepdims=keep)

    def shape(a):
        if axis == -1:   # as the graph reads it: the last axis
            return _reduce_shape(len(a) - 1, keep)(a) if a else None
        return _reduce_shape(axis, keep)(a)
    return Op(1, shape, build)


for _name, _fn in UNARY.items():
    _add("unary", _name, Op(1, _same, _fn))
for _name, _fn in BINARY.items():
    _add("binary", _name, Op(2, _broadcast, _fn))
for _fn in REDUCTIONS:
    for _axis in (None, 0, 1, -1, (0, 1)):
        for _keep in (False, True):
            _add("reduce", f"{_fn}{_axis}{'k' if _keep else ''}", _reduction(_fn, _axis, _keep))
for _family, _name, _op in [
    ("shape", "column", Op(1, _when(lambda a: len(a) == 1, lambda a: a + (1,)),
                           lambda x: x.dimshuffle(0, "x"))),
    ("product", "dot", Op(2, _dot_shape, tn.dot)),
    ("product", "matmul", Op(2, _dot_shape, tn.matmul)),
    ("product", "rows", Op(2, _contraction_shape, lambda a, b: a.T @ b)),
    ("product", "tensordot", Op(2, _tensordot_shape, lambda a, b: tn.tensordot(a, b, axes=1))),
    ("product", "tensordot2", Op(2, _when(lambda a, b: len(a) == 2 and a == b, lambda a, b: ()),
                                 lambda a, b: tn.tensordot(a, b, axes=2))),
    ("product", "outer", Op(2, _when(lambda a, b: len(a) == 1 and len(b) == 1,
                                     lambda a, b: a + b), tn.outer)),
    ("shape", "transpose", Op(1, _when(lambda a: len(a) == 2, lambda a: a[::-1]),
                              lambda x: x.T)),
    ("shape", "flatten", Op(1, _when(lambda a: len(a) == 2, lambda a: (a[0] * a[1],)),
                            lambda x: x.reshape((-1,)))),
    ("shape", "reshape_swap", Op(1, _when(lambda a: len(a) == 2, lambda a: a[::-1]),
                                 lambda x: x.reshape((x.shape[1], x.shape[0])))),
    ("index", "tail", Op(1, _sliced((slice(1, None),)), lambda x: x[1:])),
    ("index", "even", Op(1, _sliced((slice(None, None, 2),)), lambda x: x[::2])),
    ("index", "first", Op(1, _when(lambda a: len(a) >= 1, lambda a: a[1:]), lambda x: x[0])),
    ("index", "cols_tail", Op(1, _sliced((slice(None), slice(None, -1))),
                              lambda x: x[:, :-1])),
    ("index", "last_col", Op(1, _when(lambda a: len(a) == 2, lambda a: a[:1]),
                             lambda x: x[:, -1])),
    ("index", "pick", Op(1, _when(lambda a: len(a) >= 1 and a[0] >= 2, lambda a: (3,) + a[1:]),
                         lambda x: x[np.array([1, 0, 1])])),
    ("join", "concat", Op(2, _when(lambda a, b: a and len(a) == len(b) and a[1:] == b[1:],
                                   lambda a, b: (a[0] + b[0],) + a[1:]),
                          lambda a, b: tn.concatenate([a, b], axis=0))),
    ("along", "softmax", Op(1, _when(lambda a: len(a) >= 1, _same),
                            lambda x: tn.softmax(x, axis=-1))),
    ("along", "logsumexp", Op(1, _when(lambda a: len(a) >= 1, lambda a: a[:-1]),
                              lambda x: tn.logsumexp(x, axis=-1))),
    ("along", "cumsum", Op(1, _when(lambda a: len(a) >= 1, _same),
                           lambda x: tn.cumsum(x, axis=0))),
]:
    _add(_family, _name, _op)
FAMILY_OF = {name: family for family, names in FAMILIES.items() for name in names}
OP_NAMES = tuple(OPS)


class Recipe(NamedTuple):
    """Steps ``(op name, term indices)`` over the terms (the inputs first,
    then each step's result); ``outputs`` (term indices) or, with ``loss``,
    the gradients of ``loss`` (``"sum"`` or ``"mean"`` of the last term) with
    respect to every input, and the loss."""

    steps: tuple
    outputs: tuple
    loss: str | None

    def build(self):
        """``(inputs, shared, outputs)``: the symbolic graph."""
        inputs = [(tn.vector if len(axes) == 1 else tn.matrix)(name) for name, axes in INPUTS]
        shared = tn.shared(np.zeros(1), name=SHARED[0])
        scalar = tn.scalar(SCALAR)
        terms = inputs + [shared, scalar]
        for name, operands in self.steps:
            terms.append(OPS[name].build(*[terms[i] for i in operands]))
        if self.loss is None:
            return inputs + [scalar], shared, [terms[i] for i in self.outputs]
        loss = getattr(tn, self.loss)(terms[-1])
        grads = tn.grad(loss, inputs + [shared], disconnected_inputs="zero")
        return inputs + [scalar], shared, [loss, *grads]


def input_shapes(n: int, m: int, k: int) -> list[tuple[int, ...]]:
    lengths = {"n": n, "m": m, "k": k}
    return [tuple(lengths[a] for a in axes) for _, axes in INPUTS + (SHARED,)] + [()]


@st.composite
def recipes(draw, shapes, max_steps: int = 5):
    """A :class:`Recipe` over terms of ``shapes`` (the inputs', then the
    shared variable's and the scalar's)."""
    shapes = list(shapes)
    steps = []
    for _ in range(draw(st.integers(1, max_steps))):
        name = draw(st.sampled_from(FAMILIES[draw(st.sampled_from(sorted(FAMILIES)))]))
        op = OPS[name]
        # a step reads the latest term first (graphs are chains with side inputs)
        first = len(shapes) - 1 if steps and draw(st.booleans()) else \
            draw(st.integers(0, len(shapes) - 1))
        operands = [first]
        if op.arity == 2:
            fits = [j for j in range(len(shapes)) if op.shape(shapes[first], shapes[j])
                    is not None]
            if not fits:
                continue
            operands.append(draw(st.sampled_from(fits)))
        shape = op.shape(*[shapes[i] for i in operands])
        if shape is None or 0 in shape or len(shape) > 2:
            continue
        steps.append((name, tuple(operands)))
        shapes.append(tuple(int(n) for n in shape))
    n_inputs = len(INPUTS) + 2
    made = list(range(n_inputs, len(shapes))) or [0]
    loss = draw(st.sampled_from([None, "sum", "mean"]))
    outputs = tuple(draw(st.lists(st.sampled_from(made), min_size=1, max_size=2)))
    return Recipe(tuple(steps), outputs, loss)


@st.composite
def chunkings(draw, shape):
    """Chunk lengths for each axis of ``shape`` (uneven, any number of chunks)."""
    chunks = []
    for n in shape:
        cuts = draw(st.sets(st.integers(1, n - 1), max_size=3)) if n > 1 else set()
        edges = [0, *sorted(cuts), n]
        chunks.append(tuple(b - a for a, b in zip(edges, edges[1:])))
    return tuple(chunks)


@st.composite
def examples(draw, max_steps: int = 5):
    """``(recipe, values, chunks)``: a graph, its inputs' values (the shared
    value last but one, the scalar last), and chunks of the chunked inputs."""
    n, m, k = draw(st.integers(1, 9)), draw(st.integers(1, 6)), draw(st.integers(1, 4))
    shapes = input_shapes(n, m, k)
    recipe = draw(recipes(shapes, max_steps))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(s) for s in shapes[:-1]] + [np.float64(rng.uniform(-1, 1))]
    chunks = [draw(chunkings(s)) for s in shapes[:len(INPUTS)]]
    return recipe, values, chunks
