"""Every entry of the device allow-list (:data:`~tenure.linkers.cuda.device_ops.DEVICE_OPS`)
runs on device arrays and agrees with the Python linker, and every entry is
exercised by some case here (a new entry without a case fails)."""

import importlib
import inspect
import pathlib
import pkgutil

import numpy as np
import pytest

import tenure as tn
import tenure.symbolic.grad as tenure_grad
import tenure.symbolic.ops as tenure_ops
from tenure.linkers.cuda.device_ops import DEVICE_OPS, HOST_OPS
from tests.conftest import SUITES
from tenure.symbolic.graph import Op
from tenure.symbolic.ops.nnet import LogSoftmax, LogSumExp, Softmax
from tenure.symbolic.ops.scan import Scan
from tests.helpers import assert_same_normal
from tests.linkers.cuda.conftest import host


RNG = np.random.default_rng(7)


def _m(*shape, dtype="float64"):
    return RNG.standard_normal(shape).astype(dtype)


def _case_products():
    a, b, v = tn.matrix("a"), tn.matrix("b"), tn.vector("v")
    t = tn.tensor3("t")
    outs = [tn.dot(a, b), tn.matmul(a, b), tn.dot(v, v), tn.dot(a, v),
            tn.tensordot(t, b, axes=[[2], [0]]), tn.outer(v, v), tn.matmul(t, b)]
    return [a, b, v, t], outs, [_m(3, 4), _m(4, 5), _m(4), _m(2, 3, 4)]


def _case_gemm():
    z, a, b = tn.matrix("z"), tn.matrix("a"), tn.matrix("b")
    return [z, a, b], [0.5 * z + 2.0 * tn.dot(a, b)], [_m(3, 5), _m(3, 4), _m(4, 5)]


def _case_gemm_broadcast():
    """The product broadcast over z's rows at run time (the types do not say
    so): no cuBLAS gemm, which writes exactly the product's shape."""
    z, a, b = tn.matrix("z"), tn.matrix("a"), tn.matrix("b")
    return [z, a, b], [0.5 * z + 2.0 * tn.dot(a, b)], [_m(3, 5), _m(1, 4), _m(4, 5)]


def _case_creation():
    x = tn.matrix("x")
    n = x.shape[0]
    outs = [tn.alloc(tn.sum(x), n, 3) * 1.0, tn.zeros((n, 2)) + x[:, :2],
            tn.arange(0, n * 2, 2) + 0, tn.eye(n, 4, k=1) * 1.0, tn.eye(n, 4, k=-1) * 2.0,
            tn.one_hot(tn.argsort(x[:, 0]), 5)]
    return [x], outs, [_m(4, 3)]


def _case_shapes():
    x = tn.matrix("x")
    outs = [x.reshape((x.shape[1], x.shape[0])) * 2, x.T + 1, x[1:, ::-1] * 1.0,
            x[[0, 2, 2]] * 1.0, tn.specify_shape(x, (4, 3)) + 0,
            tn.stop_gradient(x) * 3, tn.stack([x, x * 2], axis=1),
            tn.concatenate([x, x + 1], axis=0)] + [p * 1.0 for p in tn.split(x, [1, 3], axis=0)]
    return [x], outs, [_m(4, 3)]


def _case_reductions():
    x = tn.matrix("x")
    outs = [tn.var(x, axis=0), tn.var(x, ddof=1), tn.cumsum(x, axis=1), tn.cumsum(x),
            tn.sort(x, axis=0), tn.argsort(x, axis=1)]
    return [x], outs, [_m(4, 6)]


def _case_sum_to():
    x, b = tn.matrix("x"), tn.vector("b")
    loss = tn.sum((x + b) ** 2)
    return [x, b], tn.grad(loss, [x, b]), [_m(4, 3), _m(3)]


def _case_dtypes_without_kernels():
    """Nodes whose dtypes the kernels lack: NumPy's functions on the device,
    softmax of integers by the float kernel over a cast."""
    b, c = tn.vector("b", dtype="bool"), tn.vector("c", dtype="complex128")
    i = tn.vector("i", dtype="int32")
    outs = [tn.cos(b), tn.sum(c), tn.softmax(i, axis=0), tn.argmax(i), tn.argmin(i)]
    return [b, c, i], outs, [np.array([True, False, True]),
                             _m(3) + 1j * _m(3), np.array([3, -1, 2], np.int32)]


