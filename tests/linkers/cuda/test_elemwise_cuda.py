"""Generated CUDA kernels for elementwise nodes (tenure/linkers/cuda/elemwise.py).

Without a GPU: every kernel the elementwise cases generate (every scalar op
on every dtype, Python-number inputs, fused and in-place nodes from real
graphs, layouts up to 5-d) is compiled for the device (NVRTC, else nvcc),
and executed on the host against NumPy: odd shapes,
broadcasting, negative strides, unaligned and overlapping operands, in place.
The tests that take ``backend`` run again on a CUDA device (CuPy arrays,
``CupyBackend``) where there is one, and skip with the reason where not.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenure.linkers.cuda import elemwise as cuda_ew
from tenure.linkers.cuda import nvrtc
from tenure.linkers.cuda.kernel_source import prelude
from tenure.linkers.cuda.launch import run_elemwise
from tenure.linkers.cuda.layout import launch_layout
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops import scalar as ps
from tests.linkers.cuda.device_compile import assert_defined, compile_all, device_compiler
from tests.linkers.elemwise_cases import (EXACT, GRAPH_CASES, OP_CASES, STRIDED_SHAPES,
                                          WEAK_CASES, array, assert_matches, check_any_strides,
                                          data, is_weak, layouts, name_of, reference, strided,
                                          var)

ALL_CASES = {**OP_CASES, **WEAK_CASES, **GRAPH_CASES}
#: built at once by the backends (conftest.py)
KERNELS = [cuda_ew.elemwise_kernel(node) for node in ALL_CASES.values()]

pytestmark = pytest.mark.xdist_group("cuda_elemwise")


def run(backend, node, *inputs, out=None):
    """``node`` on ``inputs`` (None at a Python-number position; NumPy
    arrays are copied to the backend, its own arrays used as they are)
    through its kernel, as the CUDA linker launches it."""
    inputs = [backend.from_host(a) if isinstance(a, np.ndarray) else a for a in inputs]
    return run_elemwise(backend, cuda_ew.elemwise_kernel(node), node, inputs, out=out)


def host(backend, node, *inputs, out=None) -> np.ndarray:
    """:func:`run`'s result as a NumPy array."""
    return backend.to_host(run(backend, node, *inputs, out=out))


# --------------------------------------------------------------------------
# Compiled for the device


def test_every_generated_kernel_compiles_for_the_device():
    """All of them in one module: one NVRTC program (about 5 s)."""
    ptx = compile_all(KERNELS)
    assert_defined(ptx, [cuda_ew.variant_name(k.name, ndim) for k in KERNELS
                         for ndim in range(1, k.max_ndim + 1)])


@pytest.mark.parametrize("compile_", [nvrtc.compile_ptx, nvrtc.check_compiles],
                         ids=["compile_ptx", "check_compiles"])
def test_a_kernel_that_does_not_compile_is_reported(compile_):
    device_compiler()
    with pytest.raises(nvrtc.KernelCompileError, match="undefined_thing"):
        compile_(prelude() + "\nextern \"C\" __global__ void k(int *p) "
                 "{ *p = undefined_thing; }\n")


# --------------------------------------------------------------------------
# Every scalar op on every dtype, executed


@pytest.mark.parametrize("entry", sorted(OP_CASES))
def test_scalar_op_matches_numpy(backend, entry):
    node = OP_CASES[entry]
    name = name_of(node)
    rng = np.random.default_rng(zlib.crc32(entry.encode()))
    inputs = data([v.dtype for v in node.inputs], rng, n_random=100)
    if name == "power" and node.inputs[1].dtype[0] in "iu" and node.outputs[0].dtype[0] in "iu":
        inputs[1] = np.abs(inputs[1].astype(np.int64) % 70).astype(inputs[1].dtype)
    got = host(backend, node, *inputs)
    assert_matches(got, reference(node, inputs), entry, exact=name in EXACT or name == "cast")


@pytest.mark.parametrize("entry", sorted(WEAK_CASES))
def test_python_number_inputs(backend, entry):
    node = WEAK_CASES[entry]
    rng = np.random.default_rng(7)
    arrays = iter(data([v.dtype for i, v in enumerate(node.inputs) if not is_weak(node, i)],
                       rng, n_random=100))
    inputs = [None if is_weak(node, i) else next(arrays) for i in range(len(node.inputs))]
    assert_matches(host(backend, node, *inputs), reference(node, inputs), entry, exact=True)


