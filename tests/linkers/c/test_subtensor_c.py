"""``set_subtensor`` / ``inc_subtensor`` with basic indices as C "subtensor"
steps (tenure/linkers/c/subtensor.py), against the Python executor: values,
dtype and shape for broadcast values, mixed dtypes (casts, integer wrap-around,
bool), negative steps, zero-size regions, symbolic indices, strided and
reversed inputs; the errors (same exception types); in place -- a mutable
input is written only when the function may, an overlapping value is read
before the writes -- and last call's buffer reused without aliasing.

Each graph is compiled once; hypothesis varies values and indices only.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure import In, Out
from tests.linkers.c.pairs import C, PY, both
from tenure.symbolic.ops.subtensor_update import AdvancedIncSubtensor, IncSubtensor



@pytest.fixture(autouse=True)
def _compiler(cc):
    """Every test here compiles: skip them all without a compiler."""




def steps(f, op_type=IncSubtensor):
    """(kind, op) of the steps running an ``op_type`` op."""
    return [(k, s.node.op) for k, s in zip(f._thunk.graph.kinds, f._thunk.plan.steps)
            if isinstance(s.node.op, op_type)]


def assert_same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def arange(shape, dtype="float64"):
    return (np.arange(int(np.prod(shape))) - 3).astype(dtype).reshape(shape)


def layouts(a):
    rev = np.ascontiguousarray(a[::-1])[::-1]
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    wide[..., ::2] = a
    return {"c": np.ascontiguousarray(a), "f": np.asfortranarray(a), "reversed": rev,
            "strided": wide[..., ::2]}


# --------------------------------------------------------------------------
# Static patterns, broadcast values, layouts


CASES = {
    "row": (lambda x, v: tn.set_subtensor(x[1], v), (4,)),
    "row_broadcast": (lambda x, v: tn.inc_subtensor(x[1:, ::2], v), (1,)),
    "column_reversed": (lambda x, v: tn.inc_subtensor(x[::-1, -1], v), (3,)),
    "element": (lambda x, v: tn.set_subtensor(x[-1, -2], v), ()),
    "newaxis": (lambda x, v: tn.inc_subtensor(x[None, 1:, None, 0], v), (2, 1)),
    "block": (lambda x, v: tn.set_subtensor(x[::-2, 1:3], v), (2, 2)),
    "empty": (lambda x, v: tn.inc_subtensor(x[3:1], v), (4,)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_static_patterns(case):
    build, v_shape = CASES[case]
    x, v = tn.matrix("x"), tn.tensor("v", dtype="float64", shape=(None,) * len(v_shape))
    f_py, f_c = both(f"static_{case}", [x, v], build(x, v))
    assert [k for k, _ in steps(f_c)] == ["subtensor"]
    value = np.arange(int(np.prod(v_shape)), dtype="float64").reshape(v_shape) + 10
    for name, a in layouts(arange((3, 4))).items():
        before = a.copy()
        got = f_c(a, value)
        assert_same(got, f_py(a, value))
        np.testing.assert_array_equal(a, before)   # x was not given away: never written
        got2 = f_c(a, value)
        assert not np.shares_memory(got, got2), name   # Out(borrow=False): fresh each call
        assert_same(got2, got)


def test_broadcast_mismatch_and_out_of_range_errors():
    x, v = tn.matrix("x"), tn.vector("v")
    i = tn.scalar("i", dtype="int64")
    f_py, f_c = both("errors", [x, v, i], tn.set_subtensor(x[i, 1:], v))
    a = arange((3, 4))
    for args, error in [((np.ones(2), 0), ValueError), ((np.ones(3), 3), IndexError),
                        ((np.ones(3), -4), IndexError), ((np.ones(4), 0), ValueError)]:
        with pytest.raises(error):
            f_py(a, *args)
        with pytest.raises(error) as info:
            f_c(a, *args)
        if error is ValueError:
            assert "set_subtensor: a value of shape" in str(info.value)
        else:
            assert "input 0 (x)" in str(info.value)
    assert_same(f_c(a, np.ones(3), -3), f_py(a, np.ones(3), -3))


# --------------------------------------------------------------------------
# Dtypes: NumPy's casts and wrap-around


@pytest.mark.parametrize("x_dtype,v_dtype", [
    ("float32", "float64"), ("float64", "float32"), ("int8", "int64"), ("uint8", "uint32"),
    ("int8", "uint32"), ("int64", "int64"), ("int32", "bool"), ("bool", "bool"), ("float32", "int64"),
    ("uint64", "uint64"), ("int16", "uint8"),
])
@pytest.mark.parametrize("verb", ["set", "inc"])
def test_dtypes(x_dtype, v_dtype, verb):
    x = tn.matrix("x", dtype=x_dtype)
    v = tn.vector("v", dtype=v_dtype)
    fn = tn.set_subtensor if verb == "set" else tn.inc_subtensor
    f_py, f_c = both(f"dtype_{verb}_{x_dtype}_{v_dtype}", [x, v], fn(x[1:, ::-1], v))
    assert [k for k, _ in steps(f_c)] == ["subtensor"]
    rng = np.random.default_rng(0)
    if np.dtype(x_dtype).kind in "iub":
        info = np.iinfo(x_dtype) if x_dtype != "bool" else None
        a = (rng.integers(info.min, info.max, size=(3, 4), endpoint=True, dtype=x_dtype)
             if info else rng.integers(0, 2, size=(3, 4)).astype(bool))
    else:
        a = (rng.normal(size=(3, 4)) * 1e3).astype(x_dtype)
    if np.dtype(v_dtype).kind in "iub":
        vinfo = np.iinfo(v_dtype) if v_dtype != "bool" else None
        value = (rng.integers(vinfo.min, vinfo.max, size=4, endpoint=True, dtype=v_dtype)
                 if vinfo else rng.integers(0, 2, size=4).astype(bool))
    else:
        value = (rng.normal(size=4) * 1e3).astype(v_dtype) + np.asarray(1 / 3, v_dtype)
    with np.errstate(all="ignore"):
        want = f_py(a, value)
    assert_same(f_c(a, value), want)


def test_integer_inc_through_a_float_stays_py():
    # NumPy adds int64 and uint64 in float64: not done in C (see subtensor.py).
    x, v = tn.vector("x", dtype="int64"), tn.vector("v", dtype="uint64")
    f_py, f_c = both("i64_u64", [x, v], tn.inc_subtensor(x[1:], v))
    assert [k for k, _ in steps(f_c)] == ["py"]
    a, value = np.arange(4, dtype="int64"), np.arange(3, dtype="uint64")
    assert_same(f_c(a, value), f_py(a, value))


def test_advanced_inc_subtensor_is_the_advanced_family_s():
    """(Integer array indexing has its own steps: tests/linkers/c/test_advanced_steps.py.)"""
    x, v = tn.vector("x"), tn.vector("v")
    f_py, f_c = both("advanced", [x, v], tn.inc_subtensor(x[[0, 2, 0]], v))
    assert [k for k, _ in steps(f_c, AdvancedIncSubtensor)] == ["advanced"]
    a, value = arange((4,)), np.ones(3)
    assert_same(f_c(a, value), f_py(a, value))


# --------------------------------------------------------------------------
# Symbolic indices, varied by hypothesis


def _symbolic():
    x, v = tn.matrix("x"), tn.vector("v")
    i, j, s = (tn.scalar(n, dtype="int64") for n in "ijs")
    return [x, v, i, j, s], {
        "set": tn.set_subtensor(x[i, j::s], v),
        "inc": tn.inc_subtensor(x[j::s, i], v),
    }


SYM_INPUTS, SYM_OUTPUTS = _symbolic()


@settings(max_examples=60, deadline=None)
@given(verb=st.sampled_from(["set", "inc"]), rows=st.integers(0, 4), cols=st.integers(1, 5),
       i=st.integers(-6, 6), j=st.integers(-6, 6), s=st.integers(-3, 3),
       v_len=st.integers(0, 5), layout=st.sampled_from(["c", "f", "reversed", "strided"]))
def test_symbolic_indices_match_py(verb, rows, cols, i, j, s, v_len, layout):
    f_py, f_c = both(f"sym_{verb}", SYM_INPUTS, SYM_OUTPUTS[verb])
    assert [k for k, _ in steps(f_c)] == ["subtensor"]
    a = layouts(arange((rows, cols)))[layout]
    value = np.arange(v_len, dtype="float64") + 0.5
    args = (a, value, i, j, s)
    try:
        want = f_py(*args)
    except (IndexError, ValueError) as exc:
        with pytest.raises(type(exc)):
            f_c(*args)
        return
    assert_same(f_c(*args), want)


# --------------------------------------------------------------------------
# In place: mutable inputs, overlap, intermediates


def test_mutable_input_is_written_in_place():
    x, v = tn.vector("x"), tn.vector("v")
    out = tn.inc_subtensor(x[::-1][1:], v)
    f_py, f_c = both("mutable", [In(x, borrow=True, mutable=True), v], Out(out, borrow=True))
    ((kind, op),) = steps(f_c)
    assert kind == "subtensor" and op.inplace
    a, value = arange((5,)), np.arange(4.0)
    want = f_py(a.copy(), value)
    got = f_c(a, value)
    assert_same(got, want)
    assert np.shares_memory(got, a)           # written where the function may write
    np.testing.assert_array_equal(a[::-1], got)


def test_input_not_given_away_is_never_written():
    x, v = tn.vector("x"), tn.vector("v")
    out = tn.inc_subtensor(x[::-1][1:], v)
    f_py = tn.function([x, v], out, mode=PY)
    for spec in (In(x), In(x, borrow=True)):
        f_c = tn.function([spec, v], Out(out, borrow=True), mode=C)
        ((kind, _),) = steps(f_c)
        assert kind == "subtensor"
        a, value = arange((5,)), np.arange(4.0)
        got = f_c(a, value)
        np.testing.assert_array_equal(a, arange((5,)))
        assert not np.shares_memory(got, a)
        assert_same(got, f_py(a, value))


def test_in_place_value_overlapping_the_output_is_read_first():
    x = tn.vector("x")
    outs = {"shift": tn.set_subtensor(x[1:], x[:-1]),
            "reverse": tn.inc_subtensor(x[:], x[::-1])}
    for name, out in outs.items():
        f_py, f_c = both(f"overlap_{name}", [In(x, borrow=True, mutable=True)],
                         Out(out, borrow=True))
        ((kind, op),) = steps(f_c)
        assert kind == "subtensor" and op.inplace
        for n in (0, 1, 6):
            a = arange((n,))
            want = f_py(a.copy())
            assert_same(f_c(a), want)


def test_read_only_mutable_input_is_copied():
    x, v = tn.vector("x"), tn.vector("v")
    f_py, f_c = both("mutable", [In(x, borrow=True, mutable=True), v],
                     Out(tn.inc_subtensor(x[::-1][1:], v), borrow=True))
    a = arange((5,))
    a.flags.writeable = False
    value = np.arange(4.0)
    want = f_py(a, value)
    got = f_c(a, value)
    assert_same(got, want)
    assert not np.shares_memory(got, a)
    np.testing.assert_array_equal(a, arange((5,)))


def test_intermediate_written_in_place_and_buffer_reused():
    x, v = tn.matrix("x"), tn.vector("v")
    out = tn.set_subtensor((x * 2)[:, 0], v) + 1
    f_py, f_c = both("intermediate", [x, v], Out(out, borrow=True))
    ((kind, op),) = steps(f_c)
    assert kind == "subtensor" and op.inplace   # x * 2 is nobody else's: written in place
    a, value = arange((3, 2)), np.array([7.0, 8.0, 9.0])
    first = f_c(a, value)
    assert_same(first, f_py(a, value))
    second = f_c(a, value * 2)
    assert_same(second, f_py(a, value * 2))


def test_not_in_place_reuses_its_buffer_without_aliasing_inputs():
    x, v = tn.vector("x"), tn.vector("v")
    out = tn.set_subtensor(x[1:3], v)
    f_py, f_c = both("reuse", [In(x, borrow=True), In(v, borrow=True)], Out(out, borrow=True))
    a = arange((5,))
    first = f_c(a, np.ones(2))
    assert_same(first, f_py(a, np.ones(2)))
    # Next call's x is the last result: its buffer cannot be the output.
    second = f_c(first, np.full(2, 3.0))
    assert_same(second, f_py(first.copy(), np.full(2, 3.0)))
    np.testing.assert_array_equal(first, f_py(a, np.ones(2)))
