"""The emulated device (tenure/linkers/cuda/emulated_device.py): arrays that
look like CuPy's over host memory, refuse what CuPy refuses, and are counted
as a memory pool counts device memory."""

import gc
import operator
import pickle
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from tenure.linkers.cuda.emulated_device import (CUPY_FUNCTIONS, IMPLICIT_CONVERSION_MESSAGE,
                                                 EmulatedDeviceArray, EmulatedIllegalAddress,
                                                 emulated_device)

DEVICE = emulated_device()
UNSUPPORTED_NDARRAY = re.escape("Unsupported type <class 'numpy.ndarray'>")


def on_device(host):
    return DEVICE.from_host(np.asarray(host))


def assert_same_array(device_array, expected):
    """``device_array`` is on the device and holds NumPy's ``expected`` (dtype too)."""
    assert isinstance(device_array, EmulatedDeviceArray)
    assert device_array.dtype == expected.dtype
    np.testing.assert_array_equal(device_array.get(), expected)


@pytest.fixture
def host():
    return np.arange(24, dtype=np.float64).reshape(4, 6)


class TestAttributes:
    @pytest.mark.parametrize("make_view", [
        lambda a: a,
        lambda a: a[::-1],
        lambda a: a[:, ::-2],
        lambda a: a[::-2, 1::3],
        lambda a: a.T,
        lambda a: a.T[::-1],
        lambda a: a[2],
        lambda a: a[1:3, None, 2],
    ], ids=["whole", "rows reversed", "columns reversed", "both strided", "transpose",
            "transpose reversed", "row", "new axis"])
    def test_views_report_numpys_attributes(self, host, make_view):
        device = on_device(host)
        host_view, device_view = make_view(host), make_view(device)
        for name in ("shape", "dtype", "strides", "ndim", "size", "nbytes", "itemsize"):
            assert getattr(device_view, name) == getattr(host_view, name), name
        assert device_view.flags.c_contiguous == host_view.flags.c_contiguous
        assert device_view.flags.f_contiguous == host_view.flags.f_contiguous
        # the same element offset into the same memory
        offset = device_view.data.ptr - device.data.ptr
        assert offset == host_view.ctypes.data - host.ctypes.data
        np.testing.assert_array_equal(device_view.get(), host_view)

    def test_view_base_and_ownership(self, host):
        device = on_device(host)
        view = device[1:, ::-1].T
        assert view.base is device and device.base is None   # the owner, as on CuPy
        assert device.flags.owndata and not view.flags.owndata
        assert device.flags["C_CONTIGUOUS"] and not view.flags["C_CONTIGUOUS"]
        assert not hasattr(view.flags, "writeable")   # device memory has no such flag

    def test_mT_swaps_the_last_two_axes(self):
        host = np.arange(24.0).reshape(2, 3, 4)
        assert_same_array(on_device(host).mT, host.mT)

    def test_repr_says_emulated(self):
        assert repr(on_device([1.0, 2.0])) == "EmulatedDeviceArray([1., 2.])"
        assert repr(on_device(np.zeros(2, np.float32))) == \
            "EmulatedDeviceArray([0., 0.], dtype=float32)"


def _outcome(convert, value):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return convert(value)
        except TypeError:
            return TypeError