def _case_float16():
    """float16, which the kernels lack: fused nodes step by step, a fused
    reduction, a region update through a view, softmax and logsumexp by the
    float32 kernels (results within float16's rounding)."""
    x = tn.matrix("x", dtype="float16")
    y, i = tn.vector("y", dtype="float32"), tn.vector("i", dtype="int64")
    outs = [tn.exp(x) * 2 + tn.sin(x), tn.sum(tn.cos(x) * 3, axis=1),
            tn.cast(tn.exp(y) * i, "float16") + tn.cast(i > 2, "float16") * 0.5,
            tn.inc_subtensor(x[1:, :2], x[:-1, :2]), tn.softmax(x, axis=1),
            tn.logsumexp(x, axis=1)]
    return [x, y, i], outs, [_m(3, 4, dtype="float16"), _m(6, dtype="float32"),
                             np.arange(6)], {"rtol": 2e-3}


def _case_gradients():
    """Split's gradient at a point given as an input (SplitGrad, which reads
    the point from the device), sort's (PermuteAlongAxis), a vector of
    computed scalars (MakeVector on the device)."""
    x, p = tn.vector("x"), tn.scalar("p", dtype="int64")
    a, b = tn.split(x, [p], axis=0)
    loss = tn.sum(a ** 2) + tn.sum(tn.sort(x) * tn.arange(0, x.shape[0], 1))
    outs = [tn.grad(loss, x), tn.stack_scalars([tn.sum(x), tn.max(x)])]
    return [x, p], outs, [_m(5), np.int64(2)]


def _case_advanced_updates():
    """inc/set with index arrays and repeats: repeats add up; a set keeps
    the last write, as NumPy."""
    x, v = tn.matrix("x"), tn.vector("v")
    idx = tn.constant(np.array([2, 0, 2, 1]))
    outs = [tn.inc_subtensor(x[idx], v), tn.set_subtensor(x[idx], v),
            tn.inc_subtensor(x[idx, 1:3], 1.0)]
    return [x, v], outs, [_m(3, 4), _m(4)]


def _case_random():
    """Random draws (issue 34): by a Philox kernel on the device, with scalar
    parameters or an array parameter (read on the device)."""
    from tenure.symbolic.ops.random import initial_state, random_variable
    state, loc = tn.tensor("state", dtype="uint64", shape=(3,)), tn.vector("loc")
    outs = [random_variable("normal", state, (loc, 2.0), size=(4, 3))[1],
            random_variable("uniform", state, (-1.0, 2.0), size=(4, 3), dtype="float32")[1],
            random_variable("integers", state, (-5, 5), size=7)[1]]
    return [state, loc], outs, [initial_state(5, 0), _m(3)]


def _case_loops():
    """A loop and its checkpointed gradient (issue 34): the loop on the device
    (its step compiled by the cuda linker), the gradient on the host, its
    results copied into device buffers."""
    xs, h0 = tn.matrix("xs"), tn.vector("h0")
    w = tn.vector("w")
    hs, _ = tn.scan(lambda x, h: tn.tanh(h * w + x), sequences=xs, outputs_info=h0,
                    checkpoint_every=2)
    cost = tn.sum(hs[-1] ** 2)
    return [xs, h0, w], [hs[-1]] + tn.grad(cost, [xs, h0, w]), [_m(5, 3), _m(3), _m(3)]


def _case_unexpanded_loop_gradient():
    """A loop's gradient left as one node (no rewrite expands it): it runs
    its inner graph on the host."""
    xs, h0 = tn.matrix("xs"), tn.vector("h0")
    w = tn.vector("w")
    hs, _ = tn.scan(lambda x, h: tn.tanh(h * w + x), sequences=xs, outputs_info=h0)
    cost = tn.sum(hs[-1] ** 2)
    return [xs, h0, w], tn.grad(cost, [xs, h0, w]), [_m(5, 3), _m(3), _m(3)], {
        "exclude": ["loop_gradient"]}


