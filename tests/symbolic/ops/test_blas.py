"""dot and matmul against NumPy: values, dtypes, static and inferred shapes,
output buffers and the errors raised when shapes cannot line up."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenure as tn
from tests.helpers import COMPILED, DTYPES, assert_matches, random_values
from tenure.symbolic.ops import shape_tuple
from tenure.symbolic.ops.blas import (
    Dot, MatMul, Outer, TensorDot, dot_shape, matmul_static_shape, normalize_tensordot_axes)
from tenure.testing import verify_grad


# --------------------------------------------------------------------------
# Helpers


def run_perform(node, values, storage=None):
    storage = [[None]] if storage is None else storage
    node.op.perform(node, values, storage)
    return storage[0][0]


def resolve(dims, symbolic_values):
    values = iter(symbolic_values)
    return tuple(d if isinstance(d, int) else int(next(values)) for d in dims)


lengths = st.integers(0, 4)


@st.composite
def hide_some(draw, shape):
    """``shape`` with some lengths unknown when the graph is built."""
    return tuple(d if draw(st.booleans()) else None for d in shape)


@st.composite
def dot_cases(draw):
    """Aligned operand shapes for np.dot, their static shapes, dtypes and a seed."""
    na, nb = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    k = draw(lengths)
    a_shape = () if na == 0 else tuple(draw(st.lists(lengths, min_size=na - 1,
                                                     max_size=na - 1))) + (k,)
    if nb == 0:
        b_shape = ()
    elif nb == 1:
        b_shape = (k,)
    else:
        b_shape = tuple(draw(st.lists(lengths, min_size=nb - 2, max_size=nb - 2))) + (
            k, draw(lengths))
    return (a_shape, b_shape, draw(hide_some(a_shape)), draw(hide_some(b_shape)),
            draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES)),
            draw(st.integers(0, 2**32 - 1)))


@st.composite
def matmul_cases(draw):
    """Operand shapes np.matmul accepts (batch axes broadcast, 1-d operands included)."""
    na, nb = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    batch = tuple(draw(st.lists(lengths, min_size=4, max_size=4)))
    n, k, m = draw(lengths), draw(lengths), draw(lengths)

    def batch_for(ndim):
        # The trailing batch axes, some of them length 1 (broadcast).
        own = batch[len(batch) - (ndim - 2):] if ndim > 2 else ()
        return tuple(1 if draw(st.booleans()) else d for d in own)

    a_shape = (k,) if na == 1 else batch_for(na) + (n, k)
    b_shape = (k,) if nb == 1 else batch_for(nb) + (k, m)
    return (a_shape, b_shape, draw(hide_some(a_shape)), draw(hide_some(b_shape)),
            draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES)),
            draw(st.integers(0, 2**32 - 1)))


def build(fn, case):
    a_shape, b_shape, a_static, b_static, a_dtype, b_dtype, seed = case
    a = tn.tensor("a", dtype=a_dtype, shape=a_static)
    b = tn.tensor("b", dtype=b_dtype, shape=b_static)
    values = [random_values(seed, a_shape, a_dtype, scale=2.0),
              random_values(seed + 1, b_shape, b_dtype, scale=2.0)]
    return a, b, fn(a, b), values


def check_static(out, got, a_static, b_static):
    assert out.ndim == got.ndim
    for want, actual in zip(out.type.shape, got.shape):
        assert want is None or want == actual
    if None not in a_static + b_static:
        assert out.type.shape == got.shape


# --------------------------------------------------------------------------
# Against NumPy


@pytest.mark.parametrize("fn_name", ["dot", "matmul"])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_perform_matches_numpy(fn_name, data):
    case = data.draw(dot_cases() if fn_name == "dot" else matmul_cases())
    a, b, out, values = build(getattr(tn, fn_name), case)
    expected = getattr(np, fn_name)(*values)
    assert out.dtype == np.asarray(expected).dtype
    got = run_perform(out.owner, values)
    assert_matches(got, expected)
    # No view_map: the result never shares an input's memory (even with a 0-d operand).
    assert not any(np.shares_memory(got, v) for v in values)
    check_static(out, got, case[2], case[3])


@pytest.mark.parametrize("fn_name", ["dot", "matmul"])
@COMPILED
@given(data=st.data())
def test_compiled_matches_numpy_and_infers_shape(mode, fn_name, data):
    case = data.draw(dot_cases() if fn_name == "dot" else matmul_cases())
    a, b, out, values = build(getattr(tn, fn_name), case)
    got = tn.function([a, b], out, mode=mode)(*values)
    assert_matches(got, getattr(np, fn_name)(*values))

    dims = shape_tuple(out)
    symbolic = [d for d in dims if not isinstance(d, int)]
    computed = (tn.function([a, b], symbolic, mode=mode, on_unused_input="ignore")(*values)
                if symbolic else [])
    assert resolve(dims, computed) == got.shape


@pytest.mark.parametrize("a_dtype, b_dtype", [
    ("bool", "bool"), ("int8", "int8"), ("int8", "uint8"), ("int32", "float32"),
    ("float32", "float32"), ("float32", "float64"), ("int64", "complex128"),
    ("bool", "float32"), ("float16", "float16"),
])
@pytest.mark.parametrize("fn_name", ["dot", "matmul"])
def test_output_dtype_is_numpys(fn_name, a_dtype, b_dtype):
    a, b = tn.matrix("a", dtype=a_dtype), tn.vector("b", dtype=b_dtype)
    expected = getattr(np, fn_name)(np.ones((2, 3), a_dtype), np.ones(3, b_dtype)).dtype
    assert getattr(tn, fn_name)(a, b).dtype == expected.name


@pytest.mark.parametrize("a_shape, b_shape, expected", [
    ((), (2, None), (2, None)),
    ((None, 3), (), (None, 3)),
    ((3,), (3,), ()),
    ((2, 3), (None,), (2,)),
    ((None,), (2, 3, 4), (2, 4)),
    ((2, None, 3), (5, 3, None), (2, None, 5, None)),
])
def test_dot_static_shapes(a_shape, b_shape, expected):
    out = tn.dot(tn.tensor("a", shape=a_shape), tn.tensor("b", shape=b_shape))
    assert out.type.shape == expected


@pytest.mark.parametrize("a_shape, b_shape, expected", [
    ((3,), (3,), ()),
    ((2, 3), (None,), (2,)),
    ((None,), (5, 3, 4), (5, 4)),
    ((2, None, 3), (3, None), (2, None, None)),
    ((1, 2, 3), (4, 3, 5), (4, 2, 5)),
    ((None, 2, 3), (4, 3, 5), (4, 2, 5)),        # an unknown length broadcasts to 4
    ((None, 2, 3), (1, 3, 5), (None, 2, 5)),
    ((None, 2, 3), (None, 3, 5), (None, 2, 5)),
    ((7, 1, 2, 3), (6, 3, 5), (7, 6, 2, 5)),
])
def test_matmul_static_shapes(a_shape, b_shape, expected):
    out = tn.matmul(tn.tensor("a", shape=a_shape), tn.tensor("b", shape=b_shape))
    assert out.type.shape == expected


def test_python_numbers_in_dot(mode):
    x = tn.vector("x", dtype="int8")
    out = tn.dot(x, 3)
    value = np.array([1, -2, 3], dtype="int8")
    assert out.dtype == np.dot(value, 3).dtype.name
    assert_matches(tn.function([x], out, mode=mode)(value), np.dot(value, 3))
    assert tn.dot(2.5, 4.0).type.shape == ()


def test_operators_and_methods(mode):
    a, b = tn.matrix("a"), tn.matrix("b")
    va, vb = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    f = tn.function([a, b], [a @ b, a.dot(b)], mode=mode)
    for got in f(va, vb):
        assert_matches(got, va @ vb)
    assert_matches(tn.function([b], va @ b, mode=mode)(vb), va @ vb)


def test_bool_products_stay_bool(mode):
    a, b = tn.matrix("a", dtype="bool"), tn.matrix("b", dtype="bool")
    va = np.array([[True, False], [False, False]])
    vb = np.array([[False, True], [True, False]])
    got = tn.function([a, b], [tn.dot(a, b), tn.matmul(a, b)], mode=mode)(va, vb)
    for value, fn in zip(got, (np.dot, np.matmul)):
        assert_matches(value, fn(va, vb))


# --------------------------------------------------------------------------
# infer_shape, called directly


def test_infer_shape_entries():
    d0, d1, d2, d3 = (tn.scalar(f"d{i}", dtype="int64") for i in range(4))

    node = tn.dot(tn.tensor("a", shape=(None, None, 3)), tn.tensor("b", shape=(None, 3, 4))).owner
    [shape] = node.op.infer_shape(node, [(d0, d1, 3), (d2, 3, 4)])
    assert shape[0] is d0 and shape[1] is d1 and shape[2] is d2 and shape[3] == 4

    node = tn.dot(tn.scalar("s"), tn.matrix("m")).owner
    [shape] = node.op.infer_shape(node, [(), (d0, d1)])
    assert shape[0] is d0 and shape[1] is d1

    node = tn.matmul(tn.tensor("a", shape=(None, 2, None)), tn.tensor("b", shape=(None, 5))).owner
    [shape] = node.op.infer_shape(node, [(d0, 2, d1), (d2, 5)])
    assert shape[0] is d0 and shape[1:] == (2, 5)

    node = tn.matmul(tn.vector("v"), tn.tensor3("b")).owner
    [shape] = node.op.infer_shape(node, [(d0,), (d1, d2, d3)])
    assert shape[0] is d1 and shape[1] is d3 and len(shape) == 2

    node = tn.matmul(tn.vector("v"), tn.vector("w")).owner
    assert node.op.infer_shape(node, [(d0,), (d1,)]) == [()]


@pytest.mark.parametrize("a_shape, b_shape", [
    ((0, 2, 3), (5, 3, 4)), ((1, 2, 3), (5, 3, 4)), ((5, 2, 3), (1, 3, 4)),
    ((0, 2, 3), (1, 3, 4)), ((1, 2, 3), (0, 3, 4)), ((0, 2, 3), (0, 3, 4)),
    ((3, 2, 3), (3, 3, 4)), ((2, 0, 2, 3), (1, 3, 4)), ((1, 1, 2, 3), (0, 3, 4)),
])
def test_infer_shape_of_broadcast_batch_axes(mode, a_shape, b_shape):
    # Batch lengths unknown when the graph is built: the inferred shape still
    # follows NumPy's broadcasting when the function runs (1 stretches, also
    # to 0; other mismatches are errors).
    a = tn.tensor("a", shape=(None,) * len(a_shape))
    b = tn.tensor("b", shape=(None,) * len(b_shape))
    out = a @ b
    va, vb = np.ones(a_shape), np.ones(b_shape)
    f = tn.function([a, b], list(shape_tuple(out)), mode=mode)
    try:
        expected = np.matmul(va, vb).shape
    except ValueError:
        with pytest.raises(ValueError):
            tn.function([a, b], out, mode=mode)(va, vb)
        return
    assert tuple(int(d) for d in f(va, vb)) == expected


# --------------------------------------------------------------------------
# Output buffers


BUFFER_CASES = [
    ("dot", (2, 3), (3, 4), "float64", "float64"),
    ("dot", (3,), (3,), "float32", "float32"),       # 0-d output: np.dot returns a scalar
    ("dot", (2, 3, 4), (4,), "int8", "int32"),
    ("dot", (), (2, 3), "float64", "float64"),       # a 0-d operand multiplies
    ("dot", (2, 3), (4, 3, 2), "int64", "float32"),
    ("matmul", (2, 3), (3, 4), "float32", "float32"),
    ("matmul", (3,), (5, 3, 2), "int8", "int8"),
    ("matmul", (5, 2, 3), (3,), "bool", "bool"),
    ("matmul", (4, 1, 2, 3), (5, 3, 2), "float64", "complex128"),
    ("matmul", (3,), (3,), "float64", "float64"),
]


def _op_case(fn_name, a_shape, b_shape, a_dtype, b_dtype):
    a = tn.tensor("a", dtype=a_dtype, shape=(None,) * len(a_shape))
    b = tn.tensor("b", dtype=b_dtype, shape=(None,) * len(b_shape))
    node = getattr(tn, fn_name)(a, b).owner
    values = [(random_values(s, a_shape, a_dtype, scale=2.0),
               random_values(s + 10, b_shape, b_dtype, scale=2.0))
              for s in (1, 2)]
    expected = [np.asarray(getattr(np, fn_name)(*v)) for v in values]
    return node, values, expected


@pytest.mark.parametrize("case", BUFFER_CASES)
def test_perform_reuses_a_matching_buffer(case):
    node, values, expected = _op_case(*case)
    storage = [[None]]
    node.op.perform(node, list(values[0]), storage)
    first = storage[0][0]
    assert_matches(first, expected[0])
    node.op.perform(node, list(values[1]), storage)
    assert storage[0][0] is first
    assert_matches(first, expected[1])


@pytest.mark.parametrize("case", BUFFER_CASES)
def test_perform_writes_into_a_prefilled_buffer(case):
    node, values, expected = _op_case(*case)
    buffer = np.full(expected[1].shape, 3, dtype=expected[1].dtype)
    storage = [[buffer]]
    node.op.perform(node, list(values[1]), storage)
    assert storage[0][0] is buffer
    assert_matches(buffer, expected[1])


@pytest.mark.parametrize("case", BUFFER_CASES)
def test_perform_ignores_a_misfit_buffer(case):
    node, values, expected = _op_case(*case)
    want = expected[0]
    other_dtype = "float32" if want.dtype != np.float32 else "float64"
    readonly = np.zeros(want.shape, want.dtype)
    readonly.setflags(write=False)
    misfits = [np.zeros(want.shape + (2,), want.dtype),
               np.zeros(want.shape, other_dtype),
               readonly,
               want.tolist()]
    for misfit in misfits:
        before = np.array(misfit, copy=True)
        storage = [[misfit]]
        node.op.perform(node, list(values[0]), storage)
        assert storage[0][0] is not misfit
        assert_matches(storage[0][0], want)
        np.testing.assert_array_equal(np.asarray(misfit), before)


def test_dot_needs_a_c_contiguous_buffer_but_matmul_does_not():
    a, b = tn.matrix("a"), tn.matrix("b")
    va, vb = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    for fn, reused in ((tn.dot, False), (tn.matmul, True)):
        node = fn(a, b).owner
        buffer = np.zeros((2, 4), order="F")
        storage = [[buffer]]
        node.op.perform(node, [va, vb], storage)
        assert (storage[0][0] is buffer) == reused
        assert_matches(storage[0][0], va @ vb)
        if not reused:
            assert not buffer.any()


def test_dot_buffer_of_the_wrong_shape_for_misaligned_inputs_gives_numpys_error():
    node = tn.dot(tn.matrix("a"), tn.matrix("b")).owner
    with pytest.raises(ValueError, match="not aligned"):
        node.op.perform(node, [np.ones((2, 3)), np.ones((4, 5))], [[np.zeros((2, 5))]])


# --------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("a_shape, b_shape, axis_name", [
    ((2, 3), (4, 5), "second-to-last"),
    ((3,), (4,), "only"),
    ((2, None, 3), (6, 4, 5), "second-to-last"),
    ((3,), (7, 2, 5), "second-to-last"),
])
@pytest.mark.parametrize("fn_name", ["dot", "matmul"])
def test_misaligned_static_shapes(fn_name, a_shape, b_shape, axis_name):
    a, b = tn.tensor("a", shape=a_shape), tn.tensor("b", shape=b_shape)
    shapes = [str(s).replace("None", "?") for s in (a_shape, b_shape)]
    with pytest.raises(ValueError, match=re.escape(f"{fn_name}: shapes {shapes[0]} and "
                                                   f"{shapes[1]} are not aligned")
                       + f".*{axis_name}"):
        getattr(tn, fn_name)(a, b)


@pytest.mark.parametrize("fn_name", ["dot", "matmul"])
def test_misaligned_unknown_shapes_fail_when_run(mode, fn_name):
    a, b = tn.matrix("a"), tn.matrix("b")
    f = tn.function([a, b], getattr(tn, fn_name)(a, b), mode=mode)
    with pytest.raises(ValueError):
        f(np.ones((2, 3)), np.ones((4, 5)))


@pytest.mark.parametrize("a, b, which", [
    (0, 1, "first"), (1, 0, "second"), (0, 0, "first")])
def test_matmul_refuses_0d_operands(a, b, which):
    operands = [tn.tensor("x", shape=(3,) * a), tn.tensor("y", shape=(3,) * b)]
    with pytest.raises(ValueError, match=f"the {which} operand is 0-d"):
        tn.matmul(*operands)


def test_matmul_refuses_python_numbers():
    with pytest.raises(ValueError, match="0-d"):
        tn.matmul(tn.vector("x"), 2.0)


def test_matmul_batch_axes_must_broadcast():
    a, b = tn.tensor("a", shape=(2, 3, 3)), tn.tensor("b", shape=(5, 3, 3))
    with pytest.raises(ValueError, match=re.escape("batch axes of (2, 3, 3) and (5, 3, 3)")):
        tn.matmul(a, b)


def test_matmul_batch_axes_fail_when_run(mode):
    a, b = tn.tensor3("a"), tn.tensor3("b")
    f = tn.function([a, b], a @ b, mode=mode)
    with pytest.raises(ValueError):
        f(np.ones((2, 3, 3)), np.ones((5, 3, 3)))


def test_shape_helpers():
    assert dot_shape((2, 3), (3,)) == (2,)
    assert dot_shape((), ()) == ()
    assert matmul_static_shape((4, 1, 2, 3), (5, 3, 6)) == (4, 5, 2, 6)
    with pytest.raises(ValueError, match="not aligned"):
        matmul_static_shape((2, 3), (2, 3))


# --------------------------------------------------------------------------
# Op identity


def test_ops_compare_equal():
    assert Dot() == Dot() and hash(Dot()) == hash(Dot())
    assert MatMul() == MatMul() and Dot() != MatMul()
    a, b = tn.matrix("a"), tn.matrix("b")
    assert tn.dot(a, b).owner.op == tn.dot(b, a).owner.op
    assert str(tn.matmul(a, b).owner.op) == "matmul"


# --------------------------------------------------------------------------
# tensordot and outer against NumPy


@st.composite
def tensordot_cases(draw):
    """Operand shapes, an ``axes`` argument in any of NumPy's spellings, static
    shapes, dtypes and a seed."""
    na, nb = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    a_shape = tuple(draw(st.lists(lengths, min_size=na, max_size=na)))
    b_shape = list(draw(st.lists(lengths, min_size=nb, max_size=nb)))
    n = draw(st.integers(0, min(na, nb)))
    if draw(st.booleans()):
        # The int form: a's last n axes against b's first n.
        b_shape[:n] = a_shape[na - n:]
        axes = n
    else:
        a_axes = draw(st.permutations(range(na)))[:n]
        b_axes = draw(st.permutations(range(nb)))[:n]
        for i, j in zip(a_axes, b_axes):
            b_shape[j] = a_shape[i]
        a_axes = [i - na if draw(st.booleans()) else i for i in a_axes]
        b_axes = [j - nb if draw(st.booleans()) else j for j in b_axes]
        spell = draw(st.sampled_from([list, tuple]))
        axes = (spell(a_axes), spell(b_axes))
        if n == 1 and draw(st.booleans()):
            axes = (a_axes[0], b_axes[0])  # single ints
    b_shape = tuple(b_shape)
    return (a_shape, b_shape, draw(hide_some(a_shape)), draw(hide_some(b_shape)),
            draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES)),
            draw(st.integers(0, 2**32 - 1)), axes)


@st.composite
def outer_cases(draw):
    a_shape = tuple(draw(st.lists(lengths, max_size=3)))
    b_shape = tuple(draw(st.lists(lengths, max_size=3)))
    return (a_shape, b_shape, draw(hide_some(a_shape)), draw(hide_some(b_shape)),
            draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES)),
            draw(st.integers(0, 2**32 - 1)))


@pytest.mark.parametrize("fn_name", ["tensordot", "outer"])
@COMPILED
@given(data=st.data())
def test_tensordot_and_outer_match_numpy(mode, fn_name, data):
    if fn_name == "tensordot":
        *case, axes = data.draw(tensordot_cases())
        fn, np_fn = (lambda a, b: tn.tensordot(a, b, axes)), (lambda a, b: np.tensordot(a, b, axes))
    else:
        case = data.draw(outer_cases())
        fn, np_fn = tn.outer, np.outer
    a, b, out, values = build(fn, case)
    expected = np.asarray(np_fn(*values))
    assert out.dtype == expected.dtype.name
    got = run_perform(out.owner, values)
    assert_matches(got, expected)
    assert not any(np.shares_memory(got, v) for v in values)
    check_static(out, got, case[2], case[3])

    assert_matches(tn.function([a, b], out, mode=mode)(*values), expected)
    dims = shape_tuple(out)
    symbolic = [d for d in dims if not isinstance(d, int)]
    computed = (tn.function([a, b], symbolic, mode=mode, on_unused_input="ignore")(*values)
                if symbolic else [])
    assert resolve(dims, computed) == expected.shape


@pytest.mark.parametrize("a_shape, b_shape, axes", [
    ((3, 4), (4, 5), 1), ((2, 3, 4), (4, 3, 2), ([1, 2], [1, 0])), ((4, 3), (4, 6), ([0], [0])),
    ((3,), (3,), 1), ((0, 4), (4, 2), 1), ((2, 3), (3, 0), 1), ((2, 3), (4,), 0)])
def test_tensordot_writes_into_last_calls_buffer(a_shape, b_shape, axes):
    """With a borrowed result, the second call's product goes into the first
    call's buffer (np.tensordot's steps, np.dot with out=): the numbers are
    np.tensordot's, bit for bit, and no result is allocated."""
    a = tn.tensor("a", shape=(None,) * len(a_shape))
    b = tn.tensor("b", shape=(None,) * len(b_shape))
    f = tn.function([a, b], tn.Out(tn.tensordot(a, b, axes), borrow=True),
                    mode=tn.Mode(linker="py"))
    rng = np.random.default_rng(3)
    first = f(rng.normal(size=a_shape), rng.normal(size=b_shape))
    av, bv = rng.normal(size=a_shape), rng.normal(size=b_shape)
    second = f(av, bv)
    assert second.shape == first.shape and (second.size == 0 or np.shares_memory(first, second))
    np.testing.assert_array_equal(second, np.tensordot(av, bv, axes))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_tensordot_and_its_gradient_run_in_c(dtype):
    """On the C linker a tensordot whose operands and result share a dtype
    runs in C (the runtime's product driver), and so do the tensordots of
    its gradient: none is its perform called from the C loop."""
    a = tn.tensor("a", shape=(None, None, None), dtype=dtype)
    b = tn.tensor("b", shape=(None, None, None), dtype=dtype)
    out = tn.tensordot(a, b, ([1, 2], [1, 0]))
    wrt = [a, b] if dtype != "int64" else []
    cost = out.sum() if wrt else out
    f = tn.function([a, b], [cost] + (tn.grad(cost, wrt) if wrt else []),
                    mode=tn.Mode(linker="c"))
    kinds = [kind for kind, step in zip(f._thunk.graph.kinds, f._thunk.plan.steps)
             if isinstance(step.node.op, TensorDot)]
    assert kinds == ["tensordot"] * (3 if wrt else 1)
    av, bv = random_values(1, (2, 3, 4), dtype), random_values(2, (4, 3, 5), dtype)
    reference = tn.function([a, b], [cost] + (tn.grad(cost, wrt) if wrt else []),
                            mode=tn.Mode(linker="py"))
    for got, want in zip(f(av, bv), reference(av, bv)):
        assert_matches(np.asarray(got), np.asarray(want))


