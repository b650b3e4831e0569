"""Row programs on the C linker (tenure/linkers/c/rowwise.py) against the
Python executor, which runs each step's own perform: the hand-written layer
norm and its gradient, every shape class the kernel covers, the calls it
declines (and that perform then runs), threads."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.symbolic.ops.rowwise import RowProgram

from tests.linkers.c.pairs import C, PY, kinds_by_op

EPS = 1e-5


def _layer_norm_grads(dtype):
    """The gradients of ``sum(layer_norm(x) * w)`` written out, wrt x, g, b."""
    x, w = tn.matrix("x", dtype=dtype), tn.matrix("w", dtype=dtype)
    g, b = tn.vector("g", dtype=dtype), tn.vector("b", dtype=dtype)
    mu = tn.mean(x, axis=1, keepdims=True)
    var = tn.mean((x - mu) ** 2, axis=1, keepdims=True)
    y = (x - mu) / tn.sqrt(var + EPS) * g + b
    return [x, g, b, w], tn.grad(tn.sum(y * w), [x, g, b])


_PERFORMS: list = []


@pytest.fixture(autouse=True, scope="module")
def _count_performs():
    """Every row program compiled in this module counts its performs (a
    compiled function keeps the perform it was built with)."""
    original = RowProgram.perform

    def counted(self, node, inputs, output_storage):
        _PERFORMS.append(node)
        return original(self, node, inputs, output_storage)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RowProgram, "perform", counted)
        yield


@pytest.fixture
def performs():
    """The row program performs run since the test started."""
    _PERFORMS.clear()
    return _PERFORMS


def _data(rng, rows, cols, dtype, x_rows=None):
    return [rng.standard_normal((x_rows or rows, cols)).astype(dtype),
            rng.standard_normal(cols).astype(dtype), rng.standard_normal(cols).astype(dtype),
            rng.standard_normal((rows, cols)).astype(dtype)]


_GRADS = {}


def _grad_functions(dtype):
    if dtype not in _GRADS:
        inputs, outputs = _layer_norm_grads(dtype)
        _GRADS[dtype] = (tn.function(inputs, outputs, mode=PY),
                         tn.function(inputs, outputs, mode=C))
    return _GRADS[dtype]


def test_the_layer_norm_gradient_is_one_row_program():
    f_py, f_c = _grad_functions("float32")
    programs = [n for n in f_c.fgraph.toposort() if isinstance(n.op, RowProgram)]
    assert len(programs) == 1
    assert kinds_by_op(f_c)[RowProgram] == {"rowwise"}
    # the whole chain: two means, three reductions of the gradient, two column sums
    reductions = [op for op, _ in programs[0].op.steps if getattr(op, "axis", None)]
    assert len(reductions) == 7


@pytest.mark.parametrize("dtype, rtol", [("float32", 2e-5), ("float64", 1e-12)])
@pytest.mark.parametrize("rows, cols", [(1, 1), (1, 7), (5, 1), (3, 8), (65, 129), (130, 300),
                                        (64, 1000)])
def test_layer_norm_gradient_matches_the_reference(performs, dtype, rtol, rows, cols):
    f_py, f_c = _grad_functions(dtype)
    args = _data(np.random.default_rng(rows * cols), rows, cols, dtype)
    want = f_py(*args)
    performs.clear()
    got = f_c(*args)
    assert not performs, "the C kernel declined shapes it covers"
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.abs(b).max())


def test_a_sum_that_sums_is_declined_and_perform_computes_it(performs):
    """x of one row against w of many: the gradient's sum_to sums over w's
    rows, which the kernel does not cover; perform runs and gives the
    reference's values."""
    f_py, f_c = _grad_functions("float64")
    args = _data(np.random.default_rng(1), 6, 10, "float64", x_rows=1)
    want = f_py(*args)
    performs.clear()
    got = f_c(*args)
    assert len(performs) == 1
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_shapes_that_do_not_broadcast_raise_the_reference_error(performs):
    f_py, f_c = _grad_functions("float64")
    args = _data(np.random.default_rng(2), 6, 10, "float64", x_rows=4)
    with pytest.raises(ValueError) as want:
        f_py(*args)
    with pytest.raises(ValueError) as got:
        f_c(*args)
    assert type(got.value) is type(want.value)


def test_strided_and_transposed_inputs(performs):
    f_py, f_c = _grad_functions("float64")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 90))[:, ::3]            # column stride 24 bytes
    w = np.asfortranarray(rng.standard_normal((40, 30)))  # column stride 320 bytes
    g, b = rng.standard_normal(60)[::2], rng.standard_normal(30)
    want = f_py(x, g, b, w)
    performs.clear()
    got = f_c(x, g, b, w)
    assert not performs
    for a, b_ in zip(got, want):
        np.testing.assert_allclose(a, b_, rtol=1e-12, atol=1e-12)


def _forward(dtype="float64"):
    x = tn.matrix("x", dtype=dtype)
    g = tn.vector("g", dtype=dtype)
    mu = tn.mean(x, axis=1, keepdims=True)
    var = tn.mean((x - mu) ** 2, axis=1, keepdims=True)
    return [x, g], (x - mu) / tn.sqrt(var + EPS) * g


