"""Row programs' CUDA kernels (tenure/linkers/cuda/rowwise.py): compiled for
the device (NVRTC, else nvcc), run on the host (``cuda_host``: block
threads as coroutines meeting at each barrier) and on the "cuda" device
(the emulated one in CI, then a real one where there is one), against the
Python executor: the layer norm's gradient, a row max with NaN, shapes
from one row and column up, a declined call (perform on the host) and an
error."""

from __future__ import annotations

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.cuda import rowwise as cuda_rowwise
from tenure.linkers.cuda.runtime import unavailable_reason
from tenure.symbolic.ops.rowwise import RowProgram
from tests.linkers.cuda.conftest import host
from tests.linkers.cuda.device_compile import assert_defined, compile_all

pytestmark = pytest.mark.xdist_group("cuda_rowwise")

PY = tn.Mode(linker="py")
EPS = 1e-5


def _graphs():
    """``{name: (inputs, outputs)}``: the layer norm's gradients (and its
    output), a row max fed back with a column sum."""
    x, w = tn.matrix("x"), tn.matrix("w")
    g, b = tn.vector("g"), tn.vector("b")
    mu = tn.mean(x, axis=1, keepdims=True)
    var = tn.mean((x - mu) ** 2, axis=1, keepdims=True)
    y = (x - mu) / tn.sqrt(var + EPS) * g + b
    grads = tn.grad(tn.sum(y * w), [x, g, b])
    z = x / tn.max(abs(x), axis=1, keepdims=True)
    x3 = tn.tensor3("x3")
    m3 = tn.mean(x3, axis=-1, keepdims=True)
    h3 = (x3 - m3) * g
    return {"layer_norm": ([x, g, b, w], grads + [y]),
            "three_d": ([x3, g], [h3 * tn.sum(h3, axis=-1, keepdims=True),
                                  tn.sum(h3 * x3, axis=(0, 1))]),
            "row_max": ([x], [z, tn.sum(z * x, axis=0), tn.min(z, axis=1, keepdims=True)])}


GRAPHS = _graphs()


def _data(name, rows, cols, seed=0, x_rows=None):
    rng = np.random.default_rng(seed)
    if name == "three_d":
        return [rng.standard_normal((3, rows, cols)), rng.standard_normal(cols)]
    if name == "row_max":
        x = rng.standard_normal((rows, cols))
        if rows > 2:
            x[2, cols // 2] = np.nan
        return [x]
    return [rng.standard_normal((x_rows or rows, cols)), rng.standard_normal(cols),
            rng.standard_normal(cols), rng.standard_normal((rows, cols))]


def _nodes(name, linker="cuda_host"):
    inputs, outputs = GRAPHS[name]
    f = tn.function(inputs, outputs, mode=tn.Mode(linker=linker))
    return [n for n in f.fgraph.toposort() if isinstance(n.op, RowProgram)]


def test_every_row_kernel_compiles_for_the_device():
    kernels = [cuda_rowwise.row_kernel(n) for name in GRAPHS for n in _nodes(name)]
    assert kernels
    ptx = compile_all(kernels)
    assert_defined(ptx, [f"{k.name}_{part}" for k in kernels for part in ("rows", "cols")])


@pytest.fixture(params=["cuda_host", "emulated", "device"])
def kernel_mode(request):
    """The kernels on the host, then the "cuda" linker on the emulated
    device and on a real one (skipped with the reason where there is none)."""
    if request.param == "cuda_host":
        yield tn.Mode(linker="cuda_host")
    elif request.param == "emulated":
        with tn.config.change_flags(cuda_emulation=True):
            yield tn.Mode(linker="cuda")
    else:
        reason = unavailable_reason()
        if reason is not None:
            pytest.skip(f"no CUDA device: {reason}")
        yield tn.Mode(linker="cuda")


@pytest.fixture
def on_host(monkeypatch):
    """The calls a row step hands to perform on the host."""
    calls = []
    original = cuda_rowwise.RowStep._on_host

    def counted(self, node, inputs, cells):
        calls.append(node)
        return original(self, node, inputs, cells)

    monkeypatch.setattr(cuda_rowwise.RowStep, "_on_host", counted)
    return calls


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("rows, cols", [(1, 1), (1, 9), (7, 1), (5, 33), (70, 40)])
def test_matches_the_python_executor(kernel_mode, on_host, name, rows, cols):
    inputs, outputs = GRAPHS[name]
    f = tn.function(inputs, outputs, mode=kernel_mode)
    assert any(isinstance(n.op, RowProgram) for n in f.fgraph.toposort())
    args = _data(name, rows, cols)
    want = tn.function(inputs, outputs, mode=PY)(*args)
    got = [host(v) for v in f(*args)]
    assert not on_host, "the kernels declined shapes they cover"
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_a_declined_call_runs_perform_on_the_host(kernel_mode, on_host):
    """x of one row against w of several: a sum_to sums, which the kernels
    do not cover; perform computes it, and the values come back."""
    inputs, outputs = GRAPHS["layer_norm"]
    f = tn.function(inputs, outputs, mode=kernel_mode)
    args = _data("layer_norm", 4, 6, x_rows=1)
    want = tn.function(inputs, outputs, mode=PY)(*args)
    got = [host(v) for v in f(*args)]
    assert on_host
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_shapes_that_do_not_broadcast_raise_the_reference_error(kernel_mode):
    inputs, outputs = GRAPHS["layer_norm"]
    f = tn.function(inputs, outputs, mode=kernel_mode)
    args = _data("layer_norm", 4, 6, x_rows=3)
    with pytest.raises(ValueError):
        tn.function(inputs, outputs, mode=PY)(*args)
    with pytest.raises(ValueError):
        f(*args)