class TestImplicitConversion:
    @pytest.mark.parametrize("convert", [
        np.asarray, np.array, np.ascontiguousarray, lambda a: np.array([a, a]),
        lambda a: np.asarray(a, dtype=np.float32),
    ], ids=["asarray", "array", "ascontiguousarray", "array of list", "asarray dtype"])
    def test_refused_with_cupys_words(self, convert):
        with pytest.raises(TypeError, match=re.escape(IMPLICIT_CONVERSION_MESSAGE)):
            convert(on_device([1.0, 2.0]))

    def test_dlpack_reports_a_cuda_device_and_copies_only_to_an_explicit_cpu(self):
        device = on_device([1.0, 2.0])
        assert device.__dlpack_device__() == (2, 0)
        with pytest.raises(BufferError):
            np.from_dlpack(device)
        copy = np.from_dlpack(device, device="cpu")
        np.testing.assert_array_equal(copy, [1.0, 2.0])
        assert not np.shares_memory(copy, device._host)
        with pytest.raises(ValueError, match="without copy"):
            np.from_dlpack(device, device="cpu", copy=False)

    def test_there_is_no_index(self):
        scalar = on_device(np.array(2))
        with pytest.raises(TypeError):
            operator.index(scalar)
        with pytest.raises(TypeError):
            [0, 1, 2][scalar]

    def test_explicit_scalar_reads(self):
        device = on_device(np.array(2.5))
        assert int(device) == 2 and float(device) == 2.5 and complex(device) == 2.5 + 0j
        assert bool(on_device([0.0])) is False
        # CuPy converts through NumPy (int(a.get())): an ndim > 0 array of one
        # element converts exactly when NumPy's does (NumPy 2.4 refuses it)
        for convert in (int, float, complex):
            assert _outcome(convert, on_device([[2.5]])) == _outcome(convert, np.array([[2.5]]))
        assert int(on_device(np.array([4, 5]))[1]) == 5
        assert on_device([7]).item() == 7 and on_device([[1, 2]]).tolist() == [[1, 2]]
        with pytest.raises(TypeError):
            float(on_device([1.0, 2.0]))
        with pytest.raises(ValueError):
            bool(on_device([1.0, 2.0]))


class TestUfuncsAndOperators:
    @pytest.mark.parametrize("op", [
        operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
        operator.mod, operator.pow, operator.lt, operator.le, operator.eq, operator.ne,
        operator.gt, operator.ge, operator.and_, operator.or_, operator.xor,
        operator.lshift, operator.rshift, operator.matmul,
    ])
    def test_binary_operators_match_numpy(self, op):
        left, right = np.arange(1, 10).reshape(3, 3), np.arange(9, 0, -1).reshape(3, 3) % 4 + 1
        assert_same_array(op(on_device(left), on_device(right)), op(left, right))
        if op is not operator.matmul:   # matmul takes no scalars
            assert_same_array(op(on_device(left), 3), op(left, 3))
            assert_same_array(op(3, on_device(right)), op(3, right))   # reflected

    @pytest.mark.parametrize("op", [operator.neg, operator.pos, abs, operator.invert])
    def test_unary_operators_match_numpy(self, op):
        host = np.array([-3, 0, 5], dtype=np.int16)
        assert_same_array(op(on_device(host)), op(host))

    @pytest.mark.parametrize("op, host_op", [
        (operator.iadd, np.add), (operator.isub, np.subtract), (operator.imul, np.multiply),
        (operator.itruediv, np.true_divide), (operator.ipow, np.power),
    ])
    def test_in_place_operators_write_the_same_memory(self, op, host_op):
        host = np.array([1.0, 2.0, 4.0])
        device = on_device(host)
        pointer = device.data.ptr
        result = op(device, 2.0)
        assert result is device and device.data.ptr == pointer
        np.testing.assert_array_equal(device.get(), host_op(host, 2.0))

    @pytest.mark.parametrize("ufunc", [np.sin, np.exp, np.sqrt, np.negative, np.isnan])
    def test_unary_ufuncs_match_numpy(self, ufunc):
        host = np.linspace(0.5, 3.0, 6, dtype=np.float32)
        assert_same_array(ufunc(on_device(host)), ufunc(host))

    def test_out_is_written_in_place_and_returned(self):
        device, out = on_device([1.0, 2.0]), DEVICE.zeros(2)
        result = np.multiply(device, 10, out=out)
        assert result is out
        np.testing.assert_array_equal(out.get(), [10.0, 20.0])
        view = out[::-1]
        assert np.add(device, 1, out=view) is view
        np.testing.assert_array_equal(out.get(), [3.0, 2.0])

    def test_ufunc_methods(self):
        host = np.arange(6.0).reshape(2, 3)
        assert_same_array(np.add.reduce(on_device(host), axis=1), np.add.reduce(host, axis=1))
        assert_same_array(np.multiply.outer(on_device([1, 2]), on_device([3, 4])),
                          np.multiply.outer([1, 2], [3, 4]))
        device = on_device(np.zeros(3))
        np.add.at(device, on_device(np.array([0, 2, 0])), 1.0)
        np.testing.assert_array_equal(device.get(), [2.0, 0.0, 1.0])

    def test_scalars_mix_and_follow_numpys_promotion(self):
        single = np.array([1.0, 2.0], dtype=np.float32)
        assert_same_array(on_device(single) + 1.5, single + 1.5)            # stays float32
        assert_same_array(on_device(single) * np.float64(2), single * np.float64(2))
        assert_same_array(on_device(single) - np.array(1.0), single - np.array(1.0))
        assert_same_array(np.maximum(on_device(single), np.int8(2)),
                          np.maximum(single, np.int8(2)))

    @pytest.mark.parametrize("mix", [
        lambda d, h: d + h,
        lambda d, h: h + d,
        lambda d, h: d < h,
        lambda d, h: np.add(d, h),
        lambda d, h: np.add(h, d),
        lambda d, h: np.add(d, 1, out=h),
        lambda d, h: operator.iadd(d, h),
        lambda d, h: d @ h.reshape(2, 1),
    ], ids=["add", "radd", "compare", "ufunc", "ufunc host first", "host out", "in place",
            "matmul"])
    def test_numpy_arrays_are_refused(self, mix):
        with pytest.raises(TypeError, match=UNSUPPORTED_NDARRAY):
            mix(on_device([1.0, 2.0]), np.array([1.0, 2.0]))

    def test_comparing_with_none_is_false_everywhere(self):
        device = on_device([1.0, 2.0])
        assert_same_array(device == None, np.array([False, False]))  # noqa: E711
        assert_same_array(device != None, np.array([True, True]))  # noqa: E711


