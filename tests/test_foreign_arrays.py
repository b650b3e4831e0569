"""Arrays from other libraries at the input gate and in shared variables.

The rule: a CPU array that speaks DLPack (``__dlpack__``) or the array
interface is taken as an ndarray view of its memory, without a copy, and then
follows the same memory contract as an ndarray: ``In(borrow=True)`` computes
on the caller's memory (outputs may alias it), the default ``In`` neither
writes it nor returns it, ``In(borrow=True, mutable=True)`` may overwrite it --
except a read-only source (a JAX array), which is copied first and never
written.  Device arrays are refused.  Outputs are NumPy arrays.

The first half needs only NumPy (small classes exposing one protocol each);
the rest runs with PyTorch and JAX, which CI installs.
"""

import tracemalloc

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out
from tests.helpers import need_module


class DLPackOnly:
    """An array that speaks only DLPack (delegating to a NumPy array)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class InterfaceOnly:
    """An array that speaks only the array interface (delegating to a NumPy array)."""

    def __init__(self, array):
        self._array = array
        self.__array_interface__ = array.__array_interface__


class OnDevice:
    """A DLPack array in CUDA memory (as a CuPy array says it is)."""

    def __dlpack__(self, **kwargs):  # pragma: no cover - never reached
        raise AssertionError("the device must be checked before the export")

    def __dlpack_device__(self):
        return (2, 0)


def read_only(array):
    array.flags.writeable = False
    return array


def foreign(kind, array):
    return DLPackOnly(array) if kind == "dlpack" else InterfaceOnly(array)


def torch_module():
    return need_module("torch", "pip install torch==2.13.0")


def jax_numpy():
    need_module("jax", 'pip install "jax[cpu]==0.10.2"')
    return need_module("jax.numpy", 'pip install "jax[cpu]==0.10.2"')


def address(array) -> int:
    return array.__array_interface__["data"][0]


KINDS = ["dlpack", "interface"]


# ---------------------------------------------------------------------------
# The gate itself


@pytest.mark.parametrize("kind", KINDS)
def test_filter_takes_the_memory_without_a_copy(kind):
    source = np.arange(6.0).reshape(2, 3)
    t = tn.TensorType("float64", (None, None))
    got = t.filter(foreign(kind, source))
    assert type(got) is np.ndarray
    assert address(got) == address(source) and np.shares_memory(got, source)
    assert got.flags.writeable
    assert t.filter(foreign(kind, source), strict=True).shape == (2, 3)
    # read-only stays read-only
    assert not t.filter(foreign(kind, read_only(np.zeros((2, 2))))).flags.writeable


@pytest.mark.parametrize("kind", KINDS)
def test_filter_checks_dtype_and_shape_like_an_ndarray(kind):
    source = np.arange(4, dtype="int32")
    # a safe cast converts, into a fresh array
    cast = tn.TensorType("float64", (None,)).filter(foreign(kind, source))
    assert cast.dtype == "float64" and not np.shares_memory(cast, source)
    # strongly typed: float64 does not go into float32 without allow_downcast
    with pytest.raises(TypeError, match="input w: expected dtype float32, got float64"):
        tn.TensorType("float32", (None,)).filter(foreign(kind, np.ones(3)), what="input w")
    with pytest.raises(TypeError, match="strict"):
        tn.TensorType("float64", (None,)).filter(foreign(kind, source), strict=True)
    with pytest.raises(TypeError, match=r"input w: expected 2 dimension\(s\)"):
        tn.TensorType("int32", (None, None)).filter(foreign(kind, source), what="input w")
    with pytest.raises(ValueError, match="static shape"):
        tn.TensorType("int32", (3,)).filter(foreign(kind, source))


def test_device_array_is_refused_with_a_clear_message(mode):
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True)], x * 2, mode=mode)
    with pytest.raises(TypeError, match=r"input 'x': expected an array in CPU memory, got a "
                       r".*OnDevice on CUDA device 0.*Mode\(linker=.cuda.\).*"
                       r"copy the array to the host"):
        f(OnDevice())
    with pytest.raises(TypeError, match="shared.. value for w: .*CUDA device 0"):
        tn.shared(OnDevice(), name="w")
    w = tn.shared(np.zeros(3), name="w")
    with pytest.raises(TypeError, match="set_value of w: .*CUDA device"):
        w.set_value(OnDevice(), borrow=True)


def test_non_numeric_array_interface_is_refused():
    t = tn.TensorType("float64", (None,))
    with pytest.raises(TypeError, match="input s: expected numeric array data"):
        t.filter(InterfaceOnly(np.array(["a", "b"])), what="input s")


# ---------------------------------------------------------------------------
# The memory contract, for foreign arrays (NumPy only)


@pytest.mark.shares_buffers
@pytest.mark.parametrize("kind", KINDS)
def test_borrowed_input_is_the_callers_memory(mode, kind):
    m = tn.matrix("m")
    f = tn.function([In(m, borrow=True)], Out(m.T, borrow=True), mode=mode)
    source = np.arange(6.0).reshape(2, 3)
    out = f(foreign(kind, source))
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, source.T)
    assert np.shares_memory(out, source) and address(out) == address(source)
    np.testing.assert_array_equal(source, np.arange(6.0).reshape(2, 3))  # not written


@pytest.mark.parametrize("kind", KINDS)
def test_default_input_is_never_written_nor_aliased(mode, kind):
    x = tn.vector("x")
    f = tn.function([x], [x, x[::-1], x + 0, tn.exp(x)], mode=mode)
    source = np.arange(4.0)
    outs = f(foreign(kind, source))
    for out in outs:
        assert type(out) is np.ndarray
        assert not np.shares_memory(out, source)
    np.testing.assert_array_equal(outs[1], [3.0, 2.0, 1.0, 0.0])
    np.testing.assert_array_equal(source, np.arange(4.0))


@pytest.mark.shares_buffers
@pytest.mark.parametrize("kind", KINDS)
def test_mutable_writeable_source_is_used_as_workspace(mode, kind):
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True, mutable=True)], Out(tn.exp(x) + 1, borrow=True),
                    mode=mode)
    source = np.arange(4.0)
    out = f(foreign(kind, source))
    np.testing.assert_allclose(out, np.exp(np.arange(4.0)) + 1)
    assert np.shares_memory(out, source)  # computed in place, into the caller's buffer


@pytest.mark.parametrize("kind", KINDS)
def test_mutable_read_only_source_is_copied_and_never_written(mode, kind):
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True, mutable=True)], Out(tn.exp(x) + 1, borrow=True),
                    mode=mode)
    source = read_only(np.arange(4.0))
    out = f(foreign(kind, source))
    np.testing.assert_allclose(out, np.exp(np.arange(4.0)) + 1)
    np.testing.assert_array_equal(source, np.arange(4.0))
    assert not np.shares_memory(out, source)
    # the copy is the function's own: the next call writes it, not the source
    f(foreign(kind, source))
    np.testing.assert_array_equal(source, np.arange(4.0))


@pytest.mark.host_buffers
@pytest.mark.parametrize("kind", KINDS)
def test_read_only_mutable_source_is_not_adopted_by_an_update(mode, kind):
    a = tn.shared(np.zeros(3), name="a")
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True, mutable=True)], [], updates=[(a, x)], mode=mode)
    source = read_only(np.ones(3))
    f(foreign(kind, source))
    stored = a.get_value(borrow=True)
    assert stored.flags.writeable and not np.shares_memory(stored, source)
    np.testing.assert_array_equal(stored, np.ones(3))
    writable = np.full(3, 2.0)
    f(foreign(kind, writable))  # given away and writeable: adopted
    assert np.shares_memory(a.get_value(borrow=True), writable)


def test_read_only_ndarray_is_not_adopted_by_an_update_either(mode):
    a = tn.shared(np.zeros(3), name="a")
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True, mutable=True)], [], updates=[(a, x)], mode=mode)
    source = read_only(np.ones(3))
    f(source)
    assert a.get_value(borrow=True).flags.writeable
    assert not np.shares_memory(a.get_value(borrow=True), source)


@pytest.mark.parametrize("kind", KINDS)
def test_default_value_is_the_functions_own_copy(mode, kind):
    x = tn.vector("x")
    source = np.arange(3.0)
    f = tn.function([In(x, value=foreign(kind, source), borrow=True)], Out(x * 2, borrow=True),
                    mode=mode)
    source[:] = 100.0  # the default was taken when compiling
    np.testing.assert_array_equal(f(), [0.0, 2.0, 4.0])


@pytest.mark.parametrize("kind", KINDS)
def test_shared_and_set_value_copy_unless_borrowed(kind):
    source = np.arange(3.0)
    s = tn.shared(foreign(kind, source), name="s")
    assert s.type == tn.TensorType("float64", (None,))
    assert not np.shares_memory(s.get_value(borrow=True), source)
    lent = tn.shared(foreign(kind, source), borrow=True)
    assert np.shares_memory(lent.get_value(borrow=True), source)
    other = np.full(3, 5.0)
    s.set_value(foreign(kind, other))
    assert not np.shares_memory(s.get_value(borrow=True), other)
    np.testing.assert_array_equal(s.get_value(), other)
    s.set_value(foreign(kind, other), borrow=True)
    assert np.shares_memory(s.get_value(borrow=True), other)
    # read-only: copied even when borrowed (storage must be writeable)
    frozen = read_only(np.ones(3))
    s.set_value(foreign(kind, frozen), borrow=True)
    assert s.get_value(borrow=True).flags.writeable
    assert not np.shares_memory(s.get_value(borrow=True), frozen)


def test_shared_keeps_the_dtype_of_a_foreign_array():
    # like an ndarray, not like a list of Python floats (which become floatX)
    with tn.config.change_flags(floatX="float64"):
        s = tn.shared(DLPackOnly(np.ones(3, dtype="float32")))
    assert s.dtype == "float32"


# ---------------------------------------------------------------------------
# PyTorch


@pytest.mark.shares_buffers
def test_torch_borrowed_input_has_the_tensors_address(mode):
    torch = torch_module()
    m = tn.matrix("m")
    f = tn.function([In(m, borrow=True)], Out(m.T, borrow=True), mode=mode)
    t = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    out = f(t)
    assert type(out) is np.ndarray
    assert address(out) == t.data_ptr()
    np.testing.assert_array_equal(out, t.numpy().T)


@pytest.mark.parametrize("linker", ["py", "c"])
def test_torch_borrowed_input_costs_no_copy_per_call(linker):
    torch = torch_module()
    m = tn.matrix("m")
    mode = tn.Mode(linker=linker)
    t = torch.rand(512, 256, dtype=torch.float64)  # 1 MiB
    nbytes = t.numel() * t.element_size()

    def traced_peak(f):
        f(t)  # warm: plans, kept buffers
        tracemalloc.start()
        try:
            f(t)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    view = tn.function([In(m, borrow=True)], Out(m.T, borrow=True), mode=mode)
    total = tn.function([In(m, borrow=True)], m.sum(), mode=mode)
    assert traced_peak(view) < nbytes // 16
    assert traced_peak(total) < nbytes // 16
    # The measure sees a copy when there is one: the default In copies the view.
    copying = tn.function([m], m.T, mode=mode)
    assert traced_peak(copying) >= nbytes


def test_torch_tensor_requiring_grad_is_refused(mode):
    torch = torch_module()
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True)], x * 2, mode=mode)
    t = torch.ones(3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(TypeError, match=r"input 'x': .*torch.Tensor that requires grad.*"
                                        r"\.detach\(\)"):
        f(t)
    np.testing.assert_array_equal(f(t.detach()), np.full(3, 2.0))
    with pytest.raises(TypeError, match=r"requires grad.*\.detach\(\)"):
        tn.shared(t)


def test_torch_unsupported_dtype_is_refused_with_the_reason():
    torch = torch_module()
    t = torch.zeros(2, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="input b: .*torch.Tensor that DLPack could not hand "
                                        "over"):
        tn.TensorType("float32", (None,)).filter(t, what="input b")


@pytest.mark.shares_buffers
def test_torch_mutable_input_is_written_in_place(mode):
    torch = torch_module()
    x = tn.vector("x")
    f = tn.function([In(x, borrow=True, mutable=True)], Out(tn.exp(x) + 1, borrow=True),
                    mode=mode)
    t = torch.arange(4, dtype=torch.float64)
    out = f(t)
    expected = np.exp(np.arange(4.0)) + 1
    np.testing.assert_allclose(out, expected)
    assert address(out) == t.data_ptr()
    np.testing.assert_allclose(t.numpy(), expected)  # torch sees the write


def test_torch_default_input_is_not_written(mode):
    torch = torch_module()
    x = tn.vector("x")
    f = tn.function([x], [x, tn.exp(x) + 1], mode=mode)
    t = torch.arange(4, dtype=torch.float64)
    same, _ = f(t)
    assert not np.shares_memory(same, t.numpy())
    assert torch.equal(t, torch.arange(4, dtype=torch.float64))


def test_torch_tensor_of_another_dtype_converts_like_an_ndarray(mode):
    torch = torch_module()
    x = tn.vector("x")  # float64
    f = tn.function([In(x, borrow=True)], Out(x, borrow=True), mode=mode)
    t = torch.arange(3, dtype=torch.float32)
    out = f(t)
    assert out.dtype == "float64" and not np.shares_memory(out, t.numpy())
    x32 = tn.vector("x32", dtype="float32")
    g = tn.function([x32], x32 * 2, mode=mode)
    with pytest.raises(TypeError, match="input 'x32': expected dtype float32, got float64"):
        g(torch.ones(3, dtype=torch.float64))


def test_torch_outputs_are_numpy_and_go_back_without_a_copy(mode):
    torch = torch_module()
    x = tn.vector("x")
    f = tn.function([x], tn.exp(x), mode=mode)
    out = f(torch.zeros(4, dtype=torch.float64))
    assert type(out) is np.ndarray
    back = torch.from_dlpack(out)
    assert back.data_ptr() == address(out)
    out[0] = 5.0
    assert back[0].item() == 5.0


def test_torch_shared_and_set_value():
    torch = torch_module()
    t = torch.arange(3, dtype=torch.float32)
    s = tn.shared(t, name="s")
    assert s.type == tn.TensorType("float32", (None,))
    assert type(s.get_value(borrow=True)) is np.ndarray
    assert address(s.get_value(borrow=True)) != t.data_ptr()
    lent = tn.shared(t, borrow=True)
    assert address(lent.get_value(borrow=True)) == t.data_ptr()
    u = torch.full((5,), 7.0)
    s.set_value(u)
    assert address(s.get_value(borrow=True)) != u.data_ptr()
    u[0] = -1.0
    np.testing.assert_array_equal(s.get_value(), np.full(5, 7.0, dtype="float32"))
    s.set_value(u, borrow=True)
    assert address(s.get_value(borrow=True)) == u.data_ptr()
    strict = tn.shared(np.zeros(2, dtype="float32"), strict=True)
    strict.set_value(torch.ones(2))  # exactly the dtype: no conversion needed
    with pytest.raises(TypeError, match="strict"):
        strict.set_value(torch.ones(2, dtype=torch.float64))


def test_torch_shared_updates_in_place_on_borrowed_memory(mode):
    torch = torch_module()
    t = torch.zeros(3, dtype=torch.float64)
    s = tn.shared(t, borrow=True)
    f = tn.function([], [], updates=[(s, s + 1)], mode=mode)
    f()
    np.testing.assert_array_equal(s.get_value(), np.ones(3))


# ---------------------------------------------------------------------------
# JAX (its arrays are read-only)


@pytest.mark.shares_buffers
def test_jax_borrowed_input_has_the_arrays_address(mode):
    jnp = jax_numpy()
    m = tn.matrix("m", dtype="float32")
    f = tn.function([In(m, borrow=True)], Out(m.T, borrow=True), mode=mode)
    j = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    out = f(j)
    view = np.from_dlpack(j)
    assert not view.flags.writeable
    assert address(out) == address(view) == j.unsafe_buffer_pointer()
    np.testing.assert_array_equal(out, view.T)


def test_jax_mutable_input_is_never_written(mode):
    jnp = jax_numpy()
    x = tn.vector("x", dtype="float32")
    f = tn.function([In(x, borrow=True, mutable=True)], Out(tn.exp(x) + 1, borrow=True),
                    mode=mode)
    j = jnp.arange(4, dtype=jnp.float32)
    before = np.array(j)
    out = f(j)
    np.testing.assert_allclose(out, np.exp(before) + 1, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(j), before)
    assert address(out) != j.unsafe_buffer_pointer()
    f(j)
    np.testing.assert_array_equal(np.asarray(j), before)


def test_jax_shared_borrow_copies_the_read_only_array():
    jnp = jax_numpy()
    j = jnp.arange(3, dtype=jnp.float32)
    s = tn.shared(j, borrow=True)
    assert s.get_value(borrow=True).flags.writeable
    assert address(s.get_value(borrow=True)) != j.unsafe_buffer_pointer()
    s.set_value(j, borrow=True)
    assert s.get_value(borrow=True).flags.writeable
    np.testing.assert_array_equal(s.get_value(), np.arange(3, dtype="float32"))
