"""The CUDA dispatch table (:mod:`tenure.linkers.cuda.dispatch`): an op of a
user's joins the CUDA linker through the public registration functions --
on the device path, and with a generated kernel of its own -- and equals the
Python linker; an op with no entry is named when compiling; every part of
an entry is inherited along the MRO."""

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.cuda.device_linker import UnsupportedOnDevice
from tenure.linkers.cuda.device_ops import DEVICE_OPS, HOST_OPS, DeviceOp, register_device_op
from tenure.linkers.cuda.dispatch import (DEVICE, HOST, INPUTS, CudaContext, KernelFamily,
                                          KernelStep, lookup, register_cuda_op,
                                          unregister_cuda_op)
from tenure.linkers.cuda.elemwise import elemwise_kernel
from tenure.linkers.cuda.launch import run_elemwise
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.creation import Alloc
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.reduce import Reduce, Var
from tenure.symbolic.ops.shape import Shape
from tenure.symbolic.variable import as_tensor_variable
from tests.linkers.cuda.conftest import host

PY = tn.Mode(linker="py")


class _Square(Op):
    """``x * x``, elementwise, by NumPy functions device arrays take over."""

    def make_node(self, x):
        x = as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = np.multiply(inputs[0], inputs[0])


class Square(_Square):
    """Registered by the public function: its ``perform`` on the device."""


class SquareSub(Square):
    """Registers nothing: runs as ``Square`` does."""


class Unregistered(_Square):
    """No entry anywhere in its MRO."""


class SquareByRun(_Square):
    """Registered with a device implementation of its own."""


class SquareByKernel(_Square):
    """Registered with a generated kernel (the elementwise ``mul`` kernel)."""


register_device_op(Square)


@pytest.fixture
def registered():
    """Registrations a test makes, dropped after it (the table is global)."""
    made = []
    yield made
    for op_class in made:
        unregister_cuda_op(op_class)


def _compare(f_cuda, f_py, x, device):
    got = f_cuda(x)
    assert device.is_device_array(got)
    np.testing.assert_array_equal(host(got), f_py(x))


def test_a_registered_op_runs_on_the_device_as_the_python_linker(device, rng):
    x = tn.matrix("x")
    out = Square()(x) + 1
    f = tn.function([x], out, mode=tn.Mode(linker="cuda"))
    _compare(f, tn.function([x], out, mode=PY), rng.standard_normal((3, 4)), device)
    (step,) = [s for n, s in f._thunk.device_steps.items() if isinstance(n.op, Square)]
    assert not step.by_kernel


def test_an_unregistered_op_is_named_when_compiling(device):
    x = tn.matrix("x")
    with pytest.raises(UnsupportedOnDevice,
                       match=r"cuda linker cannot run Unregistered on the device \(no kernel "
                             r"and no device implementation\).*Unregistered\(x\)"):
        tn.function([x], Unregistered()(x) + 1, mode=tn.Mode(linker="cuda"))


def test_a_subclass_runs_by_its_base_s_entry(device, rng):
    assert lookup(SquareSub).device is lookup(Square).device is DEVICE_OPS[Square]
    assert SquareSub not in DEVICE_OPS          # the view lists own entries only
    x = tn.matrix("x")
    f = tn.function([x], SquareSub()(x), mode=tn.Mode(linker="cuda"))
    _compare(f, tn.function([x], SquareSub()(x), mode=PY), rng.standard_normal((2, 5)), device)