def _compiled(name, linker: str):
    """The case's function on ``linker``, its arguments, and the tolerance of
    its comparison with the Python linker."""
    inputs, outputs, values, *options = CASES[name]()
    options = dict(options[0]) if options else {}
    rtol = options.pop("rtol", 1e-12)
    return tn.function(inputs, outputs, mode=tn.Mode(linker=linker, **options)), values, rtol


CASES = {"products": _case_products, "gemm": _case_gemm,
         "gemm_broadcast": _case_gemm_broadcast, "creation": _case_creation,
         "shapes": _case_shapes, "reductions": _case_reductions, "sum_to": _case_sum_to,
         "dtypes_without_kernels": _case_dtypes_without_kernels, "float16": _case_float16,
         "gradients": _case_gradients, "advanced_updates": _case_advanced_updates,
         "random": _case_random, "loops": _case_loops,
         "unexpanded_loop_gradient": _case_unexpanded_loop_gradient}


@pytest.mark.parametrize("name", CASES)
def test_device_entries_agree_with_the_python_linker(device, name):
    reference, values, rtol = _compiled(name, "py")
    want = reference(*values)
    got = _compiled(name, "cuda")[0](*values)
    for k, (g, w) in enumerate(zip(got, want)):
        assert device.is_device_array(g), k
        g = host(g)
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, err_msg=f"output {k}")


def _watch_transfers(device, monkeypatch) -> list:
    """The copies between host and device from now on (until
    ``monkeypatch.undo()``), as ``("to" or "from", shape)``."""
    moved = []
    to_host, from_host = type(device).to_host, type(device).from_host
    monkeypatch.setattr(type(device), "to_host",
                        lambda self, a: moved.append(("to", a.shape)) or to_host(self, a))
    monkeypatch.setattr(type(device), "from_host",
                        lambda self, a: moved.append(("from", a.shape)) or from_host(self, a))
    return moved


def test_a_draw_runs_its_kernel_on_the_device(device, monkeypatch):
    """A draw with scalar parameters is made by its Philox kernel: the state
    stays on the device, nothing is copied to or from the host during a call,
    the numbers are the Python linker's, and the state advances in place."""
    from tenure.random import RandomStream
    with tn.config.change_flags(device="cuda"):
        draws = RandomStream(17)
        outputs = [draws.normal(1.0, 2.0, size=(5, 4), dtype="float32"),
                   draws.uniform(-3.0, 3.0, size=9), draws.bernoulli(0.25, size=6),
                   draws.integers(-2 ** 62, 2 ** 62 + 3, size=(2, 5)),
                   draws.binomial(1, 0.5, size=7, dtype="int8")]
        f = tn.function([], outputs, mode=tn.Mode(linker="cuda"))
    reference = RandomStream(17)
    expected = tn.function([], [reference.normal(1.0, 2.0, size=(5, 4), dtype="float32"),
                                reference.uniform(-3.0, 3.0, size=9),
                                reference.bernoulli(0.25, size=6),
                                reference.integers(-2 ** 62, 2 ** 62 + 3, size=(2, 5)),
                                reference.binomial(1, 0.5, size=7, dtype="int8")],
                           mode=tn.Mode(linker="py"))
    state = draws.states[0].get_value(borrow=True, return_internal_type=True)
    assert device.is_device_array(state)
    f()
    moved = _watch_transfers(device, monkeypatch)
    got = f()
    assert moved == []
    monkeypatch.undo()
    expected()
    got = [got] + [f() for _ in range(3)]        # replayed as a CUDA graph, where captured
    for call in range(1, 5):
        want = expected()
        assert_same_normal(host(got[call - 1][0]), want[0], loc=1.0)
        for g, w in zip(got[call - 1][1:], want[1:]):
            np.testing.assert_array_equal(host(g), w)
    assert draws.states[0].get_value(borrow=True, return_internal_type=True) is state
    assert host(state)[2] == 5
    # a parameter that is an input is read at each call, not kept from the first
    with tn.config.change_flags(device="cuda"):
        p = tn.scalar("p")
        coins = tn.function([p], RandomStream(3).bernoulli(p, size=50), mode=tn.Mode(linker="cuda"))
    assert [int(host(coins(v)).sum()) for v in (0.0, 1.0, 0.0, 1.0)] == [0, 50, 0, 50]


