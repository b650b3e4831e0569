"""View steps of the C linker (tenure/linkers/c/views.py): ``DimShuffle``,
``Reshape`` and basic ``Subtensor`` compiled as "view" steps, against the
Python executor and NumPy -- values, dtype, shape, strides; contiguous,
reversed, strided, Fortran, zero-size and 0-d inputs; static and symbolic
indices (negative, out of range, None bounds, negative steps, empty slices);
the errors (same exception types); and that results share memory with the
input exactly where the Python executor's do.

Each graph is compiled once (functions are cached per module); hypothesis
varies the input values and symbolic indices, never the graph.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure import In, Out
from tests.linkers.c.pairs import both
from tenure.symbolic.ops.shape import DimShuffle, Reshape



@pytest.fixture(autouse=True)
def _compiler(cc):
    """Every test here compiles: skip them all without a compiler."""




def kinds(f) -> list[str]:
    return f._thunk.graph.kinds


def kinds_of(f, op_type) -> list[str]:
    """The step kinds of the steps running an ``op_type`` op."""
    steps = f._thunk.plan.steps
    return [k for k, s in zip(kinds(f), steps) if isinstance(s.node.op, op_type)]


def assert_same(got, want):
    got_list = got if isinstance(got, list) else [got]
    want_list = want if isinstance(want, list) else [want]
    assert len(got_list) == len(want_list)
    for g, w in zip(got_list, want_list):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def layouts(a: np.ndarray) -> dict:
    """``a``'s values in several memory layouts (same shape and values)."""
    out = {"c": np.ascontiguousarray(a), "f": np.asfortranarray(a)}
    if a.ndim:
        # Reversed twice along axis 0: negative strides, same values.
        rev = np.ascontiguousarray(a[::-1])
        out["reversed"] = rev[::-1]
        # Every other element of a wider buffer: non-contiguous.
        wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        wide[..., ::2] = a
        out["strided"] = wide[..., ::2]
    return out


def arange(shape, dtype="float64"):
    return (np.arange(int(np.prod(shape))) - 3).astype(dtype).reshape(shape)


# --------------------------------------------------------------------------
# DimShuffle


@pytest.mark.parametrize("shape", [(2, 3, 4), (0, 3, 1), (1, 3, 1)])
def test_dimshuffle_transpose_expand_squeeze(shape):
    x = tn.tensor3("x")
    outs = [tn.transpose(x), DimShuffle(3, (2, "x", 0, 1))(x), tn.expand_dims(x, (0, -1))]
    f_py, f_c = both("ds3", [In(x, borrow=True)], [Out(o, borrow=True) for o in outs])
    assert kinds(f_c) == ["view"] * len(outs)
    for name, a in layouts(arange(shape)).items():
        got, want = f_c(a), f_py(a)
        assert_same(got, want)
        for g, w in zip(got, want):
            assert g.strides == w.strides, name
            assert np.shares_memory(g, a) == np.shares_memory(w, a)


def test_dimshuffle_drops_length_one_axes_only():
    x = tn.tensor3("x")
    f_py, f_c = both("squeeze", [x], tn.squeeze(x, (0, 2)))
    assert kinds(f_c) == ["view"]
    a = arange((1, 4, 1), "int32")
    assert_same(f_c(a), f_py(a))
    bad = arange((2, 4, 1))
    with pytest.raises(ValueError) as py_err:
        f_py(bad)
    with pytest.raises(ValueError, match="cannot drop axis 0 of an array of shape \\(2, 4, 1\\)"):
        f_c(bad)
    assert "cannot drop axis 0" in str(py_err.value)


def test_dimshuffle_of_a_0d_input():
    x = tn.scalar("x", dtype="float32")
    f_py, f_c = both("ds0", [In(x, borrow=True)], Out(DimShuffle(0, ("x", "x"))(x), borrow=True))
    assert kinds(f_c) == ["view"]
    a = np.array(2.5, dtype="float32")
    got = f_c(a)
    assert_same(got, f_py(a))
    assert np.shares_memory(got, a)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int64", "float32"])