def test_a_device_implementation_receives_the_linker_s_context(device, rng, registered):
    contexts = []

    def square(node, inputs, cells, runtime):
        cells[0][0] = inputs[0] * inputs[0]

    def compile_square(node, context):
        contexts.append(context)
        return square

    register_cuda_op(SquareByRun, device=DeviceOp(square, compile=compile_square))
    registered.append(SquareByRun)
    x = tn.matrix("x")
    mode = tn.Mode(linker="cuda")
    f = tn.function([x], SquareByRun()(x) * 2, mode=mode)
    _compare(f, tn.function([x], SquareByRun()(x) * 2, mode=PY), rng.standard_normal((4, 3)),
             device)
    # once per thunk that compiles the node (a CUDA graph's arena is one more)
    assert contexts and all(isinstance(c, CudaContext) for c in contexts)
    assert {c.linker.name for c in contexts} == {"cuda"}
    assert all(c.runtime is device and c.backend is f._thunk.backend for c in contexts)


class _SquareKernels:
    """``SquareByKernel``'s kernel family (any object with ``step`` is one):
    the elementwise ``mul`` kernel of the node's input type, launched over
    ``x, x``; records the contexts it receives."""

    def __init__(self):
        self.contexts = []

    def step(self, node, backend, context=None):
        self.contexts.append(context)
        mul = Elemwise(ps.mul).make_node(node.inputs[0], node.inputs[0])
        return KernelStep(backend, elemwise_kernel(mul), _square_launcher(mul))


def _square_launcher(mul):
    def run(backend, kernel, node, inputs, spare=None):
        return run_elemwise(backend, kernel, mul, inputs * 2, spare=spare)
    return run


@pytest.mark.parametrize("linker", ["cuda_host", "cuda"])
def test_a_registered_kernel_family_computes_the_op(linker, device, rng, registered):
    family = _SquareKernels()
    register_cuda_op(SquareByKernel, kernel=family)
    registered.append(SquareByKernel)
    x = tn.matrix("x")
    f = tn.function([x], SquareByKernel()(x), mode=tn.Mode(linker=linker))
    want = tn.function([x], SquareByKernel()(x), mode=PY)
    value = rng.standard_normal((3, 2))
    got = f(value)
    np.testing.assert_array_equal(host(got) if linker == "cuda" else got, want(value))
    assert [type(n.op) for n in f._thunk.kernel_steps] == [SquareByKernel]
    assert family.contexts[0].linker.name == linker


def test_each_part_is_inherited_until_overridden(registered):
    class Base(_Square):
        pass

    class Child(Base):
        pass

    registered.extend([Base, Child])
    register_device_op(Base)
    register_cuda_op(Base, placement=DEVICE)
    assert lookup(Child).device is lookup(Base).device and lookup(Child).placement == DEVICE
    register_cuda_op(Child, device=None)             # no device part, placement still the base's
    assert lookup(Child).device is None and lookup(Child).placement == DEVICE
    unregister_cuda_op(Child)
    assert lookup(Child).device is lookup(Base).device
    unregister_cuda_op(Base, "placement")
    assert lookup(Child).placement == INPUTS and Base in DEVICE_OPS


def test_the_built_in_entries():
    """Var has a device implementation of its own, and the reduction kernel
    family of Reduce (whose builder declines it); alloc creates arrays on the
    device, Shape runs on the host."""
    assert lookup(Var).device is not lookup(Reduce).device
    assert lookup(Var).kernel is lookup(Reduce).kernel is not None
    assert lookup(Alloc).placement == DEVICE and lookup(Shape).placement == HOST
    assert Shape in HOST_OPS and Alloc not in HOST_OPS and list(HOST_OPS) == [Shape]
    assert lookup(Elemwise).kernel is not None and lookup(Elemwise).device is not None


def test_registration_refuses_what_is_not_an_entry():
    with pytest.raises(TypeError, match="is not a class"):
        register_cuda_op(Square(), device=DeviceOp(None))
    with pytest.raises(TypeError, match="not a DeviceOp"):
        register_cuda_op(Unregistered, device=lambda *a: None)
    with pytest.raises(ValueError, match="placement"):
        register_cuda_op(Unregistered, placement="gpu")
    with pytest.raises(ValueError, match="exactly one of run and make_step"):
        KernelFamily(build=elemwise_kernel)
    assert lookup(Unregistered).device is None