def test_tensordot_of_mixed_dtypes_allocates_its_result():
    a, b = tn.matrix("a", dtype="float32"), tn.matrix("b")
    f = tn.function([a, b], tn.Out(tn.tensordot(a, b, 1), borrow=True), mode=tn.Mode(linker="py"))
    x, y = np.ones((2, 3), "float32"), np.ones((3, 2))
    first, second = f(x, y), f(x, y)
    assert second.dtype == np.float64 and not np.shares_memory(first, second)
    np.testing.assert_array_equal(second, np.tensordot(x, y, 1))


def test_tensordot_default_axes_and_static_shapes():
    a, b = tn.tensor("a", shape=(2, None, 3, 4)), tn.tensor("b", shape=(3, 4, 5))
    assert tn.tensordot(a, b).type.shape == (2, None, 5)
    assert tn.tensordot(tn.matrix("m"), tn.matrix("n"), axes=1).owner.op == TensorDot((1,), (0,))
    assert tn.tensordot(a, b, axes=([2, 3], [0, 1])).owner.op == tn.tensordot(a, b).owner.op
    assert tn.tensordot(a, b, axes=([-1], [1])).type.shape == (2, None, 3, 3, 5)
    assert tn.tensordot(a, b, axes=0).type.shape == (2, None, 3, 4, 3, 4, 5)
    assert tn.tensordot(a, b, axes=(3, 1)).type.shape == (2, None, 3, 3, 5)
    assert str(tn.tensordot(a, b).owner.op) == "tensordot{axes=((2, 3), (0, 1))}"
    assert normalize_tensordot_axes(2, 3, 2) == ((1, 2), (0, 1))
    assert normalize_tensordot_axes(([0, -1], (1, 0)), 3, 2) == ((0, 2), (1, 0))


