"""The thunk interface: every linker's thunk is a :class:`Thunk`, and the
base's defaults mean "nothing special"."""

import importlib.util

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.table import LINKERS
from tenure.linkers.cuda.device_linker import DeviceThunk
from tenure.linkers.thunk import Thunk
from tenure.symbolic.types import TensorType


class Doubling(Thunk):
    """The smallest thunk: only a call."""

    def __call__(self, values):
        return [2 * v for v in values]


def test_a_thunk_must_define_its_call():
    with pytest.raises(TypeError, match="abstract"):
        Thunk()


def test_the_defaults_mean_nothing_special():
    thunk = Doubling()
    values = [np.ones(2)]
    assert thunk.place_inputs(values) is values
    assert thunk.kept_slots == () and thunk.kept_buffers() == []
    assert thunk.fresh_results is False and thunk.runtime is None
    assert thunk.fast_call_parts() is None
    thunk.drop_kept(0)
    thunk.free()
    thunk.set_call_layout(1, 1, [])
    assert thunk.private_copy() is not thunk
    with pytest.raises(NotImplementedError, match="no memory plan"):
        thunk.plan_for(values)


def test_the_default_gate_is_the_type_filter():
    type_ = TensorType("float64", (None,))
    assert Doubling.filter_input(type_, [1, 2], False, "x").dtype == np.float64
    with pytest.raises(TypeError, match="x"):
        Doubling.filter_input(type_, np.zeros(2, dtype=np.complex128), False, "x")


def _available(name: str) -> bool:
    if name == "dask":
        return importlib.util.find_spec("dask") is not None
    return name != "cuda"   # the device linker: checked by class below


@pytest.mark.parametrize("name", [n for n in LINKERS if _available(n)])
def test_every_linker_makes_thunks(name):
    x = tn.vector("x", dtype="float64")
    mode = tn.Mode(linker=name, compute=True) if name == "dask" else tn.Mode(linker=name)
    f = tn.function([x], tn.exp(x) + 1.0, mode=mode)
    assert isinstance(f._thunk, Thunk)
    assert mode.make_linker().name == name
    np.testing.assert_allclose(f(np.arange(3.0)), np.exp(np.arange(3.0)) + 1.0)


def test_the_device_thunk_is_a_thunk():
    assert issubclass(DeviceThunk, Thunk)


def test_an_unknown_linker_lists_the_table():
    with pytest.raises(ValueError, match="expected one of py, c, check, dask, cuda, "
                                         "cuda_host"):
        tn.Mode(linker="fortran")