def test_dimshuffle_dtypes(dtype):
    x = tn.matrix("x", dtype=dtype)
    f_py, f_c = both(f"ds_{dtype}", [x], [x.T, DimShuffle(2, ("x", 1, 0))(x)])
    assert kinds(f_c) == ["view", "view"]
    a = arange((3, 2)).astype(dtype)
    assert_same(f_c(a), f_py(a))


# --------------------------------------------------------------------------
# Reshape


def test_reshape_static_shapes_view_or_copy():
    x = tn.matrix("x")
    outs = [tn.reshape(x, (-1,)), tn.reshape(x, (3, -1, 2)), tn.flatten(x)]
    f_py, f_c = both("rs", [In(x, borrow=True)], [Out(o, borrow=True) for o in outs])
    assert kinds_of(f_c, Reshape) == ["view"] * 3   # (flatten reads the shape in a py step)
    for name, a in layouts(arange((6, 2))).items():
        got, want = f_c(a), f_py(a)
        assert_same(got, want)
        for g, w in zip(got, want):
            # A view when NumPy can make one (contiguous), else a copy, as in perform.
            assert np.shares_memory(g, a) == np.shares_memory(w, a), name
        if name == "c":
            assert all(np.shares_memory(g, a) for g in got)


def test_reshape_symbolic_shape_and_errors():
    x = tn.matrix("x")
    n, m = tn.scalar("n", dtype="int64"), tn.scalar("m", dtype="int32")
    f_py, f_c = both("rs_sym", [x, n, m], tn.reshape(x, (n, m)))
    assert kinds_of(f_c, Reshape) == ["view"]
    a = arange((4, 3))
    for shape in [(2, 6), (-1, 4), (12, -1), (3, 4)]:
        assert_same(f_c(a, *shape), f_py(a, *shape))
    assert_same(f_c(arange((0, 3)), 0, -1 + 6), f_py(arange((0, 3)), 0, 5))
    for bad, pattern in [((5, -1), "cannot reshape an array of shape \\(4, 3\\) \\(size 12\\) "
                                   "into shape \\(5, -1\\)"),
                         ((-1, -1), "invalid shape \\(-1, -1\\)"),
                         ((-2, -6), "invalid shape"),
                         ((7, 2), "cannot reshape")]:
        with pytest.raises(ValueError):
            f_py(a, *bad)
        with pytest.raises(ValueError, match=pattern):
            f_c(a, *bad)


def test_reshape_keeps_dtype_and_handles_0d():
    x = tn.scalar("x", dtype="int16")
    f_py, f_c = both("rs0", [x], [tn.reshape(x, (1, 1)), tn.reshape(x, (-1,))])
    a = np.array(7, dtype="int16")
    assert_same(f_c(a), f_py(a))


# --------------------------------------------------------------------------
# Subtensor: static patterns over several layouts


STATIC = {
    "int": lambda x: x[1],
    "negative_int": lambda x: x[-1, -2],
    "slices": lambda x: x[1:, ::2],
    "negative_steps": lambda x: x[::-1, -1:0:-2],
    "clipped": lambda x: x[-100:100, 5:1000],
    "empty": lambda x: x[3:1, ::-1],
    "newaxis": lambda x: x[None, :, 1, None],
    "all_ints": lambda x: x[2, 0],
}


@pytest.mark.parametrize("case", sorted(STATIC))
def test_subtensor_static(case):
    x = tn.matrix("x")
    f_py, f_c = both(f"st_{case}", [In(x, borrow=True)], Out(STATIC[case](x), borrow=True))
    assert kinds(f_c) == ["view"]
    for name, a in layouts(arange((4, 3))).items():
        got, want = f_c(a), f_py(a)
        assert_same(got, want)
        assert got.strides == want.strides, name
        assert np.shares_memory(got, a) == np.shares_memory(want, a)
        assert got.base is not None   # a view, never a copy


def test_subtensor_static_out_of_range():
    x = tn.matrix("x")
    f_py, f_c = both("st_oob", [x], x[3, -4])
    a = arange((4, 4))
    assert_same(f_c(a), f_py(a))
    for small in [arange((3, 4)), arange((4, 3)), arange((0, 5))]:
        with pytest.raises(IndexError):
            f_py(small)
        with pytest.raises(IndexError, match="out of bounds for axis .* input 0 \\(x\\)|"
                                             "input 0 \\(x\\).*out of bounds"):
            f_c(small)


