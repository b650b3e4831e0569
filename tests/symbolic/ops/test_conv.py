"""conv2d, pool_2d and the batch normalizations (issue 35, item 2) against
direct NumPy loops and SciPy on every linker, their gradients, their memory
(the patches are one buffer of the plan, reshaped without a copy), and the
errors their arguments get."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import signal

import tenure as tn
from tenure.linkers.c import compiler
from tenure.linkers.table import LINKERS
from tenure.symbolic.ops.corr2d import Corr2dGradInputs
from tenure.symbolic.ops.maxpool import MaxPool2d, MaxPool2dGrad, composed_max_pool
from tenure.testing import verify_grad

RNG = np.random.default_rng(35)


def conv_reference(x, w, stride=(1, 1), pads=((0, 0), (0, 0)), dilation=(1, 1), groups=1):
    """conv2d by its definition: a loop over every output element."""
    n_images, _, _, _ = x.shape
    n_filters, per_group, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), *pads))
    oh = (xp.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n_images, n_filters, oh, ow))
    for f in range(n_filters):
        first = f // (n_filters // groups) * per_group
        for a in range(oh):
            for b in range(ow):
                rows = a * stride[0] + dilation[0] * np.arange(kh)
                cols = b * stride[1] + dilation[1] * np.arange(kw)
                window = xp[:, first:first + per_group][:, :, rows][:, :, :, cols]
                out[:, f, a, b] = (window * w[f]).sum(axis=(1, 2, 3))
    return out


def pool_reference(x, ws, ignore_border=True, stride=None, pad=(0, 0), mode="max"):
    """pool_2d by its definition (PyTensor's window counts and divisors)."""
    stride = stride or ws
    height, width = x.shape[-2:]

    def count(length, k, s, p):
        if ignore_border:
            return (length + 2 * p - k) // s + 1
        return (length - 1) // s + 1 if s >= k else max(0, (length - 1 - k + s) // s) + 1

    oh, ow = count(height, ws[0], stride[0], pad[0]), count(width, ws[1], stride[1], pad[1])
    out = np.zeros(x.shape[:-2] + (oh, ow))
    for a in range(oh):
        for b in range(ow):
            top, left = a * stride[0] - pad[0], b * stride[1] - pad[1]
            r0, c0 = max(top, 0), max(left, 0)
            r1, c1 = min(top + ws[0], height), min(left + ws[1], width)
            window = x[..., r0:r1, c0:c1]
            total = window.sum(axis=(-2, -1))
            if mode == "max":
                out[..., a, b] = window.max(axis=(-2, -1))
            elif mode == "sum":
                out[..., a, b] = total
            elif mode == "average_inc_pad" and ignore_border:
                out[..., a, b] = total / (ws[0] * ws[1])
            else:
                out[..., a, b] = total / ((r1 - r0) * (c1 - c0))
    return out


# (stride, padding as given, the same as ((top, bottom), (left, right)), dilation, groups)
CONV_CASES = [((1, 1), "valid", ((0, 0), (0, 0)), (1, 1), 1),
              ((2, 1), 1, ((1, 1), (1, 1)), (1, 2), 2),
              ((1, 1), "same", ((2, 2), (0, 1)), (2, 1), 1),
              ((1, 2), ((0, 2), (1, 0)), ((0, 2), (1, 0)), (1, 1), 4),
              ((3, 2), "full", ((2, 2), (1, 1)), (1, 1), 1),
              ((1, 1), "half", ((1, 1), (1, 1)), (1, 1), 1)]


def test_conv2d_matches_a_direct_loop(mode):
    """Strides, every form of padding, dilations and groups, in one function."""
    x = tn.tensor4("x")
    filters = [tn.tensor(f"w{k}", shape=(None, None, 3, 2)) for k in range(len(CONV_CASES))]
    outs = [tn.nnet.conv2d(x, w, stride=s, padding=p, dilation=d, groups=g)
            for w, (s, p, _, d, g) in zip(filters, CONV_CASES)]
    f = tn.function([x, *filters], outs, mode=mode)
    xv = RNG.normal(size=(2, 4, 7, 6))
    wv = [RNG.normal(size=(4, 4 // g, 3, 2)) for *_, g in CONV_CASES]
    for got, w, (s, _, pads, d, g) in zip(f(xv, *wv), wv, CONV_CASES):
        want = conv_reference(xv, w, s, pads, d, g)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_conv2d_agrees_with_scipy(mode):
    """filter_flip=True is SciPy's convolve2d, padding="full" its correlate2d
    in full mode; float32 stays float32."""
    x, w = tn.tensor4("x", dtype="float32"), tn.tensor4("w", dtype="float32")
    f = tn.function([x, w], [tn.nnet.conv2d(x, w, filter_flip=True, filter_shape=(1, 1, 3, 4)),
                             tn.nnet.conv2d(x, w, padding="full", filter_shape=(1, 1, 3, 4))],
                    mode=mode)
    xv, wv = (RNG.normal(size=s).astype("float32") for s in [(1, 1, 6, 7), (1, 1, 3, 4)])
    flipped, full = f(xv, wv)
    assert flipped.dtype == np.float32
    np.testing.assert_allclose(flipped[0, 0], signal.convolve2d(xv[0, 0], wv[0, 0], "valid"),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(full[0, 0], signal.correlate2d(xv[0, 0], wv[0, 0], "full"),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("linker", ["py", "c"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_conv2d_and_its_gradients_over_drawn_shapes(linker, data):
    """Hypothesis-drawn shapes, strides, paddings, dilations and groups: the
    correlation against the loop, and its two gradients by the adjoint
    identities <conv(x, w), g> = <x, dL/dx> = <w, dL/dw> for L = sum(conv *
    g) -- on the NumPy perform and the C kernels (the other linkers run the
    expansion, checked against these above)."""
    if linker == "c" and compiler.find_compiler() is None:
        pytest.skip("no working C compiler")
    groups = data.draw(st.integers(1, 3))
    per_group, n_filters = data.draw(st.integers(1, 2)), groups * data.draw(st.integers(1, 2))
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    stride = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    dilation = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    pads = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in "hw")
    extent = [d * (k - 1) + 1 - sum(p) for k, d, p in zip((kh, kw), dilation, pads)]
    height = data.draw(st.integers(max(1, extent[0]), 8))
    width = data.draw(st.integers(max(1, extent[1]), 8))
    x, w, g = tn.tensor4("x"), tn.tensor("w", shape=(None, None, kh, kw)), tn.tensor4("g")
    y = tn.nnet.conv2d(x, w, stride, pads, dilation, groups)
    f = tn.function([x, w, g], [y, *tn.grad(tn.sum(y * g), [x, w])],
                    mode=tn.Mode(linker=linker))
    xv = RNG.normal(size=(2, groups * per_group, height, width))
    wv = RNG.normal(size=(n_filters, per_group, kh, kw))
    want = conv_reference(xv, wv, stride, pads, dilation, groups)
    gv = RNG.normal(size=want.shape)
    got, gx, gw = f(xv, wv, gv)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    inner = np.sum(want * gv)
    np.testing.assert_allclose([np.sum(xv * gx), np.sum(wv * gw)], [inner, inner],
                               rtol=1e-10, atol=1e-10)


def test_conv2d_gradients(mode):
    """For the input and the filters, through strides, padding, dilation
    and groups (finite differences)."""
    def conv(x, w):
        return tn.nnet.conv2d(x, w, stride=(2, 1), padding=1, dilation=(1, 2), groups=2,
                              filter_shape=(2, 2, 2, 2))
    verify_grad(conv, [RNG.normal(size=(2, 4, 5, 6)), RNG.normal(size=(2, 2, 2, 2))], mode=mode)


def test_conv2d_with_shared_filters_checks_their_window_at_every_call():
    """A shared variable's window is read from its value when the graph is
    built, and checked at every call."""
    w = tn.shared(RNG.normal(size=(2, 3, 3, 3)), name="w")
    x = tn.tensor4("x")
    f = tn.function([x], tn.nnet.conv2d(x, w, padding="same"))
    xv = RNG.normal(size=(1, 3, 5, 5))
    np.testing.assert_allclose(f(xv), conv_reference(xv, w.get_value(), pads=((1, 1), (1, 1))))
    w.set_value(RNG.normal(size=(2, 3, 5, 5)))
    with pytest.raises(ValueError, match="w"):
        f(xv)


@pytest.mark.parametrize("linker", ["py", "c"])
@pytest.mark.parametrize("padding", [0, 1])
def test_conv2d_and_its_gradients_hold_one_images_columns(linker, padding):
    """The correlation and its gradients compute image by image: each step's
    temporary is one image's columns (perform also pads the image), never
    the whole batch's patches, and the plan predicts the measured peak."""
    x = tn.tensor("x", shape=(8, 3, 32, 32), dtype="float32")
    w = tn.tensor("w", shape=(4, 3, 3, 3), dtype="float32")
    y = tn.nnet.conv2d(x, w, padding=padding)
    f = tn.function([x, w], [y, *tn.grad(tn.sum(y ** 2), [x, w])], mode=tn.Mode(linker=linker))
    report = f.memory_report(np.ones((8, 3, 32, 32), "float32"), np.ones((4, 3, 3, 3), "float32"))
    side = 32 + 2 * padding - 2
    columns = 3 * 9 * side * side * 4
    padded = 3 * (32 + 2 * padding) ** 2 * 4
    steps = {r.op.split("{")[0]: r.workspace for r in report.records if "Corr2d" in r.op}
    assert set(steps) == {"Corr2d", "Corr2dGradInputs", "Corr2dGradFilters"}
    if linker == "c":
        assert set(steps.values()) == {columns}
    else:
        assert steps["Corr2d"] == columns + (padded if padding else 0)
        # (and NumPy's buffers for the adds of each tap's share: see the op)
        assert steps["Corr2dGradInputs"] == columns + padded + 3 * min(3 * side * side, 8192) * 4
    whole_batch_patches = 8 * columns
    assert report.predicted_peak < whole_batch_patches
    assert abs(report.measured_peak - report.predicted_peak) < 0.02 * report.predicted_peak


def test_each_linker_runs_the_op_or_its_expansion(mode):
    """The py, check and C linkers run the correlation ops; the dask and cuda
    linkers, which have no kernel for them, run their expansion (slices, a
    join and products), gradients included -- to the same numbers."""
    x, w = tn.tensor4("x"), tn.tensor("w", shape=(None, None, 2, 2))
    y = tn.nnet.conv2d(x, w, stride=2, padding=1)
    outs = [y, *tn.grad(tn.sum(y ** 2), [x, w])]
    f = tn.function([x, w], outs, mode=mode)
    ops = {type(node.op).__name__ for node in f.fgraph.toposort()}
    family = {"Corr2d", "Corr2dGradInputs", "Corr2dGradFilters"}
    if LINKERS[mode.linker].expands_ops:
        assert not ops & family and "Dot" in ops
    else:
        assert family <= ops
    xv, wv = RNG.normal(size=(2, 3, 5, 4)), RNG.normal(size=(2, 3, 2, 2))
    reference = tn.function([x, w], outs, mode=tn.Mode(linker="py"))
    for got, want in zip(f(xv, wv), reference(xv, wv)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_second_order_gradients_stay_in_the_family(mode):
    """The gradient of each of the three ops is the other two: a Hessian-vector
    product through the gradients, by finite differences."""
    def filters_gradient(x, w):
        y = tn.nnet.conv2d(x, w, stride=(2, 1), padding=1, dilation=(1, 2), groups=2,
                           filter_shape=(2, 2, 2, 2))
        gx, gw = tn.grad(tn.sum(tn.tanh(y)), [x, w])
        return tn.sum(gx ** 2) + tn.sum(gw * w)
    verify_grad(filters_gradient, [RNG.normal(size=(2, 4, 5, 6)), RNG.normal(size=(2, 2, 2, 2))],
                mode=mode)


def test_the_c_kernels_read_any_strides(cc_or_skip):
    """Transposed and reversed views (negative strides) go into the
    correlation's and the max pool's kernels as they are."""
    x, w = tn.tensor4("x", dtype="float32"), tn.tensor("w", shape=(3, 2, 2, 3), dtype="float32")
    xt, wr = x.dimshuffle(0, 1, 3, 2), w[:, :, ::-1, :]
    y = tn.nnet.conv2d(xt, wr, padding=(1, 0))
    pooled = tn.nnet.pool_2d(xt[:, :, ::-1, ::2], (2, 2), stride=(1, 1))
    outs = [y, pooled, *tn.grad(tn.sum(y * y) + tn.sum(pooled ** 2), [x, w])]
    c = tn.function([x, w], outs, mode=tn.Mode(linker="c"))
    names = {type(n.op).__name__ for n in c.fgraph.toposort()}
    assert {"Corr2dGradFilters", "MaxPool2d", "MaxPool2dGrad"} <= names
    py = tn.function([x, w], outs, mode=tn.Mode(linker="py"))
    xv = RNG.normal(size=(2, 2, 6, 5)).astype("float32")
    wv = RNG.normal(size=(3, 2, 2, 3)).astype("float32")
    for got, want in zip(c(xv, wv), py(xv, wv)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("linker", ["py", "c"])
def test_a_gradient_of_the_wrong_shape_is_refused_naming_both_shapes(linker):
    """The gradient ops run on their own (a graph built by hand) check the
    output's gradient against the output's shape, and say both."""
    if linker == "c" and compiler.find_compiler() is None:
        pytest.skip("no working C compiler")
    mode = tn.Mode(linker=linker, rewrites="none")
    x, gy = tn.tensor4("x", dtype="float32"), tn.tensor4("gy", dtype="float32")
    pool = MaxPool2dGrad((2, 2), (2, 2), ((0, 0), (0, 0)))
    f = tn.function([x, gy], pool(x, gy), mode=mode)
    with pytest.raises(ValueError, match=r"\(1, 1, 3, 2\).*\(1, 1, 2, 2\)"):
        f(np.ones((1, 1, 4, 4), "float32"), np.ones((1, 1, 3, 2), "float32"))
    w, g = tn.tensor4("w", dtype="float32"), tn.tensor4("g", dtype="float32")
    grad_inputs = Corr2dGradInputs((2, 2), (1, 1), (1, 1), ((0, 0), (0, 0)), 1)
    f = tn.function([w, g], grad_inputs(w, g, 4, 4), mode=mode)
    with pytest.raises(ValueError, match=r"\(1, 1, 2, 3\).*\(1, 1, 3, 3\)"):
        f(np.ones((1, 1, 2, 2), "float32"), np.ones((1, 1, 2, 3), "float32"))


def test_channels_and_gradient_shapes_are_checked_in_every_kernel(mode):
    """Where the shapes are not static the op itself refuses a mismatch,
    naming the channels, on every linker."""
    x, w = tn.tensor4("x"), tn.tensor("w", shape=(None, None, 2, 2))
    f = tn.function([x, w], tn.nnet.conv2d(x, w), mode=mode)
    with pytest.raises(ValueError, match=r"3 channels|channels.*3|\(None, 2|expected .*2"):
        f(np.ones((1, 3, 4, 4)), np.ones((2, 2, 2, 2)))


POOL_CASES = [((2, 2), True, None, (0, 0)), ((3, 2), True, (1, 2), (1, 1)),
              ((2, 3), False, None, (0, 0)), ((3, 3), False, (2, 1), (0, 0)),
              ((2, 2), True, (3, 3), (1, 0))]


@pytest.mark.parametrize("pool_mode", ["max", "sum", "average_inc_pad", "average_exc_pad"])
def test_pool_2d_matches_a_direct_loop(pool_mode, mode):
    x = tn.tensor("x", shape=(2, 3, 7, 5))
    f = tn.function([x], [tn.nnet.pool_2d(x, ws, border, stride, pad, pool_mode)
                          for ws, border, stride, pad in POOL_CASES], mode=mode)
    xv = RNG.normal(size=(2, 3, 7, 5))
    for got, (ws, border, stride, pad) in zip(f(xv), POOL_CASES):
        want = pool_reference(xv, ws, border, stride, pad, pool_mode)
        assert got.shape == want.shape
        # (a window's sum may cancel: its rounding is relative to the terms, O(1))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_pool_2d_of_integers_and_any_leading_axes(mode):
    x = tn.tensor("x", dtype="int16", shape=(None, None))
    f = tn.function([x], [tn.nnet.pool_2d(x, (2, 2), pad=(1, 1)),
                          tn.nnet.pool_2d(x, (2, 2), mode="average_exc_pad")], mode=mode)
    xv = -np.arange(20, dtype="int16").reshape(4, 5)
    maxes, means = f(xv)
    assert maxes.dtype == np.int16
    np.testing.assert_array_equal(maxes, pool_reference(xv, (2, 2), pad=(1, 1)))
    np.testing.assert_allclose(means, pool_reference(xv, (2, 2), mode="average_exc_pad"))


def test_pool_2d_gradients(mode):
    """Averages and sums by finite differences; a max pool's gradient goes to
    each window's maximum -- shared evenly on a tie, as ``tn.max``'s."""
    verify_grad(lambda x: tn.nnet.pool_2d(x, (2, 2), True, (1, 1), (1, 1), "average_exc_pad"),
                [RNG.normal(size=(2, 3, 4, 5))], mode=mode)
    verify_grad(lambda x: tn.nnet.pool_2d(tn.specify_shape(x, (1, 2, 5, 5)), (3, 2), False,
                                          None, (0, 0), "average_inc_pad"),
                [RNG.normal(size=(1, 2, 5, 5))], mode=mode)
    verify_grad(lambda x: tn.nnet.pool_2d(x, (2, 3), mode="max"),
                [RNG.normal(size=(2, 3, 4, 6))], mode=mode)
    x = tn.matrix("x")
    g = tn.grad(tn.sum(tn.nnet.pool_2d(x, (2, 2))), x)
    got = tn.function([x], g, mode=mode)(np.array([[1.0, 3.0], [3.0, 2.0]]))
    np.testing.assert_array_equal(got, [[0.0, 0.5], [0.5, 0.0]])


def test_batch_normalization_train_and_test_match_numpy(mode):
    x = tn.tensor4("x")
    gamma, beta, running_mean, running_var = (tn.vector(n) for n in ("g", "b", "rm", "rv"))
    out, mean, invstd, new_mean, new_var = tn.nnet.batch_normalization_train(
        x, gamma, beta, "spatial", 1e-5, 0.1, running_mean, running_var)
    test_out = tn.nnet.batch_normalization_test(x, gamma, beta, running_mean, running_var,
                                                "spatial", 1e-5)
    dense = tn.matrix("dense")
    dense_out, *_ = tn.nnet.batch_normalization_train(dense, tn.ones((1, 3)), 0.5)
    f = tn.function([x, gamma, beta, running_mean, running_var, dense],
                    [out, mean, invstd, new_mean, new_var, test_out, dense_out], mode=mode)
    xv, dv = RNG.normal(size=(4, 3, 5, 2)), RNG.normal(size=(6, 3))
    g, b, rm, rv = RNG.normal(size=3), RNG.normal(size=3), RNG.normal(size=3), np.ones(3) * 2
    got = f(xv, g, b, rm, rv, dv)
    axes, c = (0, 2, 3), (1, 3, 1, 1)
    m, v = xv.mean(axes, keepdims=True), xv.var(axes, keepdims=True)
    unbiased = xv.var(axes, ddof=1, keepdims=True)
    want = [(xv - m) / np.sqrt(v + 1e-5) * g.reshape(c) + b.reshape(c), m, 1 / np.sqrt(v + 1e-5),
            0.9 * rm.reshape(c) + 0.1 * m, 0.9 * rv.reshape(c) + 0.1 * unbiased,
            (xv - rm.reshape(c)) / np.sqrt(rv.reshape(c) + 1e-5) * g.reshape(c) + b.reshape(c),
            (dv - dv.mean(0)) / np.sqrt(dv.var(0) + 1e-4) + 0.5]
    for k, (a, e) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, e, rtol=1e-10, atol=1e-12, err_msg=f"output {k}")


def test_batch_normalization_gradients(mode):
    verify_grad(lambda x, g, b: tn.nnet.batch_normalization_train(x, g, b, "spatial")[0],
                [RNG.normal(size=(3, 2, 2, 2)), RNG.normal(size=(1, 2, 1, 1)),
                 RNG.normal(size=(1, 2, 1, 1))], mode=mode)
    verify_grad(lambda x, m, s: tn.nnet.batch_normalization(x, 2.0, 0.5, m, s),
                [RNG.normal(size=(3, 4)), RNG.normal(size=(4,)), 1 + RNG.random(4)], mode=mode)


@pytest.mark.parametrize("build, error, message", [
    (lambda: tn.nnet.conv2d(tn.tensor("x", shape=(1, 3, 5, 5)),
                            tn.tensor("w", shape=(2, 2, 3, 3))),
     ValueError, r"conv2d: input has 3 channels, but the filters take 2 per group x 1"),
    (lambda: tn.nnet.conv2d(tn.tensor("x", shape=(1, 1, 2, 5)),
                            tn.tensor("w", shape=(1, 1, 3, 3))),
     ValueError, r"conv2d: the window spans 3 along the height .* more than the padded input's 2"),
    (lambda: tn.nnet.conv2d(tn.tensor4("x"), tn.tensor4("w")), ValueError,
     r"conv2d: the filters' height and width must be known .* filter_shape="),
    (lambda: tn.nnet.conv2d(tn.tensor4("x"), tn.tensor4("w"), filter_shape=(1, 1, 3)),
     ValueError, r"filter_shape must have 4 entries"),
    (lambda: tn.nnet.conv2d(tn.tensor4("x"), tn.tensor4("w"), stride=2, padding="same",
                            filter_shape=(1, 1, 3, 3)),
     ValueError, r"padding='same' needs stride 1"),
    (lambda: tn.nnet.conv2d(tn.tensor4("x"), tn.tensor4("w"), padding="wide",
                            filter_shape=(1, 1, 3, 3)), ValueError, r"padding must be 'valid'"),
    (lambda: tn.nnet.conv2d(tn.tensor4("x"), tn.tensor4("w"), stride=0,
                            filter_shape=(1, 1, 3, 3)), ValueError, r"stride must be >= 1"),
    (lambda: tn.nnet.conv2d(tn.tensor4("x"), tn.tensor("w", shape=(3, 1, 2, 2)), groups=2),
     ValueError, r"the filters' count \(3\) must be a multiple of groups \(2\)"),
    (lambda: tn.nnet.conv2d(tn.matrix("x"), tn.tensor4("w")), ValueError,
     r"conv2d: input must be 4-d"),
    (lambda: tn.nnet.pool_2d(tn.tensor4("x"), (0, 2)), ValueError, r"pool_2d: ws must be >= 1"),
    (lambda: tn.nnet.pool_2d(tn.tensor4("x"), (2, 2), pad=(2, 0)), ValueError,
     r"pad must be smaller than ws"),
    (lambda: tn.nnet.pool_2d(tn.tensor4("x"), (2, 2), mode="mean"), ValueError,
     r"mode must be one of max, sum"),
    (lambda: tn.nnet.pool_2d(tn.tensor4("x"), (2, 2), ignore_border=False), ValueError,
     r"ignore_border=False needs the input's height and width known"),
    (lambda: tn.nnet.pool_2d(tn.tensor("x", shape=(1, 1, 3, 1)), (2, 2)), ValueError,
     r"pool_2d: the window spans 2 along the width"),
    (lambda: tn.nnet.batch_normalization_train(tn.tensor4("x"), tn.matrix("g"), 0.0), ValueError,
     r"batch_normalization_train: gamma must have 4 axes .* or 3"),
    (lambda: tn.nnet.batch_normalization_train(tn.matrix("x"), 1.0, 0.0, epsilon=-1),
     ValueError, r"epsilon must be a number >= 0"),
    (lambda: tn.nnet.batch_normalization_train(tn.matrix("x"), 1.0, 0.0, running_mean=0.0),
     ValueError, r"give both running_mean and running_var"),
    (lambda: tn.nnet.batch_normalization_test(tn.matrix("x", dtype="int32"), 1.0, 0.0, 0.0,
                                              1.0), TypeError, r"inputs must be floats"),
])
def test_bad_arguments_are_named_when_the_graph_is_built(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_channels_are_checked_at_every_call_where_not_static():
    x, w = tn.tensor4("x"), tn.tensor("w", shape=(2, 3, 1, 1))
    f = tn.function([x, w], tn.nnet.conv2d(x, w))
    with pytest.raises(ValueError, match=r"\(None, 3, None, None\)|expected .*3"):
        f(np.ones((1, 4, 2, 2)), np.ones((2, 3, 1, 1)))


def test_the_three_ops_price_their_work_alike():
    """Each multiply-add counts two flops, in the correlation and in each of
    its gradients (the activation-memory budget prices recomputation so)."""
    x, w = tn.tensor4("x"), tn.tensor("w", shape=(None, None, 3, 3))
    y = tn.nnet.conv2d(x, w, padding=1, groups=2)
    gx, gw = tn.grad(tn.sum(y), [x, w])
    shapes = {x: (2, 4, 5, 5), w: (6, 2, 3, 3), y: (2, 6, 5, 5), gx: (2, 4, 5, 5),
              gw: (6, 2, 3, 3), gx.owner.inputs[1]: (2, 6, 5, 5),
              gw.owner.inputs[1]: (2, 6, 5, 5)}
    work = 2.0 * 2 * 6 * 5 * 5 * (2 * 9)
    for var in (y, gx, gw):
        assert var.owner.op.flops(var.owner, shapes) == work, var.owner.op


@pytest.mark.parametrize("linker", ["py", "c"])
# (the expansion's NumPy divides 0 by 0 for a window whose maximum is NaN)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_max_pool_and_its_gradient_equal_their_expansion(linker, data):
    """MaxPool2d and MaxPool2dGrad (NumPy perform, C kernels) against the
    graph of slices the cuda and dask linkers run, over drawn windows,
    strides, paddings and borders, with ties, -inf and NaN in the input."""
    if linker == "c" and compiler.find_compiler() is None:
        pytest.skip("no working C compiler")
    ws = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    stride = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    border = data.draw(st.booleans())
    pad = (0, 0) if not border else tuple(data.draw(st.integers(0, k - 1)) for k in ws)
    height, width = data.draw(st.integers(3, 7)), data.draw(st.integers(3, 7))
    x = tn.tensor("x", dtype="float32", shape=(None, None, height, width))
    y = tn.nnet.pool_2d(x, ws, border, stride, pad, "max")
    gy = tn.tensor("gy", dtype="float32", shape=(None,) * 4)
    (op_node,) = [n for n in tn.function([x], y).fgraph.toposort() if isinstance(n.op, MaxPool2d)]
    pool = op_node.op
    expanded = composed_max_pool(x, pool)
    outs = [y, tn.grad(tn.sum(y * gy), x)]
    want = [expanded, tn.grad(tn.sum(expanded * gy), x)]
    f = tn.function([x, gy], outs, mode=tn.Mode(linker=linker))
    reference = tn.function([x, gy], want, mode=tn.Mode(linker="py"))
    xv = RNG.integers(-2, 3, size=(2, 3, height, width)).astype("float32")   # ties
    xv[0, 0, 0, 0], xv[1, 2, -1, -1] = -np.inf, np.nan
    out_shape = tn.function([x], y, mode=tn.Mode(linker="py"))(xv).shape
    gv = RNG.normal(size=out_shape).astype("float32")
    for got, expected in zip(f(xv, gv), reference(xv, gv)):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("linker", ["py", "c"])
def test_max_pool_reads_the_input_where_it_is(linker):
    """No stacked patches and no mask: the C kernels allocate nothing but
    their output, perform one image's temporaries, and the plan predicts the
    measured peak."""
    x = tn.tensor("x", shape=(16, 6, 24, 24), dtype="float32")
    y = tn.nnet.pool_2d(x, (2, 2))
    f = tn.function([x], [y, tn.grad(tn.sum(y ** 2), x)], mode=tn.Mode(linker=linker))
    report = f.memory_report(RNG.normal(size=(16, 6, 24, 24)).astype("float32"))
    steps = {r.op.split("{")[0]: r.workspace for r in report.records}
    assert "Stack" not in steps and {"MaxPool2d", "MaxPool2dGrad"} <= set(steps)
    if linker == "c":
        assert steps["MaxPool2d"] == steps["MaxPool2dGrad"] == 0
    image = 6 * 24 * 24 * 4
    assert steps["MaxPool2d"] < image and steps["MaxPool2dGrad"] < 2 * image
    assert abs(report.measured_peak - report.predicted_peak) < 0.02 * report.predicted_peak


def test_gradients_through_a_max_pools_gradient(mode):
    """The max pool's gradient is linear in the output's gradient, with a
    gradient of its own (a Hessian-vector product through the pool)."""
    def through(x):
        y = tn.nnet.pool_2d(x, (2, 2), stride=(1, 1))
        return tn.grad(tn.sum(tn.tanh(y) * y), x) * x
    verify_grad(through, [RNG.normal(size=(2, 2, 4, 5))], mode=mode)