class TestArrayFunctions:
    def test_supported_functions_stay_on_the_device(self):
        a, b = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
        assert_same_array(np.concatenate([on_device(a), on_device(b)], axis=1),
                          np.concatenate([a, b], axis=1))
        assert_same_array(np.dot(on_device(a), on_device(b.T)), np.dot(a, b.T))
        assert_same_array(np.sum(on_device(a), axis=0), np.sum(a, axis=0))
        assert_same_array(np.allclose(on_device(a), on_device(a)), np.array(True))  # 0-d, as CuPy
        parts = np.split(on_device(a), 3, axis=1)
        assert isinstance(parts, list) and len(parts) == 3
        assert_same_array(parts[2], a[:, 2:])

    def test_may_share_memory_sees_views_and_separate_arrays(self):
        device = on_device(np.arange(10.0))
        assert np.may_share_memory(device, device[::-3]) is True
        assert np.shares_memory(device[:5], device[4:]) is True
        assert np.shares_memory(device[:5], device[5:]) is False
        assert np.may_share_memory(device, device.copy()) is False

    def test_copyto_writes_the_destination_memory(self):
        destination = DEVICE.zeros((2, 2))
        pointer = destination.data.ptr
        assert np.copyto(destination[:, 1], on_device([5.0, 6.0])) is None
        assert destination.data.ptr == pointer
        np.testing.assert_array_equal(destination.get(), [[0.0, 5.0], [0.0, 6.0]])

    def test_views_from_functions_keep_their_owner(self):
        device = on_device(np.arange(6.0).reshape(2, 3))
        moved = np.moveaxis(device, 0, 1)
        assert moved.base is device and np.may_share_memory(moved, device)

    @pytest.mark.parametrize("call", [
        lambda d: np.block([[d, d]]), lambda d: np.insert(d, 0, 1.0),
        lambda d: np.histogram_bin_edges(d), lambda d: np.linalg.vector_norm(d),
        lambda d: np.polyder(d[0]),
    ], ids=["block", "insert", "histogram_bin_edges", "linalg.vector_norm", "polyder"])
    def test_functions_cupy_lacks_are_refused(self, call):
        with pytest.raises(TypeError, match="no implementation found"):
            call(on_device(np.eye(2)))

    def test_functions_cupy_has_in_submodules(self):
        host = np.array([[2.0, 1.0], [1.0, 3.0]])
        assert {"linalg.inv", "fft.fft", "histogram"} <= CUPY_FUNCTIONS
        assert not {"block", "insert", "linalg.vector_norm"} & CUPY_FUNCTIONS
        assert_same_array(np.linalg.inv(on_device(host)), np.linalg.inv(host))
        assert_same_array(np.fft.fft(on_device(host[0])), np.fft.fft(host[0]))
        counts, edges = np.histogram(on_device(host), bins=2)
        assert_same_array(counts, np.histogram(host, bins=2)[0])
        assert_same_array(edges, np.histogram(host, bins=2)[1])

    @pytest.mark.parametrize("call", [
        lambda d, h: np.concatenate([d, h]),
        lambda d, h: np.may_share_memory(d, h),
        lambda d, h: np.copyto(d, h),
        lambda d, h: np.where(d > 0, d, h),
    ], ids=["concatenate", "may_share_memory", "copyto", "where"])
    def test_numpy_arrays_among_the_arguments_are_refused(self, call):
        with pytest.raises(TypeError, match=UNSUPPORTED_NDARRAY):
            call(on_device([1.0, 2.0]), np.array([3.0, 4.0]))


