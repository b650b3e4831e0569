"""Array types at the input gate and in shared variables.

The rule: a masked array (``np.ma.MaskedArray``) is refused with a TypeError
that names the input and says what to do; every other ndarray subclass is
taken as a plain ``np.ndarray`` view of the same memory, so every linker
computes on the same array and the borrow rules still hold.  Shared storage
is always a plain ndarray.
"""

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out

# np.matrix is one of the subclasses checked; NumPy warns whenever one is made.
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")


class Sub(np.ndarray):
    """A user subclass that would change results if it reached an op."""

    def sum(self, *args, **kwargs):  # a subclass may override what ops call
        return np.ndarray.sum(self, *args, **kwargs) + 1000


def masked():
    return np.ma.masked_array([1.0, 2.0, 3.0, 4.0], mask=[0, 0, 0, 1])


def subclasses(tmp_path):
    """Each subclass kind holding [1, 2, 3, 4]."""
    mm = np.memmap(tmp_path / "mm.bin", dtype="float64", mode="w+", shape=(4,))
    mm[:] = [1.0, 2.0, 3.0, 4.0]
    return {
        "matrix": np.asmatrix([[1.0, 2.0], [3.0, 4.0]]),
        "memmap": mm,
        "user": np.array([1.0, 2.0, 3.0, 4.0]).view(Sub),
    }


# ---------------------------------------------------------------------------
# Masked arrays are refused


def test_masked_array_input_is_refused_on_every_linker(mode):
    x = tn.vector("x")
    f = tn.function([x], x.sum(), mode=mode)
    with pytest.raises(TypeError, match=r"input 'x'.*masked array.*\.filled\(.*\.data"):
        f(masked())
    # what the message suggests works, and gives one answer on every linker
    assert f(masked().filled(0.0)) == 6.0
    assert f(masked().data) == 10.0


def test_masked_array_refused_by_filter_with_the_name():
    t = tn.TensorType("float64", (None,))
    with pytest.raises(TypeError, match="input w: got a masked array"):
        t.filter(masked(), what="input w")
    with pytest.raises(TypeError, match="masked array"):
        t.filter(masked(), strict=True)
    assert not t.is_valid_value(masked())


def test_masked_array_refused_by_shared_and_set_value():
    with pytest.raises(TypeError, match=r"shared\(\) value for w: .*masked array.*filled"):
        tn.shared(masked(), name="w")
    with pytest.raises(TypeError, match="masked array"):
        tn.shared(masked(), borrow=True)
    w = tn.shared(np.zeros(4), name="w")
    with pytest.raises(TypeError, match="set_value of w: .*masked array"):
        w.set_value(masked())
    with pytest.raises(TypeError, match="masked array"):
        w.set_value(masked(), borrow=True)
    np.testing.assert_array_equal(w.get_value(), np.zeros(4))


def test_masked_array_refused_as_a_constant():
    x = tn.vector("x")
    with pytest.raises(TypeError, match="masked array"):
        x + masked()
    with pytest.raises(TypeError, match="masked array"):
        tn.constant(masked())


def test_masked_array_refused_as_a_default_value(mode):
    x = tn.vector("x")
    with pytest.raises(TypeError, match="default value of input x: .*masked array"):
        tn.function([In(x, value=masked())], x * 2, mode=mode)


# ---------------------------------------------------------------------------
# Other subclasses compute as plain ndarrays, on the same memory


def test_subclasses_compute_as_plain_ndarrays_on_every_linker(mode, tmp_path):
    x = tn.vector("x")
    m = tn.matrix("m")
    f = tn.function([x], [x.sum(), x * 2], mode=mode)
    g = tn.function([m], [m.sum(), m @ m], mode=mode)
    for kind, value in subclasses(tmp_path).items():
        fn = g if value.ndim == 2 else f
        total, other = fn(value)
        assert total == 10.0, kind
        plain = np.asarray(value).view(np.ndarray)
        expected = plain @ plain if value.ndim == 2 else plain * 2
        assert type(other) is np.ndarray, kind  # np.matrix would make @ a matrix product too
        np.testing.assert_array_equal(other, expected)