def test_outer_static_shapes_and_dtypes():
    assert tn.outer(tn.tensor("a", shape=(2, 3)), tn.tensor("b", shape=(4,))).type.shape == (6, 4)
    assert tn.outer(tn.tensor("a", shape=(2, None)), tn.scalar("b")).type.shape == (None, 1)
    assert tn.outer(tn.vector("a", dtype="int8"), tn.vector("b", dtype="int8")).dtype == "int8"
    assert tn.outer(tn.vector("a", dtype="bool"), tn.vector("b", dtype="float32")).dtype == \
        "float32"


def test_outer_reuses_a_matching_buffer():
    node = tn.outer(tn.matrix("a"), tn.vector("b")).owner
    va, vb = np.arange(6.0).reshape(2, 3), np.arange(4.0)
    buffer = np.full((6, 4), 7.0)
    node.op.perform(node, [va, vb], storage := [[buffer]])
    assert storage[0][0] is buffer
    assert_matches(buffer, np.outer(va, vb))


@pytest.mark.parametrize("axes, message", [
    (([1], [1]), r"tensordot: shapes \(2, 3\) and \(3, 4\) are not aligned: axis 1 of the "
                 r"first \(length 3\) is summed against axis 1 of the second \(length 4\)"),
    (2, r"shapes \(2, 3\) and \(3, 4\) are not aligned: axis 0 of the first \(length 2\)"),
    (3, r"axes=3 sums over 3 axes, but the operands have 2 and 2 dimensions"),
    (-1, r"non-negative int"),
    (([0, 1], [0]), r"pair 2 axes of the first operand with 1 of the second"),
    (([0, 0], [0, 1]), r"name the same axis twice"),
    (([2], [0]), r"axis 2 is out of range for the first operand, which has 2 dimension"),
    (([0], [-3]), r"axis -3 is out of range for the second operand"),
])
def test_tensordot_errors(axes, message):
    a, b = tn.tensor("a", shape=(2, 3)), tn.tensor("b", shape=(3, 4))
    with pytest.raises(ValueError, match=message):
        tn.tensordot(a, b, axes)