@pytest.mark.parametrize("dtype", ["int8", "int64"])
def test_negative_integer_power_raises_like_numpy(backend, dtype):
    node = OP_CASES[f"power__{dtype}_{dtype}"]
    assert cuda_ew.elemwise_kernel(node).uses_status
    with pytest.raises(ValueError, match="negative integer powers are not allowed"):
        run(backend, node, np.array([2, 3, 4], dtype), np.array([1, -1, 2], dtype))
    assert not cuda_ew.elemwise_kernel(OP_CASES["add__int8_int8"]).uses_status


def test_bools_holding_other_bytes_count_as_true(backend):
    node = OP_CASES["logical_xor__bool_bool"]
    a = np.array([0, 1, 2, 255, 2, 0], np.uint8).view(bool)
    b = np.array([2, 2, 1, 0, 255, 0], np.uint8).view(bool)
    got = host(backend, node, a, b)
    assert_matches(got, reference(node, [a, b]), "xor")
    assert set(got.view(np.uint8)) <= {0, 1}


# --------------------------------------------------------------------------
# Fused graphs, layouts, in place


@pytest.mark.parametrize("entry,shapes", [
    ("expsin", [(40, 33), (33,)]), ("expsin", [(1, 33), (33,)]), ("expsin", [(40, 1), (33,)]),
    ("expsin", [(0, 33), (33,)]), ("expsin", [(5, 1), (1,)]), ("expsin32", [(17, 33), (33,)]),
    ("leaky32", [(7, 131)]), ("intmix", [(30, 17), (17,)]), ("mixed", [(20, 21), (20, 21)]),
    ("gelu", [(25, 31)]), ("softmax_exp", [(30, 20), (30, 1)]),
    ("fma5", [(2, 3, 1, 4, 5), (6, 4, 5), (2, 1, 6, 4, 5)]), ("add0d", [(), ()]),
])
def test_fused_and_broadcast(backend, entry, shapes):
    node = GRAPH_CASES[entry]
    rng = np.random.default_rng(len(shapes))
    inputs = [array(s, v.dtype, rng) for s, v in zip(shapes, node.inputs)]
    assert_matches(host(backend, node, *inputs), reference(node, inputs), entry, fused=True)


@pytest.mark.parametrize("entry", sorted(STRIDED_SHAPES))
def test_any_strides(on_host, entry):
    """Strided, reversed, Fortran-ordered and unaligned inputs; transposed
    and reversed outputs."""
    node = GRAPH_CASES[entry]
    check_any_strides(entry, lambda *inputs, out=None: run(on_host, node, *inputs, out=out))


def test_in_place(backend):
    """An in-place node writes into its destroyed input when that holds the
    output; a destroyed input read through another view is copied first."""
    node = GRAPH_CASES["expsin_inplace"]
    rng = np.random.default_rng(1)
    z = rng.random(11)
    for shape, view in (((5, 11), lambda a: a), ((11, 5), lambda a: a.T),
                        ((10, 22), lambda a: a[::-2, ::2])):
        base = rng.random(shape)
        want = reference(GRAPH_CASES["expsin"], [view(base).copy(), z])
        target = view(backend.from_host(base))
        assert run(backend, node, target, z) is target
        assert_matches(backend.to_host(target), want, fused=True)
    sub = GRAPH_CASES["sub_inplace1"]
    y = rng.random((4, 9))
    want = y[0] - y
    on = backend.from_host(y)
    assert run(backend, sub, on[0], on) is on        # input 0 is a row of the destroyed input
    np.testing.assert_array_equal(backend.to_host(on), want)
    div = GRAPH_CASES["softmax_div_inplace"]
    x1, s = backend.from_host(rng.random((1, 7))), rng.random((6, 1)) + 1
    got = run(backend, div, x1, s)                   # it broadcasts: not written into
    assert got is not x1 and got.shape == (6, 7)
    np.testing.assert_array_equal(backend.to_host(got), backend.to_host(x1) / s)