def _draws_from_device_parameters(draws, h, loc, sigma):
    """An RBM's and a VAE's draws, over parameters computed on the device:
    broadcast, transposed (strided), of other dtypes than the draw's."""
    p = tn.sigmoid(h)
    return [draws.binomial(1, p, size=h.shape), draws.bernoulli(p.T),
            draws.normal(loc, sigma, size=(4, 2, 3)), draws.normal(loc, tn.exp(h)),
            draws.uniform(loc, loc + 2.0, size=(2, 3), dtype="float32"),
            draws.uniform(tn.cast(loc, "int32"), 50, dtype="float64"),
            draws.integers(tn.cast(loc, "int16"), tn.cast(loc, "int64") + 7, size=(5, 3),
                           dtype="int32")]


def _device_draws(device, build, inputs):
    """``build(draws, *inputs)`` on the cuda linker and on the Python linker
    (streams of the same seed): the two functions."""
    from tenure.random import RandomStream
    with tn.config.change_flags(device="cuda"):
        f = tn.function(inputs, build(RandomStream(23), *inputs), mode=tn.Mode(linker="cuda"))
    reference = tn.function(inputs, build(RandomStream(23), *inputs), mode=tn.Mode(linker="py"))
    return f, reference


def test_a_draw_reads_array_parameters_on_the_device(device, monkeypatch):
    """Draws whose parameters are arrays computed on the device are made by
    the array kernels (cuda/random.py): nothing is copied to or from the
    host during a call, and the numbers are the Python linker's."""
    h, loc, sigma = tn.matrix("h"), tn.vector("loc"), tn.scalar("sigma")
    f, reference = _device_draws(device, _draws_from_device_parameters, [h, loc, sigma])
    values = [device.from_host(_m(2, 3)), device.from_host(np.array([0.0, 10.0, 20.0])),
              device.from_host(np.array(0.5))]
    host_values = [host(v) for v in values]
    f(*values)
    reference(*host_values)
    moved = _watch_transfers(device, monkeypatch)
    got = f(*values)
    monkeypatch.undo()
    assert moved == []
    want = reference(*host_values)
    for k, (g, w) in enumerate(zip(got, want)):
        assert device.is_device_array(g) and host(g).dtype == w.dtype, k
        if w.dtype.kind == "f":
            # loc: the normals' (and the uniforms' low, which nothing cancels)
            assert_same_normal(host(g), w, loc=host_values[1])
        else:
            np.testing.assert_array_equal(host(g), w, err_msg=f"output {k}")


@pytest.mark.parametrize("build, bad, message", [
    (lambda s, v: s.bernoulli(tn.sigmoid(v) * 1.5), np.array([0.0, 9.0]),
     r"bernoulli: parameter 'p' must be a probability in \[0, 1\], got 1\.4"),
    (lambda s, v: s.normal(0.0, v, size=(3, 2)), np.array([1.0, np.nan]),
     r"normal: parameter 'scale' must be finite and >= 0, got nan"),
    (lambda s, v: s.uniform(v, 1.0), np.array([0.0, np.inf]),
     r"uniform: parameter 'low' must be finite, got inf"),
    (lambda s, v: s.integers(tn.cast(v, "int64"), 3, size=(2, 2)), np.array([0.0, 3.0]),
     r"integers: parameter 'high' must be greater than low \(high is excluded\), got 3"),
])
def test_a_bad_device_parameter_raises_before_anything_is_written(device, build, bad, message):
    """A parameter out of its domain raises the Python linker's error, and
    neither the generator state nor last call's borrowed draw is written."""
    from tenure.random import RandomStream
    v = tn.vector("v")
    with tn.config.change_flags(device="cuda"):
        draws = RandomStream(5)
        f = tn.function([v], tn.Out(build(draws, v), borrow=True), mode=tn.Mode(linker="cuda"))
    last = f(device.from_host(np.array([0.5, 0.25])))
    kept = host(last).copy()
    state = host(draws.states[0].get_value(borrow=True, return_internal_type=True)).copy()
    with pytest.raises(ValueError, match=message):
        f(device.from_host(bad))
    np.testing.assert_array_equal(host(last), kept)
    np.testing.assert_array_equal(
        host(draws.states[0].get_value(borrow=True, return_internal_type=True)), state)