@pytest.mark.parametrize("axes", [(0, 1, 2), "ab", ([0.5], [0]), ([True], [0]), None])
def test_tensordot_axes_of_the_wrong_kind(axes):
    with pytest.raises(TypeError, match="tensordot: axes"):
        tn.tensordot(tn.matrix("a"), tn.matrix("b"), axes)


def test_tensordot_unknown_lengths_fail_when_run(mode):
    a, b = tn.matrix("a"), tn.matrix("b")
    f = tn.function([a, b], tn.tensordot(a, b, axes=1), mode=mode)
    with pytest.raises(ValueError, match=r"axis 1 of the first \(length 3\).*axis 0 of the "
                                         r"second \(length 4\)"):
        f(np.ones((2, 3)), np.ones((4, 5)))


def test_tensordot_op_checks_its_axes():
    with pytest.raises(ValueError, match="differ in length"):
        TensorDot((0, 1), (0,))
    with pytest.raises(ValueError, match="non-negative"):
        TensorDot((-1,), (0,))
    with pytest.raises(ValueError, match="out of range for the second operand"):
        TensorDot((0,), (1,)).make_node(tn.vector("a"), tn.vector("b"))
    assert TensorDot((1,), (0,)) == TensorDot([1], [0])
    assert TensorDot((1,), (0,)) != TensorDot((0,), (1,))
    assert Outer() == Outer() and str(Outer()) == "outer"


