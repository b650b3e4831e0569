"""Generated CUDA kernels for softmax, log_softmax and logsumexp
(tenure/linkers/cuda/nnet.py) against ``perform``: both float dtypes, axes
(one, several, none, all) with and without keepdims, 1-d, 0-d and empty
inputs, strided / reversed / Fortran inputs and outputs, the output being the
input, rows of -inf, +inf, NaN and huge values.  Compiled for the device in
CI and run on the host; on a CUDA device where there is one.
"""

from __future__ import annotations

import numpy as np
import pytest

from tenure.linkers.cuda import nnet as cuda_nnet
from tenure.linkers.cuda.launch import run_nnet
from tenure.symbolic.ops.nnet import Softmax
from tests.linkers.cuda.device_compile import assert_defined, compile_all
from tests.linkers.nnet_cases import (CASES, DTYPES, RTOL, check, check_axes_and_layouts,
                                      check_edge_values, check_empty, reference, var)

#: built at once by the backends (conftest.py)
KERNELS = [cuda_nnet.nnet_kernel(node) for node in CASES.values()]

pytestmark = pytest.mark.xdist_group("cuda_nnet")


class Entries:
    """The cases by name, run on ``backend`` (NumPy in and out; an ``out``
    given is written in place and returned)."""

    def __init__(self, backend):
        self.backend = backend

    def __getattr__(self, name):
        node = CASES[name]
        kernel = cuda_nnet.nnet_kernel(node)

        def run(x, out=None):
            on = self.backend.from_host(np.asarray(x))
            got = run_nnet(self.backend, kernel, node, [on], out=out)
            return got if out is not None else self.backend.to_host(got)
        return run


def test_every_generated_kernel_compiles_for_the_device():
    ptx = compile_all(KERNELS)
    assert_defined(ptx, [cuda_nnet.variant_name(k.name, kept, reduced) for k in KERNELS
                         for kept in range(1, k.max_kept + 1)
                         for reduced in range(1, k.max_reduced + 1)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["sm", "ls", "lse"])
def test_axes_and_layouts(backend, rng, kind, dtype):
    check_axes_and_layouts(Entries(backend), kind, dtype, rng)


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_rows_and_vectors(backend, rng, dtype):
    mod = Entries(backend)
    for n in (1, 7, 8, 9, 257, 1000):
        a = rng.normal(size=(2, 3, n)).astype(dtype) * 3
        for name in (f"sm_{dtype}_2", f"ls_{dtype}_2", f"lse_{dtype}_2_0", f"lse_{dtype}_2_1"):
            check(mod, name, a)
    v = rng.normal(size=3000).astype(dtype)
    check(mod, f"sm_{dtype}_vec", v)
    check(mod, f"lse_{dtype}_vec", v)


@pytest.mark.parametrize("dtype", DTYPES)
def test_edge_values(backend, dtype):
    check_edge_values(Entries(backend), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty(backend, dtype):
    check_empty(Entries(backend), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_outputs_and_output_is_input(on_host, rng, dtype):
    mod = Entries(on_host)
    a = rng.normal(size=(3, 4, 6)).astype(dtype)
    for name, shape in [(f"sm_{dtype}_2", (3, 4, 6)), (f"ls_{dtype}_02", (3, 4, 6)),
                        (f"lse_{dtype}_2_1", (3, 4, 1)), (f"lse_{dtype}_1_0", (3, 6))]:
        check(mod, name, a, out=np.full(shape[::-1], 7, dtype).T)
        big = np.zeros(tuple(2 * d for d in shape), dtype)
        check(mod, name, a, out=big[tuple(slice(None, None, -2) for _ in shape)])
    for name in (f"sm_{dtype}_2", f"ls_{dtype}_2", f"sm_{dtype}_0", f"ls_{dtype}_02"):
        x = rng.normal(size=(3, 4, 30)).astype(dtype)
        want = reference(CASES[name], x)
        assert getattr(mod, name)(x, out=x) is x
        np.testing.assert_allclose(x, want, rtol=RTOL[dtype], atol=RTOL[dtype] * 1e-3)


def test_partial_overlap_goes_through_a_copy(on_host, rng):
    base = rng.normal(size=(5, 64))
    node = Softmax((1,))(var("float64", 2)).owner
    want = reference(node, base[:4].copy())
    got = run_nnet(on_host, cuda_nnet.nnet_kernel(node), node, [base[:4]], out=base[1:])
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_errors(on_host):
    mod = Entries(on_host)
    a = np.zeros((2, 3, 4), "float32")
    with pytest.raises(TypeError, match=r"input 0: expected a 3-d array of dtype float32, "
                                        r"got 3-d float64"):
        mod.sm_float32_2(a.astype("float64"))
    with pytest.raises(ValueError, match=r"output 0: expected shape \(2, 3, 4\), got "
                                         r"\(2, 3, 5\)"):
        mod.sm_float32_2(a, out=np.zeros((2, 3, 5), "float32"))
    with pytest.raises(ValueError, match=r"expected shape \(2, 3\)"):
        mod.lse_float32_2_0(a, out=np.zeros((2, 3, 1), "float32"))
    with pytest.raises(TypeError, match="output 0: expected dtype float32, got float64"):
        mod.sm_float32_2(a, out=np.zeros((2, 3, 4)))
    with pytest.raises(NotImplementedError, match="no CUDA code"):
        cuda_nnet.nnet_kernel(Softmax((0,))(var("int8", 1)).owner)