def test_subtensor_result_is_readonly_like_its_input():
    x = tn.matrix("x")
    f_py, f_c = both("st_ro", [In(x, borrow=True)], Out(x[1:], borrow=True))
    a = arange((3, 2))
    a.flags.writeable = False
    got, want = f_c(a), f_py(a)
    assert_same(got, want)
    assert got.flags.writeable == want.flags.writeable


# --------------------------------------------------------------------------
# Subtensor: symbolic indices, varied by hypothesis


def _scalar(name):
    return tn.scalar(name, dtype="int64")


def _symbolic_functions():
    x = tn.matrix("x")
    i, j, k, s = (_scalar(n) for n in "ijks")
    return {
        "int_slice": ([x, i, j, k, s], x[i, j:k:s]),
        "slice_int": ([x, i, j, s], x[i::s, j]),
        "none_stop": ([x, j, s], x[:, j::s]),
        "none_start": ([x, k, s], x[:k:s, None]),
        "two_ints": ([x, i, j], x[i, j]),
    }


SYMBOLIC = _symbolic_functions()
small = st.integers(-7, 7)


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(sorted(SYMBOLIC)), rows=st.integers(0, 5), cols=st.integers(0, 5),
       values=st.lists(small, min_size=4, max_size=4), layout=st.sampled_from(["c", "f",
                                                                                  "reversed",
                                                                                  "strided"]))
def test_subtensor_symbolic_matches_py(case, rows, cols, values, layout):
    inputs, out = SYMBOLIC[case]
    f_py, f_c = both(f"sym_{case}", [In(inputs[0], borrow=True), *inputs[1:]],
                     Out(out, borrow=True))
    assert kinds(f_c)[-1] == "view" and "py" not in kinds(f_c)
    a = layouts(arange((rows, max(cols, 1))))[layout]
    args = values[:len(inputs) - 1]
    try:
        want = f_py(a, *args)
    except (IndexError, ValueError) as exc:
        with pytest.raises(type(exc)):
            f_c(a, *args)
        return
    got = f_c(a, *args)
    assert_same(got, want)
    assert got.strides == want.strides or got.size <= 1
    assert np.shares_memory(got, a) == np.shares_memory(want, a)


def test_subtensor_zero_step_and_huge_indices():
    inputs, out = SYMBOLIC["int_slice"]
    f_py, f_c = both("sym_int_slice", [In(inputs[0], borrow=True), *inputs[1:]],
                     Out(out, borrow=True))
    a = arange((3, 4))
    with pytest.raises(ValueError):
        f_py(a, 0, 0, 2, 0)
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        f_c(a, 0, 0, 2, 0)
    big = np.iinfo(np.int64)
    for args in [(0, big.min, big.max, 1), (-1, big.max, big.min, big.min), (0, 0, 4, big.max)]:
        assert_same(f_c(a, *args), f_py(a, *args))
    with pytest.raises(IndexError):
        f_c(a, big.min, 0, 1, 1)


def test_subtensor_index_of_other_integer_dtypes():
    x = tn.vector("x")
    i, j = tn.scalar("i", dtype="uint8"), tn.scalar("j", dtype="int16")
    f_py, f_c = both("sym_dtypes", [x, i, j], [x[i], x[j::-1]])
    assert kinds(f_c) == ["view", "view"]
    a = arange((6,))
    for args in [(0, -1), (5, 2), (3, -7)]:
        assert_same(f_c(a, *args), f_py(a, *args))
    with pytest.raises(IndexError):
        f_c(a, 200, 0)


def test_view_of_a_computed_value_and_error_note():
    x = tn.vector("x")
    i = _scalar("i")
    y = tn.exp(x)[i] * 2
    f_py, f_c = both("chain", [x, i], y)
    assert "view" in kinds(f_c)
    a = np.linspace(0, 1, 5)
    assert_same(f_c(a, -2), f_py(a, -2))
    with pytest.raises(IndexError) as info:
        f_c(a, 9)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "raised while computing Subtensor" in notes