# --------------------------------------------------------------------------
# Gradients


GRAD = settings(max_examples=30, deadline=None)


def float_values(case):
    a_shape, b_shape, *_, seed = case
    rng = np.random.default_rng(seed)
    return rng, [rng.normal(size=a_shape), rng.normal(size=b_shape)]


@GRAD
@given(case=dot_cases())
def test_dot_gradients(case):
    rng, points = float_values(case)
    verify_grad(tn.dot, points, rng=rng)


@GRAD
@given(case=matmul_cases())
def test_matmul_gradients(case):
    # Batch axes of length 1 on one side broadcast against the other side:
    # their gradients are summed back.
    rng, points = float_values(case)
    verify_grad(tn.matmul, points, rng=rng)


@GRAD
@given(case=tensordot_cases())
def test_tensordot_gradients(case):
    *case, axes = case
    rng, points = float_values(case)
    verify_grad(lambda a, b: tn.tensordot(a, b, axes), points, rng=rng)


@GRAD
@given(case=outer_cases())
def test_outer_gradients(case):
    rng, points = float_values(case)
    verify_grad(tn.outer, points, rng=rng)


def numeric_gradients(fn, values, weights, eps=1e-6):
    """d sum(fn(*values) * weights) / d values by central differences (NumPy only)."""
    grads = []
    for i, v in enumerate(values):
        g = np.zeros_like(v)
        for idx in np.ndindex(v.shape):
            plus = [w.copy() for w in values]
            minus = [w.copy() for w in values]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            g[idx] = (np.sum(fn(*plus) * weights) - np.sum(fn(*minus) * weights)) / (2 * eps)
        grads.append(g)
    return grads