def test_the_forward_layer_norm_makes_three_passes():
    inputs, y = _forward()
    f = tn.function(inputs, y, mode=C)
    (node,) = [n for n in f.fgraph.toposort() if isinstance(n.op, RowProgram)]
    from tenure.linkers.c.rowwise import RowPlan
    assert RowPlan(node).passes == 3       # the mean, the variance, the output


def test_max_propagates_nan_and_threads_change_nothing(performs):
    """A row max fed back (``x / max(|x|)``), with column sums, under one
    thread and three: the same bits; a NaN row stays NaN."""
    x = tn.matrix("x")
    m = tn.max(abs(x), axis=1, keepdims=True)
    z = x / m
    outputs = [z, tn.sum(z * x, axis=0), tn.sum(tn.exp(z), axis=1, keepdims=True)]
    rng = np.random.default_rng(4)
    data = rng.standard_normal((300, 257))
    data[7, 100] = np.nan
    want = tn.function([x], outputs, mode=PY)(data)
    results = []
    for threads in (1, 3):
        with tn.config.change_flags(openmp_elemwise_minsize=1, openmp_threads=threads):
            f = tn.function([x], outputs, mode=C)
            assert kinds_by_op(f)[RowProgram] == {"rowwise"}
            performs.clear()
            results.append(f(data))
            assert not performs
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(results[0], want):
        np.testing.assert_allclose(a, b, rtol=1e-12, equal_nan=True)
    assert np.isnan(results[0][0][7]).all() and np.isnan(results[0][2][7, 0])


def test_a_region_never_closes_a_cycle_through_an_outside_op():
    """``h = x - mean(x)`` goes through a product outside the region and
    comes back: the region stops before the reader of the product."""
    x, v = tn.matrix("x"), tn.matrix("v")
    h = x - tn.mean(x, axis=1, keepdims=True)
    z = tn.dot(h, v)
    out = h * tn.sum(h * h, axis=1, keepdims=True) + tn.sum(z, axis=1, keepdims=True)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal((20, 30)), rng.standard_normal((30, 30))]
    want = tn.function([x, v], out, mode=PY)(*args)
    f = tn.function([x, v], out, mode=C)
    assert any(isinstance(n.op, RowProgram) for n in f.fgraph.toposort())
    np.testing.assert_allclose(f(*args), want, rtol=1e-12)


def test_fuse_rows_can_be_excluded():
    inputs, y = _forward()
    f = tn.function(inputs, y, mode=tn.Mode(linker="c", exclude=["fuse_rows"]))
    assert not any(isinstance(n.op, RowProgram) for n in f.fgraph.toposort())


@pytest.mark.parametrize("linker", ["py", "check", "dask"])
def test_linkers_without_a_kernel_leave_rows_unfused(linker):
    """No kernel: their perform would compute the unfused ops whole."""
    if linker == "dask":
        pytest.importorskip("dask")
    inputs, y = _forward()
    f = tn.function(inputs, y, mode=tn.Mode(linker=linker))
    assert not any(isinstance(n.op, RowProgram) for n in f.fgraph.toposort())


def test_a_training_step_s_row_program_runs_in_c(performs):
    """A softmax regression's squared error: its gradient's row program
    reads the batch lengths both as values (the mean's count) and as a
    sum_to's lengths -- C all the same, no perform."""
    rng = np.random.default_rng(7)
    x, y = tn.matrix("x"), tn.matrix("y")
    w = tn.shared(rng.standard_normal((8, 4)))
    out = tn.softmax(tn.dot(x, w), axis=-1)
    loss = tn.mean((out - y) ** 2)
    (g,) = tn.grad(loss, [w])
    step = tn.function([x, y], loss, updates=[(w, w - 0.1 * g)], mode=C)
    assert kinds_by_op(step).get(RowProgram) == {"rowwise"}
    assert "py" not in step._thunk.graph.kinds
    step(rng.standard_normal((32, 8)), rng.standard_normal((32, 4)))
    assert not performs


def test_the_expansion_is_the_program_s_own_ops():
    """Linkers that run only the ops they have a kernel for get the steps
    back: the expansion of the forward layer norm computes its output."""
    inputs, y = _forward()
    f_c = tn.function(inputs, y, mode=C)
    (node,) = [n for n in f_c.fgraph.toposort() if isinstance(n.op, RowProgram)]
    (expanded,) = node.op.expand(node)
    g = tn.function(list(f_c.fgraph.inputs), expanded, mode=PY)
    assert not any(isinstance(n.op, RowProgram) for n in g.fgraph.toposort())
    rng = np.random.default_rng(6)
    args = [rng.standard_normal((9, 20)), rng.standard_normal(20)]
    np.testing.assert_array_equal(g(*args), tn.function(inputs, y, mode=PY)(*args))


# --------------------------------------------------------------------------
# Random row programs