class TestMethods:
    def test_reductions_return_0d_device_arrays(self, host):
        device = on_device(host)
        for name in ("sum", "prod", "max", "min", "mean", "var", "std", "argmax", "argmin",
                     "all", "any"):
            result = getattr(device, name)()
            assert isinstance(result, EmulatedDeviceArray) and result.ndim == 0, name
            assert result.item() == pytest.approx(getattr(host, name)()), name
        assert_same_array(device.sum(axis=1, keepdims=True), host.sum(axis=1, keepdims=True))
        assert_same_array(device.cumsum(axis=0), host.cumsum(axis=0))

    def test_shape_and_selection_methods(self, host):
        device = on_device(host)
        assert_same_array(device.reshape(2, 12), host.reshape(2, 12))
        assert_same_array(device.transpose(1, 0), host.transpose(1, 0))
        assert_same_array(device.T.ravel(), host.T.ravel())
        assert_same_array(device[:1].squeeze(), host[:1].squeeze())
        assert_same_array(device.swapaxes(0, 1), host.swapaxes(0, 1))
        assert_same_array(device.take(on_device([3, 0]), axis=1), host.take([3, 0], axis=1))
        assert_same_array(device.repeat(2, axis=0), host.repeat(2, axis=0))
        assert_same_array(device.argsort(axis=0), host.argsort(axis=0))
        assert_same_array(device.dot(on_device(host.T)), host.dot(host.T))
        assert_same_array(device.clip(3, 8), host.clip(3, 8))
        assert_same_array(device.diagonal(), host.diagonal())
        assert_same_array(device.view(np.int64), host.view(np.int64))
        assert_same_array(on_device([1 + 2j]).conj(), np.array([1 - 2j]))

    def test_sort_is_in_place(self):
        device = on_device([3, 1, 2])
        assert device.sort() is None
        np.testing.assert_array_equal(device.get(), [1, 2, 3])

    def test_astype_copies_unless_told_not_to(self, host):
        device = on_device(host)
        assert_same_array(device.astype(np.float32), host.astype(np.float32))
        assert device.astype(np.float64, copy=False) is device
        assert device.astype(np.float64).data.ptr != device.data.ptr

    def test_fill_and_copy(self):
        device = DEVICE.empty((2, 3), np.int32)
        device.fill(7)
        copy = device.T.copy()
        assert copy.flags.c_contiguous and copy.base is None
        copy[0, 0] = 1
        np.testing.assert_array_equal(device.get(), np.full((2, 3), 7))