@pytest.mark.parametrize("a_shape, b_shape, a_static, b_static", [
    ((1, 2, 3), (4, 3, 5), (1, 2, 3), (4, 3, 5)),        # broadcast batch axis, known
    ((1, 2, 3), (4, 3, 5), (None, None, None), (None, None, None)),  # only known when run
    ((2, 1, 2, 3), (3, 3, 2), (2, 1, 2, 3), (None, 3, 2)),
    ((3,), (2, 3, 4), (3,), (2, 3, 4)),
    ((2, 2, 3), (3,), (None, 2, 3), (3,)),
    ((3,), (3,), (3,), (None,)),
])
def test_matmul_gradient_values(mode, a_shape, b_shape, a_static, b_static):
    rng = np.random.default_rng(0)
    values = [rng.normal(size=a_shape), rng.normal(size=b_shape)]
    weights = rng.normal(size=np.matmul(*values).shape)
    a, b = tn.tensor("a", shape=a_static), tn.tensor("b", shape=b_static)
    cost = (tn.matmul(a, b) * tn.constant(weights)).sum()
    got = tn.function([a, b], tn.grad(cost, [a, b]), mode=mode)(*values)
    for g, want, v in zip(got, numeric_gradients(np.matmul, values, weights), values):
        assert g.shape == v.shape
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("fn, shapes", [
    (tn.dot, [(2, 3), (3, 4)]),
    (tn.dot, [(), (3, 2)]),
    (tn.dot, [(3,), (3,)]),
    (tn.dot, [(2, 3, 4), (5, 4, 2)]),
    (tn.matmul, [(2, 1, 3, 4), (5, 4, 2)]),
    (tn.matmul, [(4,), (3, 4, 2)]),
    (lambda a, b: tn.tensordot(a, b, ([0, 2], [1, 0])), [(2, 3, 4), (4, 2, 3)]),
    (tn.outer, [(2, 3), (4,)]),
])
def test_float32_gradients(fn, shapes):
    rng = np.random.default_rng(1)
    points = [rng.normal(size=s).astype("float32") for s in shapes]
    verify_grad(fn, points, rng=rng)
    a, b = (tn.tensor(n, dtype="float32", shape=(None,) * len(s))
            for n, s in zip("ab", shapes))
    assert all(g.dtype == "float32" for g in tn.grad(fn(a, b).sum(), [a, b]))


