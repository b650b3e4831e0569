"""The C call path (tenure/linkers/c/call.py): a C-compiled function called with
arrays the C gate accepts runs without Python in between; every other call
takes the Python path, with the same results and the same errors."""

from __future__ import annotations

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out

C = tn.Mode(linker="c")
PY = tn.Mode(linker="py")


@pytest.fixture(autouse=True)
def _compiler(cc):
    return cc


class CountingFallback:
    """Wraps a function's Python path to count the calls that reach it."""

    def __init__(self, f):
        self.calls = 0
        self._call = f._call

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._call(*args, **kwargs)


def counted(inputs, outputs, **kwargs):
    """A C-compiled function whose fast path counts its fallbacks."""
    f = tn.function(inputs, outputs, mode=C, **kwargs)
    assert f._fast_call is not None
    counter = CountingFallback(f)
    f._fast_call = f._make_fast_call(fallback=counter)
    return f, counter


def test_exact_arrays_take_the_c_path_and_give_the_executors_result():
    x = tn.matrix("x")
    y = tn.vector("y")
    f, fallbacks = counted([x, y], [(tn.exp(x) * 2 + y).sum(axis=1), x * y])
    g = tn.function([x, y], [(tn.exp(x) * 2 + y).sum(axis=1), x * y], mode=PY)
    xv, yv = np.random.default_rng(0).standard_normal((2, 3, 4))[0], np.arange(4.0)
    for got, want in zip(f(xv, yv), g(xv, yv)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert fallbacks.calls == 0


def test_single_output_is_returned_itself():
    x = tn.vector("x")
    f, _ = counted([x], (x * 3).sum())
    assert np.ndim(f(np.ones(4))) == 0 and f(np.ones(4)) == 12.0


class _Subclass(np.ndarray):
    """An ndarray subclass: the C gate takes exact ndarrays only."""


@pytest.mark.parametrize("call", [
    lambda f: f(x=np.ones(3)),                        # keyword
    lambda f: f([1.0, 1.0, 1.0]),                     # a list
    lambda f: f(np.ones(3, dtype=np.int32)),          # another dtype (safe cast)
    lambda f: f(np.ones(3, dtype=">f8")),             # byte-swapped
    lambda f: f(np.ones(3).view(_Subclass)),          # a subclass
])
def test_other_arguments_take_the_python_path(call):
    x = tn.vector("x")
    f, fallbacks = counted([In(x, name="x")], x * 2)
    np.testing.assert_array_equal(np.asarray(call(f)), np.full(3, 2.0))
    assert fallbacks.calls == 1


@pytest.mark.parametrize("value, error, words", [
    (np.ones((2, 2)), TypeError, "expected 1 dimension"),
    (np.ones(3, dtype=np.complex128), TypeError, "expected"),
    (np.ones(4), ValueError, "static shape"),
    ("text", TypeError, "input"),
])
def test_bad_arguments_raise_the_python_paths_errors(value, error, words):
    x = tn.TensorType("float64", (3,))("x")
    f = tn.function([x], x * 2, mode=C)
    g = tn.function([x], x * 2, mode=PY)
    with pytest.raises(error, match=words) as c_err:
        f(value)
    with pytest.raises(error) as py_err:
        g(value)
    assert str(c_err.value) == str(py_err.value)


def test_wrong_number_of_arguments():
    x = tn.vector("x")
    f = tn.function([x], x * 2, mode=C)
    with pytest.raises(TypeError, match="missing a value"):
        f()
    with pytest.raises(TypeError, match="takes 1 argument"):
        f(np.ones(2), np.ones(2))


@pytest.mark.parametrize("make", [
    lambda: np.arange(12.0).reshape(3, 4)[:, ::-2],     # negative strides
    lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    lambda: np.zeros((0, 4)),                            # zero-size
    lambda: np.lib.stride_tricks.as_strided(np.arange(4.0), (3, 4), (0, 8)),  # stride 0
    lambda: np.arange(12.0).reshape(3, 4)[::2],
])
def test_odd_layouts_through_the_c_path(make):
    x = tn.matrix("x")
    f, fallbacks = counted([x], [tn.exp(x) + 1, (x * 2).sum(axis=0)])
    g = tn.function([x], [tn.exp(x) + 1, (x * 2).sum(axis=0)], mode=PY)
    value = make()
    for got, want in zip(f(value), g(value)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert fallbacks.calls == 0


def test_read_only_input_is_read_not_written():
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True)], tn.exp(x) * 2, mode=C)
    value = np.arange(3.0)
    value.flags.writeable = False
    np.testing.assert_allclose(f(value), np.exp(np.arange(3.0)) * 2)
    np.testing.assert_array_equal(value, np.arange(3.0))


def test_updates_are_written_from_the_values_before_the_call():
    a = tn.shared(np.arange(3.0), name="a")
    b = tn.shared(np.full(3, 10.0), name="b")
    x = tn.vector("x")
    # Each update can be computed in place into its own variable's buffer.
    f, fallbacks = counted([x], (a * x).sum(), updates=[(a, a * 2 + x), (b, b + a)])
    assert f(np.ones(3)) == 3.0
    np.testing.assert_array_equal(a.get_value(), np.arange(3.0) * 2 + 1)
    np.testing.assert_array_equal(b.get_value(), np.full(3, 10.0) + np.arange(3.0))
    assert f(np.ones(3)) == 9.0
    np.testing.assert_array_equal(a.get_value(), (np.arange(3.0) * 2 + 1) * 2 + 1)
    np.testing.assert_array_equal(b.get_value(), np.full(3, 10.0) + np.arange(3.0) * 3 + 1)
    assert fallbacks.calls == 0