class TestTransfers:
    def test_get_returns_an_owned_c_ordered_copy(self, host):
        device = on_device(host)
        copy = device.T.get()
        assert isinstance(copy, np.ndarray) and copy.flags.owndata and copy.flags.c_contiguous
        np.testing.assert_array_equal(copy, host.T)
        copy[0, 0] = -1.0
        assert device.get()[0, 0] == 0.0

    def test_from_host_copies(self, host):
        device = DEVICE.from_host(host[:, ::2])
        assert device.flags.c_contiguous and device.data.ptr != host.ctypes.data
        host[0, 0] = 99.0
        assert device.get()[0, 0] == 0.0
        assert DEVICE.asarray(device) is device and DEVICE.is_device_array(device)
        assert not DEVICE.is_device_array(host)
        np.testing.assert_array_equal(DEVICE.to_host(device), host[:, ::2] * (host[:, ::2] != 99))

    def test_set_copies_into_this_memory(self):
        device = DEVICE.zeros((2, 2))
        pointer = device.data.ptr
        device.set(np.array([[1.0, 2.0], [3.0, 4.0]]))
        assert device.data.ptr == pointer
        np.testing.assert_array_equal(device.get(), [[1.0, 2.0], [3.0, 4.0]])

    @pytest.mark.parametrize("value, error", [
        (np.zeros(3), ValueError),               # shape
        (np.zeros((2, 2), np.float32), TypeError),  # dtype
        ([[1.0, 2.0], [3.0, 4.0]], TypeError),    # not a NumPy array
    ])
    def test_set_refuses_mismatches(self, value, error):
        with pytest.raises(error):
            DEVICE.zeros((2, 2)).set(value)

    def test_set_refuses_a_non_contiguous_target(self):
        with pytest.raises(RuntimeError, match="non-contiguous"):
            DEVICE.zeros((4, 4))[:, ::2].set(np.ones((4, 2)))

    def test_pickle_round_trip(self, host):
        restored = pickle.loads(pickle.dumps(on_device(host)))
        assert_same_array(restored, host)


class TestIndexing:
    def test_integer_index_is_a_0d_view(self, host):
        device = on_device(host)
        element = device[1, 2]
        assert isinstance(element, EmulatedDeviceArray) and element.shape == ()
        assert element.base is device and float(element) == host[1, 2]
        element[...] = -1.0
        assert device.get()[1, 2] == -1.0

    def test_index_arrays(self, host):
        device = on_device(host)
        assert_same_array(device[on_device([2, 0])], host[[2, 0]])
        assert_same_array(device[np.array([2, 0])], host[[2, 0]])   # accepted, as by CuPy
        assert_same_array(device[device > 20], host[host > 20])
        assert device[on_device([2, 0])].base is None   # advanced indexing copies

    def test_setitem_with_device_value_and_scalars(self):
        device = DEVICE.zeros((2, 3))
        device[0] = on_device([1.0, 2.0, 3.0])
        device[1, ::2] = 5
        device[1, 1] = np.float32(6.5)
        device[:, 0] += np.array(10.0)
        np.testing.assert_array_equal(device.get(), [[11.0, 2.0, 3.0], [15.0, 6.5, 5.0]])

    @pytest.mark.parametrize("value", [np.array([1.0, 2.0, 3.0]), [1.0, 2.0, 3.0]])
    def test_setitem_refuses_host_sequences(self, value):
        with pytest.raises(TypeError, match="Unsupported type"):
            DEVICE.zeros((2, 3))[0] = value

    def test_iteration_and_len(self, host):
        device = on_device(host)
        rows = list(device)
        assert len(device) == 4 and len(rows) == 4
        for row, expected in zip(rows, host):
            assert row.base is device
            assert_same_array(row, expected)
        with pytest.raises(TypeError, match="0-d"):
            iter(device[0, 0])
        with pytest.raises(TypeError):
            len(device[0, 0])