def test_filter_returns_a_base_class_view_of_the_same_memory(tmp_path):
    for kind, value in subclasses(tmp_path).items():
        t = tn.TensorType("float64", (None,) * value.ndim)
        out = t.filter(value)
        assert type(out) is np.ndarray, kind
        assert np.shares_memory(out, value), kind
        assert t.filter(value, strict=True).base is not None
        # a cast still converts (into a fresh array)
        cast = tn.TensorType("float32", (None,) * value.ndim).filter(value, allow_downcast=True)
        assert type(cast) is np.ndarray and not np.shares_memory(cast, value)


def test_subclass_input_is_never_written_nor_aliased_unless_lent(mode):
    x = tn.vector("x")
    value = np.arange(4.0).view(Sub)
    before = np.array(value)
    f = tn.function([x], [x + 0, x.T, tn.exp(x)], mode=mode)  # x.T: a view of the input
    for out in f(value):
        assert type(out) is np.ndarray
        assert not np.shares_memory(out, value)
    np.testing.assert_array_equal(np.asarray(value), before)


def test_borrowed_subclass_input_may_alias_but_is_not_written(mode):
    x = tn.vector("x")
    value = np.arange(4.0).view(Sub)
    f = tn.function([In(x, borrow=True)], Out(x[::-1], borrow=True), mode=mode)
    out = f(value)
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, [3.0, 2.0, 1.0, 0.0])
    np.testing.assert_array_equal(np.asarray(value), np.arange(4.0))


def test_mutable_subclass_input_may_be_overwritten(mode):
    x = tn.vector("x")
    value = np.arange(4.0).view(Sub)
    f = tn.function([In(x, borrow=True, mutable=True)], tn.exp(x) + 1, mode=mode)
    np.testing.assert_allclose(f(value), np.exp(np.arange(4.0)) + 1)


def test_default_value_subclass_is_copied(mode):
    x = tn.vector("x")
    value = np.arange(3.0).view(Sub)
    f = tn.function([In(x, value=value)], x * 2, mode=mode)
    value[:] = 100.0  # the default was taken when compiling
    np.testing.assert_array_equal(f(), [0.0, 2.0, 4.0])


# ---------------------------------------------------------------------------
# shared(): storage is always a plain ndarray


def test_shared_of_subclass_stores_a_plain_copy(tmp_path):
    for kind, value in subclasses(tmp_path).items():
        s = tn.shared(value)
        stored = s.get_value(borrow=True)
        assert type(stored) is np.ndarray, kind
        assert not np.shares_memory(stored, value), kind
        assert type(s.get_value()) is np.ndarray
        np.testing.assert_array_equal(stored, np.asarray(value))


def test_shared_borrow_of_subclass_keeps_the_memory_as_a_plain_view():
    value = np.arange(4.0).view(Sub)
    s = tn.shared(value, borrow=True)
    stored = s.get_value(borrow=True)
    assert type(stored) is np.ndarray
    assert np.shares_memory(stored, value)  # borrowed: aliasing allowed
    m = np.asmatrix(np.ones((2, 2)))
    s2 = tn.shared(m, borrow=True)
    assert type(s2.get_value(borrow=True)) is np.ndarray
    assert s2.get_value(borrow=True).shape == (2, 2)


def test_set_value_of_subclass(mode):
    w = tn.shared(np.zeros(4), name="w")
    value = np.arange(4.0).view(Sub)
    w.set_value(value)
    assert type(w.get_value(borrow=True)) is np.ndarray
    assert not np.shares_memory(w.get_value(borrow=True), value)  # copied: not borrowed
    value[:] = -1.0
    f = tn.function([], w.sum(), mode=mode)
    assert f() == 6.0
    w.set_value(value, borrow=True)
    assert type(w.get_value(borrow=True)) is np.ndarray
    assert f() == -4.0


def test_updates_of_subclass_backed_shared_stay_plain(mode):
    w = tn.shared(np.asmatrix(np.ones((2, 2))), name="w")
    f = tn.function([], w.sum(), updates=[(w, w @ w)], mode=mode)
    assert f() == 4.0
    stored = w.get_value(borrow=True)
    assert type(stored) is np.ndarray
    np.testing.assert_array_equal(stored, np.full((2, 2), 2.0))