def test_updates_that_need_the_python_paths_checks_still_work():
    a = tn.shared(np.arange(3.0), name="a")
    b = tn.shared(np.full(3, 10.0), name="b")
    x = tn.vector("x")
    f = tn.function([x], (a * x).sum(), updates=[(a, b * 2), (b, a + 1)], mode=C)
    assert f(np.ones(3)) == 3.0
    np.testing.assert_array_equal(a.get_value(), np.full(3, 20.0))
    np.testing.assert_array_equal(b.get_value(), np.arange(3.0) + 1)
    assert not np.shares_memory(a.get_value(borrow=True), b.get_value(borrow=True))


def test_set_value_between_calls_is_seen():
    w = tn.shared(np.ones(3), name="w")
    x = tn.vector("x")
    f, _ = counted([x], (w * x).sum())
    assert f(np.ones(3)) == 3.0
    w.set_value(np.full(3, 2.0))
    assert f(np.ones(3)) == 6.0
    w.set_value(np.full(5, 2.0))         # another shape: another shape table
    assert f(np.ones(5)) == 10.0


@pytest.mark.usefixtures("freeing_intermediates")
def test_alternating_shapes_keep_right_results():
    x = tn.matrix("x")
    f, _ = counted([In(x, borrow=True)], Out(tn.exp(x).sum(axis=1) * 2, borrow=True))
    rng = np.random.default_rng(1)
    for rows in [3, 5, 3, 1, 5, 0, 3]:
        value = rng.standard_normal((rows, 4))
        np.testing.assert_allclose(f(value), np.exp(value).sum(axis=1) * 2, rtol=1e-12)


def test_sizes_from_values_are_not_cached_by_shape():
    n = tn.scalar("n", dtype="int64")
    x = tn.vector("x")
    f = tn.function([n, x], tn.zeros(n) + x.sum(), mode=C)
    for k in [3, 5, 2]:
        np.testing.assert_array_equal(f(np.int64(k), np.ones(2)), np.full(k, 2.0))


@pytest.mark.usefixtures("freeing_intermediates")
def test_borrowed_output_passed_back_in_is_not_overwritten():
    x = tn.vector("x")
    f, fallbacks = counted([In(x, borrow=True)], Out(tn.exp(x) * 2, borrow=True))
    first = f(np.zeros(4))
    np.testing.assert_array_equal(first, np.full(4, 2.0))
    second = f(first)
    np.testing.assert_allclose(second, np.exp(np.full(4, 2.0)) * 2)
    np.testing.assert_array_equal(first, np.full(4, 2.0))
    assert not np.shares_memory(first, second)
    assert fallbacks.calls == 0


@pytest.mark.usefixtures("freeing_intermediates")
def test_borrowed_output_reuses_its_buffer_in_steady_state():
    x = tn.vector("x")
    f, _ = counted([In(x, borrow=True)], Out(tn.exp(x) * 2, borrow=True))
    value = np.ones(1000)
    first = f(value)
    address = first.__array_interface__["data"][0]
    del first
    assert f(value).__array_interface__["data"][0] == address


def test_fresh_outputs_stay_fresh():
    x = tn.vector("x")
    f, _ = counted([x], tn.exp(x) * 2)
    first = f(np.ones(5))
    second = f(np.zeros(5))
    assert not np.shares_memory(first, second)
    np.testing.assert_allclose(first, np.exp(np.ones(5)) * 2)


def test_an_error_in_the_graph_names_the_step_and_clears_intermediates():
    x = tn.vector("x")
    y = tn.vector("y")
    f = tn.function([x, y], tn.exp(x) * 2 + y, mode=C)
    with pytest.raises(ValueError) as err:
        f(np.ones(3), np.ones(4))
    assert any("raised while computing" in note for note in err.value.__notes__)
    assert all(v is None for v in f._thunk.storage)
    np.testing.assert_allclose(f(np.ones(3), np.ones(3)), np.exp(1.0) * 2 + 1)


def test_functions_the_python_path_must_guard_get_no_c_path():
    s = tn.shared(np.ones(3), name="s")
    x = tn.vector("x")
    # An output that is shared storage: the Python path copies it.
    assert tn.function([x], [x * 2, s], mode=C)._fast_call is None
    # A mutable input the graph overwrites: separated from the others it overlaps.
    f = tn.function([In(x, borrow=True, mutable=True)], tn.exp(x) * 2, mode=C)
    assert f._destroyed_inputs == [0] and f._fast_call is None
    # The Python executor has no C path.
    assert tn.function([x], x * 2, mode=PY)._fast_call is None


def test_trust_input_and_the_c_path_agree():
    x = tn.vector("x")
    f = tn.function([x], x * 2, mode=C)
    f.trust_input = True
    np.testing.assert_array_equal(f(np.ones(3)), np.full(3, 2.0))


def test_read_only_array_given_as_mutable_input_is_not_written():
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True, mutable=True)], tn.exp(x) * 2, mode=C)
    value = np.arange(3.0)
    value.flags.writeable = False
    np.testing.assert_allclose(f(value), np.exp(np.arange(3.0)) * 2)
    np.testing.assert_array_equal(value, np.arange(3.0))
    writable = np.arange(3.0)
    np.testing.assert_allclose(f(writable), np.exp(np.arange(3.0)) * 2)