class TestAccounting:
    @pytest.fixture(autouse=True)
    def settle(self):
        gc.collect()   # earlier tests' arrays freed before the counts are read

    def counts(self):
        return DEVICE.used_bytes(), DEVICE.allocated_bytes(), DEVICE.n_allocations()

    def test_from_host_counts_its_bytes_and_views_nothing(self):
        used, allocated, count = self.counts()
        device = DEVICE.from_host(np.zeros(100))           # 800 bytes
        assert self.counts() == (used + 800, allocated + 800, count + 1)
        views = [device[::2], device.reshape(10, 10).T, device[3], device.view(np.int32)]
        assert self.counts() == (used + 800, allocated + 800, count + 1)
        del views

    def test_freed_when_collected_even_after_views(self):
        used, allocated, _ = self.counts()
        device = DEVICE.empty(100, np.float64)
        view = device[10:]
        del device
        gc.collect()
        assert DEVICE.used_bytes() == used + 800   # the view keeps the memory alive
        del view
        gc.collect()
        assert DEVICE.used_bytes() == used
        assert DEVICE.allocated_bytes() == allocated + 800   # never decreases

    @pytest.mark.parametrize("allocate, nbytes", [
        (lambda d: d.copy(), 80),
        (lambda d: d.astype(np.float32), 40),
        (lambda d: d + 1, 80),
        (lambda d: np.sqrt(d), 80),
        (lambda d: np.concatenate([d, d]), 160),
        (lambda d: d.sum(), 8),
        (lambda d: d[[0, 1], [1, 2]], 16),
        (lambda d: d.T.reshape(-1), 80),            # a copy NumPy makes through a view
        (lambda d: DEVICE.zeros(10, np.int16), 20),
    ], ids=["copy", "astype", "operator", "ufunc", "concatenate", "reduction",
            "advanced index", "reshape copy", "zeros"])
    def test_every_allocation_counts(self, allocate, nbytes):
        device = on_device(np.arange(10.0).reshape(2, 5))
        used, allocated, count = self.counts()
        result = allocate(device)
        assert self.counts() == (used + nbytes, allocated + nbytes, count + 1)
        del result

    def test_in_place_work_allocates_nothing(self):
        device, out = on_device(np.arange(10.0)), DEVICE.empty(10)
        before = self.counts()
        device += 1
        np.multiply(device, 2, out=out)
        device[:5] = out[5:]
        np.copyto(out, device)
        assert self.counts() == before

    def test_peak_since_reset(self):
        DEVICE.reset_peak()
        base = DEVICE.used_bytes()
        assert DEVICE.peak_bytes() == base
        big = DEVICE.empty(1000)           # 8000 bytes
        del big
        gc.collect()
        small = DEVICE.empty(10)           # 80 bytes
        assert DEVICE.peak_bytes() == base + 8000
        DEVICE.reset_peak()
        assert DEVICE.peak_bytes() == base + 80
        del small


