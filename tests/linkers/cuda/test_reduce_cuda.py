"""Generated CUDA kernels for reductions (tenure/linkers/cuda/reduce.py):
every reduction kind on every dtype over several axes, FusedReduce nodes
from real graphs, both strategies (a block per output, its threads meeting
at ``__syncthreads``; a thread per output), empty and 0-d inputs, NaN and
inf, strided / reversed / broadcast inputs.  Compiled for the device in CI
(NVRTC, else nvcc) and run on the host (block threads as coroutines
meeting at each barrier), and on a CUDA device where there is one.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenure.linkers.cuda import reduce as cuda_reduce
from tenure.linkers.cuda.launch import pick_strategy, run_reduce
from tenure.linkers.cuda.layout import reduction_layout
from tests.linkers.cuda.device_compile import assert_defined, compile_all
from tests.linkers.reduce_cases import (GRAPH_CASES, KINDS, REDUCE_CASES, check,
                                        check_every_dtype_and_axes, graph_inputs,
                                        permuted_view, values)

ALL_CASES = {**REDUCE_CASES, **GRAPH_CASES}
#: built at once by the backends (conftest.py)
KERNELS = [cuda_reduce.reduce_kernel(node) for node in ALL_CASES.values()]

pytestmark = pytest.mark.xdist_group("cuda_reduce")


def runner(backend, node, strategy):
    """``fn(*inputs, out=None)`` computing ``node`` on ``backend`` with
    ``strategy`` (NumPy inputs in, a NumPy result out: the device copies)."""
    kernel = cuda_reduce.reduce_kernel(node)

    def fn(*inputs, out=None):
        on = [backend.from_host(np.asarray(a)) for a in inputs]
        got = run_reduce(backend, kernel, node, on, out=out, strategy=strategy)
        return got if out is not None else backend.to_host(got)
    return fn


# --------------------------------------------------------------------------
# Compiled for the device


def test_every_generated_kernel_compiles_for_the_device():
    ptx = compile_all(KERNELS)
    assert_defined(ptx, [cuda_reduce.variant_name(k.name, strategy, kept, reduced)
                         for k in KERNELS for strategy in cuda_reduce.STRATEGIES
                         for kept in range(1, k.max_kept + 1)
                         for reduced in range(1, k.max_reduced + 1)])


# --------------------------------------------------------------------------
# Reduce


@pytest.mark.parametrize("strategy", cuda_reduce.STRATEGIES)
@pytest.mark.parametrize("kind", KINDS)
def test_reduce_every_dtype_and_axes(backend, kind, strategy):
    check_every_dtype_and_axes(kind, lambda key: runner(backend, REDUCE_CASES[key], strategy),
                               np.random.default_rng(sum(map(ord, kind))))


def _block_order_product(threads: int):
    """A float32 product of everything in the order of a ``block`` launch
    of ``threads`` threads (each thread's elements ``t, t + threads, ...``,
    then the tree): the device's order, which the host's small blocks do
    not reach."""
    def fn(x):
        flat = np.ascontiguousarray(x).reshape(-1)
        partial = [np.float32(1)] * threads
        for t in range(threads):
            for value in flat[t::threads]:
                partial[t] = np.float32(partial[t] * value)
        step = threads // 2
        while step:
            for t in range(step):
                partial[t] = np.float32(partial[t] * partial[t + step])
            step //= 2
        return np.asarray(partial[0])
    return fn


def test_prod_tolerance_admits_the_device_block_order():
    """Issue 30: float32 prod over (2, 1, 300) of two repeated values (a
    broadcast layout), 256 threads a block on the H100: 116 eps from NumPy,
    within the rigorous bound ((n - 1) eps), beyond the old sqrt(n) one."""
    node = REDUCE_CASES["prod__float32__all"]
    x = np.broadcast_to(np.array([1.1771604, 0.9471782], np.float32).reshape(2, 1, 1),
                        (2, 1, 300))
    check(node, _block_order_product(cuda_reduce.MAX_THREADS), [x])


@pytest.mark.parametrize("strategy", cuda_reduce.STRATEGIES)
def test_empty_reductions(backend, strategy):
    def run(key, x):
        return runner(backend, REDUCE_CASES[key], strategy)(x)
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        run("max__float64__all", np.zeros((0, 3, 2)))
    with pytest.raises(ValueError, match="minimum"):
        run("min__int8__a1", np.zeros((2, 0, 3), np.int8))
    assert run("max__float64__a1", np.zeros((0, 3, 2))).shape == (0, 2)
    assert run("sum__int8__all", np.zeros((0, 3, 2), np.int8)) == 0
    assert run("prod__float32__all", np.zeros((2, 0, 1), np.float32)) == 1
    assert run("all__bool__all", np.zeros((0, 1, 1), bool))
    assert not run("any__bool__all", np.zeros((0, 1, 1), bool))
    with pytest.warns(RuntimeWarning, match="empty"):
        assert np.isnan(run("mean__float64__all", np.zeros((0, 1, 1))))


@pytest.mark.parametrize("strategy", cuda_reduce.STRATEGIES)
def test_nan_propagates_and_integers_wrap(backend, strategy):
    def run(key, x):
        return runner(backend, REDUCE_CASES[key], strategy)(x)
    x = np.array([[[1.0, np.nan, 3.0], [np.inf, 2.0, -np.inf]]])
    np.testing.assert_array_equal(run("max__float64__neg", x), [[np.nan, np.inf]])
    np.testing.assert_array_equal(run("min__float64__neg", x), [[np.nan, -np.inf]])
    y = np.full((1, 1, 19), np.nan, np.float32)
    y[0, 0, 18] = 5
    assert np.isnan(run("max__float32__neg", y))     # NaN first, then a number
    big = np.full((2, 3, 4), np.iinfo(np.int64).max, np.int64)
    np.testing.assert_array_equal(run("sum__int64__a1", big), big.sum(axis=1))
    np.testing.assert_array_equal(run("prod__int64__a1", big), big.prod(axis=1))


def test_output_any_layout(on_host):
    """An output given in another layout (transposed, reversed) is written
    where it lies."""
    node = REDUCE_CASES["sum__float64__a1"]
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 9, 5))
    for strategy in cuda_reduce.STRATEGIES:
        for out in (np.zeros((5, 6)).T, np.zeros((6, 10))[::-1, ::2]):
            fn = runner(on_host, node, strategy)
            assert fn(x, out=out) is out
            np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-13)
    with pytest.raises(ValueError, match=r"output 0: expected shape \(6, 5\), got \(6, 1\)"):
        runner(on_host, node, "block")(x, out=np.zeros((6, 1)))


def test_bad_inputs_are_refused(on_host):
    node = REDUCE_CASES["sum__float64__a1"]
    kernel = cuda_reduce.reduce_kernel(node)
    with pytest.raises(TypeError, match=r"input 0: expected a 3-d array of dtype float64, "
                                        r"got 3-d float32"):
        run_reduce(on_host, kernel, node, [np.zeros((2, 3, 4), np.float32)])
    with pytest.raises(TypeError, match="output 0: expected dtype float64, got int8"):
        run_reduce(on_host, kernel, node, [np.zeros((2, 3, 4))], out=np.zeros((2, 4), np.int8))
    fused = GRAPH_CASES["expmul_float64"]
    with pytest.raises(ValueError, match=r"input 0 \(x\) of shape \(3, 4\), input 1 \(y\) of "
                                         r"shape \(3, 5\) do not broadcast together"):
        run_reduce(on_host, cuda_reduce.reduce_kernel(fused), fused,
                   [np.zeros((3, 4)), np.zeros((3, 5))])


# --------------------------------------------------------------------------
# FusedReduce (and the plain reductions of the same graphs)


@pytest.mark.parametrize("strategy", cuda_reduce.STRATEGIES)
@pytest.mark.parametrize("key", sorted(GRAPH_CASES))
def test_fused_graph_nodes(backend, key, strategy):
    node = GRAPH_CASES[key]
    fn = runner(backend, node, strategy)
    rng = np.random.default_rng(len(key))
    for shape in [(5, 7), (33, 70), (0, 6), (6, 0), (1, 1)]:
        for special in (False, True):
            inputs = graph_inputs(rng, node, shape, special)
            if key == "pow_i64":
                inputs = [np.abs(a) % 5 for a in inputs]
            check(node, fn, inputs)
            if all(a.ndim == 2 for a in inputs) and all(a.size for a in inputs):
                check(node, fn, [a[::-1, ::-1] for a in inputs])


@pytest.mark.parametrize("strategy", cuda_reduce.STRATEGIES)
def test_fused_negative_power_raises(backend, strategy):
    node = GRAPH_CASES["pow_i64"]
    assert cuda_reduce.reduce_kernel(node).uses_status
    with pytest.raises(ValueError, match="negative integer powers"):
        runner(backend, node, strategy)(np.array([2, -1], np.int64))


# --------------------------------------------------------------------------
# Layouts and strategies


def test_reduction_layout_merges_each_kind_of_axis():
    # (4, 5, 6) C-contiguous, reducing axes 1 and 2: one reduced axis of 30
    layout = reduction_layout((4, 5, 6), (1, 2), False, ((4,), (8,)),
                              [((4, 5, 6), (240, 48, 8))])
    assert (layout.n_out, layout.n_red, layout.kept, layout.reduced) == (4, 30, (4,), (30,))
    assert layout.reduced_strides == ((8,),)
    # reducing the middle axis: the kept axes 0 and 2 do not merge in the input
    layout = reduction_layout((4, 5, 6), (1,), True, ((4, 1, 6), (48, 48, 8)),
                              [((4, 5, 6), (240, 48, 8))])
    assert layout.kept == (4, 6) and layout.kept_strides == ((48, 8), (240, 8))
    # all axes of length 1: one of each kind, of length 1
    layout = reduction_layout((1, 1), (0, 1), False, ((), ()), [((1, 1), (8, 8))])
    assert (layout.kept, layout.reduced, layout.n_out, layout.n_red) == ((1,), (1,), 1, 1)


def test_strategy_choice():
    assert pick_strategy(n_out=10, n_red=10_000, threads=256) == "block"
    assert pick_strategy(n_out=1_000_000, n_red=8, threads=256) == "thread"
    assert pick_strategy(n_out=16, n_red=8, threads=256) == "block"
    assert pick_strategy(n_out=16, n_red=1, threads=256) == "thread"


_HYP_KEYS = sorted(k for k, n in REDUCE_CASES.items() if n.inputs[0].ndim == 3)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(key=st.sampled_from(_HYP_KEYS),
       shape=st.tuples(*[st.sampled_from([0, 1, 2, 3, 5, 9, 17]) for _ in range(3)]),
       perm=st.permutations([0, 1, 2]),
       steps=st.tuples(*[st.sampled_from([1, 2, -1, -3]) for _ in range(3)]),
       seed=st.integers(0, 2 ** 16), special=st.booleans(),
       strategy=st.sampled_from(cuda_reduce.STRATEGIES))
def test_random_shapes_axes_layouts(on_host, key, shape, perm, steps, seed, special, strategy):
    node = REDUCE_CASES[key]
    rng = np.random.default_rng(seed)
    x = values(rng, node.inputs[0].dtype, shape, special, node.op.fn_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check(node, runner(on_host, node, strategy), [permuted_view(x, perm, steps)])
