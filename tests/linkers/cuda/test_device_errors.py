"""Indexing faults on the device path (issue 30): CuPy checks less than
NumPy, and words its errors otherwise; the emulated device behaves as CuPy
there (so CI sees what a GPU does), and the cuda linker raises the NumPy
executor's own error for every fault, word for word.

The first tests pin the emulated device's CuPy behaviour; on a GPU
(``device`` fixture) the same assertions run against CuPy itself."""

import numpy as np
import pytest

import tenure as tn

from tests.linkers.cuda.conftest import host


def _vector(runtime, values, dtype=np.int64):
    return runtime.from_host(np.asarray(values, dtype=dtype))


# -- the emulated device is CuPy where CuPy differs from NumPy ----------------

def test_index_arrays_wrap_around(device):
    x = _vector(device, [10, 11, 12], np.float64)
    assert host(x[_vector(device, [1, 3, -4])]).tolist() == [11.0, 10.0, 12.0]
    m = device.from_host(np.arange(6.0).reshape(2, 3))
    assert host(m[:, _vector(device, [3])]).ravel().tolist() == [0.0, 3.0]
    assert host(x.take(_vector(device, [0, 6]))).tolist() == [10.0, 10.0]
    assert host(np.take(x, _vector(device, [4]))).tolist() == [11.0]


def test_scatters_wrap_around(device):
    x = _vector(device, [0, 0, 0], np.float64)
    x[_vector(device, [3])] = 5.0
    np.add.at(x, _vector(device, [4]), 1.0)
    assert host(x).tolist() == [5.0, 1.0, 0.0]


def test_cupy_words_and_exception_types(device):
    x = _vector(device, [1.0, 2.0, 3.0], np.float64)
    with pytest.raises(ValueError, match=r"^Slice step must be nonzero\.$"):
        x[::0]
    with pytest.raises(IndexError, match="^Index 3 is out of bounds for axis 0 with size 3$"):
        x[3]
    m = device.from_host(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"operands could not be broadcast together"):
        m[_vector(device, [0, 1]), _vector(device, [0, 1, 2])]
    a = device.from_host(np.array(False))
    with pytest.raises(ValueError, match="An input is zero-dim while axes has dimensions"):
        np.tensordot(a, a, axes=([], []))
    assert host(np.tensordot(a, a, axes=((), ()))).tolist() is False
    with pytest.raises(IndexError, match="cannot do a non-empty take from an empty axes"):
        device.from_host(np.zeros(0))[_vector(device, [0])]


# -- every fault raises the reference's error on the cuda linker -------------

def _error(fn, args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return type(info.value), str(info.value).splitlines()[0]


def _faults():
    """(name, graph builder, arguments): each call faults on its index."""
    x, m = tn.vector("x"), tn.matrix("m")
    i, j = tn.vector("i", dtype="int64"), tn.vector("j", dtype="int64")
    k = tn.scalar("k", dtype="int64")
    three, two_by_three = np.arange(3.0), np.zeros((2, 3))
    return [
        ("zero step", [x, k], x[::k], (three, 0)),
        ("integer past the end", [x, k], x[k], (three, 3)),
        ("integer before the start", [x, k], x[k], (three, -4)),
        ("array index past the end", [m, i], m[:, i], (two_by_three, [0, 3])),
        ("array index before the start", [m, i], m[:, i], (two_by_three, [-4])),
        ("take past the end", [m], tn.take(m, [0, 6]), (two_by_three,)),
        ("array on an empty axis", [x, i], x[i], (np.zeros(0), [0])),
        ("2-d index array", [x, i], x[i.reshape((1, -1))], (three, [1, 5])),
        ("shape mismatch", [m, i, j], m[i, j], (two_by_three, [0, 1], [0, 1, 2])),
        ("inc past the end", [x, i], x[i].inc(1.0), (three, [3])),
        ("set past the end", [x, i], x[i].set(1.0), (three, [0, 7])),
        ("inc at an integer past the end", [x, k], x[k].inc(1.0), (three, 5)),
        ("inc with a zero step", [x, k], x[::k].inc(1.0), (three, 0)),
    ]


@pytest.mark.parametrize("case", range(len(_faults())), ids=[f[0] for f in _faults()])
def test_index_faults_raise_the_reference_error(case):
    name, inputs, output, args = _faults()[case]
    expected = _error(tn.function(inputs, output, mode=tn.Mode(linker="py")), args)
    with tn.config.change_flags(cuda_emulation=True):
        fn = tn.function(inputs, output, mode=tn.Mode(linker="cuda"))
    assert _error(fn, args) == expected


def test_in_range_indices_still_work_on_the_device():
    m, i = tn.matrix("m"), tn.vector("i", dtype="int64")
    value, index = np.arange(6.0).reshape(2, 3), np.array([-3, 2, 0])
    with tn.config.change_flags(cuda_emulation=True):
        fn = tn.function([m, i], [m[:, i], m[1][i].inc(1.0)], mode=tn.Mode(linker="cuda"))
        got = [host(r) for r in fn(value, index)]
    np.testing.assert_array_equal(got[0], value[:, index])
    expected = value[1].copy()
    np.add.at(expected, index, 1.0)
    np.testing.assert_array_equal(got[1], expected)


def test_failed_update_leaves_the_shared_variable_alone():
    # the check runs before the scatter: a call that raises writes nothing
    with tn.config.change_flags(cuda_emulation=True):
        s = tn.shared(np.zeros(3), name="s", device="cuda")
        i = tn.vector("i", dtype="int64")
        fn = tn.function([i], [], updates=[(s, tn.inc_subtensor(s[i], 1.0))],
                         mode=tn.Mode(linker="cuda"))
        with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
            fn(np.array([0, 3]))
        assert s.get_value().tolist() == [0.0, 0.0, 0.0]


def test_tensordot_of_0d_bools_on_the_device():
    a, b = tn.tensor("a", dtype="bool", shape=()), tn.tensor("b", dtype="bool", shape=())
    with tn.config.change_flags(cuda_emulation=True):
        fn = tn.function([a, b], tn.tensordot(a, b, axes=0), mode=tn.Mode(linker="cuda"))
        assert host(fn(np.array(True), np.array(True))).tolist() is True