@st.composite
def _row_graphs(draw):
    """``(inputs, outputs, values)``: a random chain of elementwise ops and
    row reductions fed back (sum, mean, max, min with keepdims) over a
    matrix, a row vector and a column, ending in the chain's last value and
    a column sum; shapes from one row or column up."""
    n, m = draw(st.integers(1, 9)), draw(st.sampled_from([1, 2, 7, 8, 129, 300]))
    x, v, c = tn.matrix("x"), tn.vector("v"), tn.matrix("c")
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    values = [rng.standard_normal((n, m)), rng.standard_normal(m), rng.standard_normal((n, 1))]
    pool = [x, v, c]
    for _ in range(draw(st.integers(2, 7))):
        kind = draw(st.sampled_from(["binary", "unary", "row", "row"]))
        a = draw(st.sampled_from(pool))
        if kind == "binary":
            b = draw(st.sampled_from(pool))
            pool.append(draw(st.sampled_from([tn.add, tn.sub, tn.mul]))(a, b))
        elif kind == "unary":
            pool.append(draw(st.sampled_from([tn.tanh, tn.abs, tn.sin]))(a) * 0.5)
        elif a.ndim == 2:
            fn = draw(st.sampled_from([tn.sum, tn.mean, tn.max, tn.min]))
            pool.append(fn(a, axis=1, keepdims=True) * pool[-1])
    last = pool[-1] + x
    return [x, v, c], [last, tn.sum(last * x, axis=0)], values


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(graph=_row_graphs())
def test_random_row_programs_match_the_executor(graph):
    inputs, outputs, values = graph
    reference = tn.Mode(linker="py", rewrites="none")
    want = tn.function(inputs, outputs, mode=reference, on_unused_input="ignore")(*values)
    got = tn.function(inputs, outputs, mode=C, on_unused_input="ignore")(*values)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * (1 + np.abs(b).max()))


# --------------------------------------------------------------------------
# More dimensions: the rows are the index tuples of the leading axes


def _layer_norm3_grads():
    x, w = tn.tensor3("x"), tn.tensor3("w")
    g, b = tn.vector("g"), tn.vector("b")
    mu = tn.mean(x, axis=-1, keepdims=True)
    var = tn.mean((x - mu) ** 2, axis=-1, keepdims=True)
    y = (x - mu) / tn.sqrt(var + EPS) * g + b
    return [x, g, b, w], tn.grad(tn.sum(y * w), [x, g, b]) + [y]


_GRADS3 = {}


def _grad3_functions():
    if not _GRADS3:
        inputs, outputs = _layer_norm3_grads()
        _GRADS3["f"] = (tn.function(inputs, outputs, mode=PY),
                        tn.function(inputs, outputs, mode=C))
    return _GRADS3["f"]


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 7), (3, 1, 9), (4, 70, 130)])
def test_a_3d_layer_norm_gradient_is_one_row_program(performs, shape):
    """Over (batch, seq, d): the gradients wrt x, g (summed over batch and
    seq: a column sum over two axes) and b, and the output."""
    f_py, f_c = _grad3_functions()
    assert kinds_by_op(f_c)[RowProgram] == {"rowwise"}
    rng = np.random.default_rng(sum(shape))
    d = shape[-1]
    args = [rng.standard_normal(shape), rng.standard_normal(d), rng.standard_normal(d),
            rng.standard_normal(shape)]
    want = f_py(*args)
    performs.clear()
    got = f_c(*args)
    assert not performs
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())


def test_3d_rows_that_are_not_one_stride_apart_are_copied(performs):
    """A transposed (batch, seq) layout: the leading axes do not merge into
    one row stride; the step reads a C-order copy (no perform)."""
    f_py, f_c = _grad3_functions()
    rng = np.random.default_rng(8)
    x = rng.standard_normal((5, 3, 11)).transpose(1, 0, 2)    # (3, 5, 11), batch inner
    args = [x, rng.standard_normal(11), rng.standard_normal(11),
            rng.standard_normal((3, 5, 11))]
    want = f_py(*args)
    performs.clear()
    got = f_c(*args)
    assert not performs
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_table_over_some_leading_axes_is_never_in_a_region():
    """``x + pos``, pos of shape (seq, d) over x of (batch, seq, d): pos
    spans some rows only, which the kernels do not cover; a node reading it
    stays out of row programs (here fusion put it in every node: there is
    none), rather than making a program that declines every call."""
    x, pos = tn.tensor3("x"), tn.matrix("pos")
    h = x + pos
    mu = tn.mean(h, axis=-1, keepdims=True)
    y = (h - mu) * tn.sum(h - mu, axis=-1, keepdims=True)
    f = tn.function([x, pos], y, mode=C)
    assert not any(pos in n.inputs for n in f.fgraph.toposort() if isinstance(n.op, RowProgram))
    rng = np.random.default_rng(9)
    args = [rng.standard_normal((4, 5, 6)), rng.standard_normal((5, 6))]
    want = tn.function([x, pos], y, mode=PY)(*args)
    np.testing.assert_allclose(f(*args), want, rtol=1e-12, atol=1e-12)