def test_draws_the_array_kernels_leave_to_the_host(device):
    """A float16 parameter, a broadcast over more than MAX_NDIM axes and an
    empty draw are drawn on the host: the same numbers still."""
    from tenure.linkers.cuda.random import MAX_NDIM

    def build(draws, x, w):
        wide = tn.reshape(x, (2, 1, 2, 1, 2, 1))[:, :, :, :, :, 0:1]
        return [draws.uniform(tn.cast(x, "float16"), 2.0, dtype="float32"),
                draws.normal(wide, w, size=(2, 3, 2, 3, 2, 3)),
                draws.normal(x, 1.0, size=(0, 8))]

    assert MAX_NDIM < 6
    x, w = tn.vector("x"), tn.vector("w")
    f, reference = _device_draws(device, build, [x, w])
    values = [np.arange(8.0) / 8, np.array([1.0, 2.0, 3.0])]
    locs = [0.0, values[0].reshape(2, 1, 2, 1, 2, 1)[:, :, :, :, :, 0:1], 0.0]
    for g, want, loc in zip(f(*[device.from_host(v) for v in values]), reference(*values), locs):
        assert_same_normal(host(g), want, loc)


@pytest.mark.parametrize("gradient", ["stored", "checkpointed", "unexpanded"])
def test_a_loops_state_stays_on_the_device(device, monkeypatch, gradient):
    """A loop on the cuda linker runs on device arrays, and so does its
    gradient in each of its forms (over the stored trajectories, over
    checkpoints, the unexpanded node): their steps are functions of the cuda
    linker, called with device arrays, and no array is copied to the host
    during the call (only the loop's length is read there)."""
    xs, h0, w = tn.matrix("xs"), tn.vector("h0"), tn.vector("w")
    hs, _ = tn.scan(lambda x, h: tn.tanh(h * w + x), sequences=xs, outputs_info=h0,
                    checkpoint_every=2 if gradient == "checkpointed" else None)
    outputs = [hs, hs[-1] * 2] + tn.grad(tn.sum(hs[-1] ** 2), [xs, h0, w])
    options = {"exclude": ["loop_gradient"]} if gradient == "unexpanded" else {}
    f = tn.function([xs, h0, w], outputs, mode=tn.Mode(linker="cuda", **options))
    reference = tn.function([xs, h0, w], outputs, mode=tn.Mode(linker="py"))
    values = [_m(6, 3), _m(3), _m(3)]
    want = reference(*values)
    f(*values)   # the first call of a signature also tries to capture a CUDA graph
    steps, to_host = [], []
    call, copy_back = tn.Function.__call__, type(device).to_host

    def spied_call(self, *args, **kwargs):
        steps.append((self, args))
        return call(self, *args, **kwargs)

    def spied_to_host(self, array):
        to_host.append(array.shape)
        return copy_back(self, array)

    monkeypatch.setattr(tn.Function, "__call__", spied_call)
    monkeypatch.setattr(type(device), "to_host", spied_to_host)
    got = f(*values)
    assert [shape for shape in to_host if len(shape) > 0] == []
    assert len(steps) > 6
    for step, args in steps[1:]:
        assert step.mode.linker == "cuda"
        assert all(device.is_device_array(a) for a in args if np.ndim(a) > 0)
    for k, (g, w_) in enumerate(zip(got, want)):
        assert device.is_device_array(g)
        np.testing.assert_allclose(host(g), w_, rtol=1e-12, err_msg=f"output {k}")