def test_the_emulated_device_never_needs_cupy():
    # "import cupy" fails in the child: the module must import and work anyway
    code = ("import sys; sys.modules['cupy'] = None\n"
            "from tenure.linkers.cuda.emulated_device import emulated_device\n"
            "a = emulated_device().from_host([1.0, 2.0])\n"
            "assert float((a * 2).sum()) == 6.0\n"
            "assert sys.modules['cupy'] is None\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


class TestStreams:
    """Asynchronous like a GPU (issue 43): launches and copies to the device
    are queued per stream and run at the next synchronisation point; the pool
    is stream-ordered as CuPy's is, and poisons a block freed under queued
    work on an unordered stream."""

    @staticmethod
    def add_one(out, source, name="add"):
        memory, values = out._mem, source._mem   # a launch holds memory, not arrays
        DEVICE.launch(lambda: np.add(values, 1, out=memory), [out, source], name=name)

    def teardown_method(self):
        DEVICE.synchronize()

    def test_a_launch_runs_at_the_next_synchronisation_point(self):
        source, out = on_device(np.arange(3.0)), DEVICE.zeros(3)
        DEVICE.synchronize()
        self.add_one(out, source)
        assert out._mem.tolist() == [0.0, 0.0, 0.0]     # queued, not run
        assert out.get().tolist() == [1.0, 2.0, 3.0]    # a read to the host waits

    def test_new_memory_is_garbage(self):
        assert np.isnan(DEVICE.empty(4).get()).all()
        assert (DEVICE.empty(3, np.int32).get() == -1).all()

    def test_a_non_blocking_stream_is_not_ordered_with_the_null_stream(self):
        source = on_device(np.ones(3))                  # upload queued on the null stream
        with DEVICE.stream(non_blocking=True):
            early = (source * 2).get()
        assert np.isnan(early).all()
        assert (source * 2).get().tolist() == [2.0, 2.0, 2.0]

    def test_wait_event_orders_two_streams(self):
        source = on_device(np.ones(3))
        event = DEVICE.null_stream.record()
        stream = DEVICE.stream(non_blocking=True)
        stream.wait_event(event)
        with stream:
            assert (source * 2).get().tolist() == [2.0, 2.0, 2.0]
        assert event.done

    def test_a_blocking_stream_is_ordered_with_the_null_stream(self):
        source = on_device(np.ones(3))
        with DEVICE.stream():
            assert (source * 2).get().tolist() == [2.0, 2.0, 2.0]

    def test_freeing_under_a_launch_on_the_same_stream_is_safe(self):
        # CuPy's pool hands a freed block again only to its own stream,
        # after the work queued there: not a use-after-free.
        out = DEVICE.zeros(3)
        source = on_device(np.arange(3.0))
        self.add_one(out, source)
        del source
        gc.collect()
        assert out.get().tolist() == [1.0, 2.0, 3.0]

    def test_freeing_under_a_launch_on_a_blocking_stream_is_safe(self):
        out, source = DEVICE.zeros(3), on_device(np.arange(3.0))
        with DEVICE.stream() as stream:
            self.add_one(out, source)
        del source
        gc.collect()
        stream.synchronize()
        assert out.get().tolist() == [1.0, 2.0, 3.0]

    def test_freeing_under_a_launch_on_an_unordered_stream_is_caught(self):
        out, source = DEVICE.zeros(3), on_device(np.arange(3.0))
        DEVICE.synchronize()
        stream = DEVICE.stream(non_blocking=True)
        with stream:
            self.add_one(out, source, name="my_kernel")
        del source
        gc.collect()
        with pytest.raises(EmulatedIllegalAddress, match="my_kernel queued on .*non-blocking"
                                                         ".* freed before it ran"):
            stream.synchronize()
        assert out.get().tolist() == [0.0, 0.0, 0.0]   # it never ran

    def test_the_pool_counts_a_block_freed_while_queued_work_holds_it(self):
        # Earlier tests' garbage (cycles holding device arrays) is freed first:
        # the gc.collect below would otherwise free it inside the measurement.
        gc.collect()
        used = DEVICE.used_bytes()
        out, source = DEVICE.zeros(3), on_device(np.arange(3.0))
        self.add_one(out, source)
        del source
        gc.collect()
        assert DEVICE.used_bytes() == used + 24        # back in the pool: only out is held
        del out