def test_output_overlapping_an_input(on_host):
    rng = np.random.default_rng(2)
    node = GRAPH_CASES["expsin"]
    for make_out in (lambda a: a[::-1], lambda a: a[:, ::-1]):
        x, z = rng.random((6, 8)), rng.random(8)
        want = reference(node, [x.copy(), z])
        out = make_out(x)
        assert run(on_host, node, x, z, out=out) is out
        assert_matches(out, want, fused=True)
    buf = rng.random(9)
    x, out = buf[1:].reshape(1, 8), buf[:-1].reshape(1, 8)   # shifted by one element
    z = rng.random(8)
    want = reference(node, [x.copy(), z])
    assert_matches(run(on_host, node, x, z, out=out), want, fused=True)


def test_bad_operands_are_refused(on_host):
    node = GRAPH_CASES["expsin"]
    x, z = np.ones((2, 3)), np.ones(3)
    with pytest.raises(TypeError, match=r"input 1 \(z\): expected a 1-d array of dtype "
                                        r"float64, got 1-d float32"):
        run(on_host, node, x, z.astype(np.float32))
    with pytest.raises(ValueError, match=r"input 0 \(x\) of shape \(2, 3\), input 1 \(z\) of "
                                         r"shape \(4,\) do not broadcast together"):
        run(on_host, node, x, np.ones(4))
    with pytest.raises(ValueError, match=r"operand 1: shape \(2, 3\) does not broadcast to the "
                                         r"output's shape \(3, 2\)"):
        run(on_host, node, x, z, out=np.ones((3, 2)))
    with pytest.raises(TypeError, match="output 0: expected dtype float64, got float32"):
        run(on_host, node, x, z, out=np.ones((2, 3), np.float32))


# --------------------------------------------------------------------------
# The launch layout


def test_launch_layout_merges_what_it_can():
    c = launch_layout((4, 5, 6), [((4, 5, 6), (240, 48, 8)), ((6,), (8,))])
    assert c.dims == (20, 6) and c.strides == ((48, 8), (0, 8))
    contiguous = launch_layout((4, 5, 6), [((4, 5, 6), (240, 48, 8))] * 2)
    assert contiguous.dims == (120,) and contiguous.n == 120
    ones = launch_layout((1, 1), [((1, 1), (8, 8)), ((), ())])
    assert ones.dims == (1,) and ones.strides == ((0,), (0,)) and ones.n == 1
    reversed_ = launch_layout((3, 4), [((3, 4), (32, 8)), ((3, 4), (-32, -8))])
    assert reversed_.dims == (12,) and reversed_.strides == ((8,), (-8,))
    with pytest.raises(ValueError, match=r"operand 1: shape \(3,\) does not broadcast"):
        launch_layout((3, 4), [((3, 4), (32, 8)), ((3,), (8,))])


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(layouts(), st.integers(0, 2 ** 32 - 1))
def test_random_layouts(on_host, layout, seed):
    ndims, _, specs, out_steps = layout
    node = GRAPH_CASES["layout_" + "_".join(map(str, ndims))]
    rng = np.random.default_rng(seed)
    values = [np.asarray(rng.standard_normal(s)) for s, _, _ in specs]
    inputs = [strided(v, steps, t) for v, (_, steps, t) in zip(values, specs)]
    shape = np.broadcast_shapes(*(v.shape for v in values))
    want = reference(node, values)
    out = strided(np.zeros(shape), out_steps, False)
    assert run(on_host, node, *inputs, out=out) is out
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(run(on_host, node, *inputs), want)


def test_one_kernel_per_number_of_axes():
    node = ew.Elemwise(ps.add).make_node(var("float32", 3), var("float32", 1))
    kernel = cuda_ew.elemwise_kernel(node)
    assert kernel.max_ndim == 3
    assert [cuda_ew.variant_name(kernel.name, d) in kernel.source for d in (1, 2, 3, 4)] == \
        [True, True, True, False]
    same = cuda_ew.elemwise_kernel(ew.Elemwise(ps.add).make_node(var("float32", 3),
                                                                 var("float32", 1)))
    assert same.name == kernel.name and same.source == kernel.source