@pytest.mark.parametrize("fn, np_fn", [
    (tn.dot, np.dot), (tn.matmul, np.matmul), (tn.outer, np.outer),
    (lambda a, b: tn.tensordot(a, b, 1), lambda a, b: np.tensordot(a, b, 1))])
def test_integer_operands_get_no_gradient(mode, fn, np_fn):
    a, b = tn.matrix("a"), tn.matrix("b", dtype="int64")
    va, vb = np.arange(6.0).reshape(2, 3), np.arange(12).reshape(3, 4)
    node = fn(a, b).owner
    grads = node.op.grad(node.inputs, [tn.ones_like(node.outputs[0])])
    assert grads[1] is None and grads[0] is not None
    cost = fn(a, b).sum()
    with pytest.raises(TypeError, match="only float"):
        tn.grad(cost, b)
    # The float operand's gradient is right: d sum(f(a, b)) / d a_ij by linearity.
    got = tn.function([a, b], tn.grad(cost, a), mode=mode)(va, vb)
    expected = np.array([[np_fn(np.eye(1, 6, 3 * i + j).reshape(2, 3), vb).sum()
                          for j in range(3)] for i in range(2)])
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, expected)


def test_mixed_float_dtypes_keep_each_operands_dtype():
    a, b = tn.matrix("a", dtype="float32"), tn.matrix("b", dtype="float64")
    ga, gb = tn.grad(tn.dot(a, b).sum(), [a, b])
    assert (ga.dtype, gb.dtype) == ("float32", "float64")


def test_dot_gradient_is_a_product_not_an_elementwise_expansion():
    # The gradient of a matrix product is built from products (no full
    # broadcast of both operands), and for 2-d operands needs no transpose.
    a, b = tn.matrix("a"), tn.matrix("b")
    ga, gb = tn.grad(tn.dot(a, b).sum(), [a, b])
    for g in (ga, gb):
        assert isinstance(g.owner.op, TensorDot)