def test_a_loops_step_runs_on_its_modes_device(cc_or_skip):
    """The step of a loop is compiled for the device of the function's mode --
    the emulated one here, chosen when the mode was made -- whatever
    ``config.cuda_emulation`` says when the function is compiled (before, the
    step's mode read the flag again: CudaUnavailable on a machine without a
    GPU)."""
    with tn.config.change_flags(cuda_emulation=True):
        mode = tn.Mode(linker="cuda")
    x = tn.vector("x")
    hs, _ = tn.scan(lambda xt, h: h * 0.5 + xt, sequences=x, outputs_info=tn.zeros(()))
    with tn.config.change_flags(cuda_emulation=False):
        f = tn.function([x], hs, mode=mode)
        got = host(f(np.arange(4.0)))
    (loop,) = [node.op for node in f.fgraph.toposort() if isinstance(node.op, Scan)]
    assert loop.inner_mode.linker == "cuda" and loop.inner_mode.cuda_emulation
    np.testing.assert_allclose(got, [0.0, 1.0, 2.5, 4.25])
    assert tn.Mode(linker="cuda", cuda_emulation=True).cuda_emulation


#: the op suite: one test file per op module, run on the cuda linker too
#: (tests/conftest.py, SUITES["cuda"])
OP_SUITE = pathlib.Path(__file__).parents[2] / "symbolic" / "ops"


def _has_op_suite_file(op) -> bool:
    """``op``'s module has its file in the op suite, which runs every op of
    it on the cuda linker (so a new op needs no case here)."""
    module = op.__module__.rsplit(".", 1)[-1]
    return op.__module__.startswith("tenure.symbolic.ops.") and (
        OP_SUITE / f"test_{module}.py").exists()


def test_every_entry_has_a_case(cc_or_skip):
    """Every entry of tenure's own (test files register ops of their own)
    computes a node of some case here -- the cases compiled, and the ops of
    the nodes their device entries compute -- or belongs to an op module
    whose op-suite file runs on the cuda linker."""
    seen = set()
    with tn.config.change_flags(cuda_emulation=True):
        for name in CASES:
            f = _compiled(name, "cuda")[0]
            seen.update(type(node.op) for node, step in f._thunk.device_steps.items()
                        if not step.by_kernel)
    missing = sorted(op.__name__ for op in DEVICE_OPS
                     if op.__module__.startswith("tenure.") and op not in seen
                     and not _has_op_suite_file(op))
    assert not missing, f"device entries no case exercises: {missing}"


def test_the_op_suite_runs_on_the_cuda_linker():
    """What :func:`_has_op_suite_file` relies on."""
    assert SUITES["cuda"].runs(OP_SUITE / "test_trace.py")


def _public_op_classes() -> set:
    modules = [importlib.import_module(f"tenure.symbolic.ops.{m.name}")
               for m in pkgutil.iter_modules(tenure_ops.__path__)] + [tenure_grad]
    return {cls for module in modules for name, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, Op) and cls is not Op and cls.__module__ == module.__name__
            and not name.startswith("_")}


def test_every_op_of_the_op_set_runs_on_the_device():
    """An op class added to tenure without a way onto the device fails here
    (the softmax family has kernels for every dtype: its own, or float32's
    over a cast; an op with an expansion gets there as the ops it expands
    to, see tenure.rewrites.expand)."""
    kernel_only = {Softmax, LogSoftmax, LogSumExp}
    missing = sorted(cls.__name__ for cls in _public_op_classes()
                     if cls not in DEVICE_OPS and cls not in HOST_OPS and cls not in kernel_only
                     and not callable(getattr(cls, "expand", None)))
    assert not missing, f"ops with no device implementation: {missing}"


def test_errors_are_the_reference_s(device):
    """A device entry that finds an error raises the NumPy implementation's."""
    step = tn.scalar("step", dtype="int64")
    f = tn.function([step], tn.arange(0, 5, step) * 1, mode=tn.Mode(linker="cuda"))
    with pytest.raises(ValueError, match="arange: step must not be 0"):
        f(0)
    i = tn.vector("i", dtype="int64")
    g = tn.function([i], tn.one_hot(i, 3), mode=tn.Mode(linker="cuda"))
    with pytest.raises(ValueError, match=r"index 7 \(at position \(1,\)\) is out of range"):
        g(np.array([0, 7]))
