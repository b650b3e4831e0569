"""Creation ops: alloc and friends, arange, eye; sum_to (the adjoint of broadcasting) and
expand_to (broadcasting that copies only when it must)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.symbolic.ops.creation import ExpandTo, expand_to
from tenure.testing import verify_grad
from tests.helpers import COMPILED


class TestFilled:
    def test_zeros_ones_full(self, mode):
        n = tn.scalar("n", dtype="int64")
        f = tn.function([n], [tn.zeros((n, 2)), tn.ones(3, dtype="int32"), tn.full((n,), 7),
                              tn.full((2,), 1.5, dtype="float32")], mode=mode)
        z, o, full_int, full_f32 = f(4)
        np.testing.assert_array_equal(z, np.zeros((4, 2)))
        assert o.dtype == np.int32 and o.shape == (3,)
        assert full_int.dtype == np.int64 and full_int.tolist() == [7] * 4
        assert full_f32.dtype == np.float32

    def test_default_dtype_follows_floatx(self):
        with tn.config.change_flags(floatX="float32"):
            assert tn.zeros((2,)).dtype == "float32"
            assert tn.eye(2).dtype == "float32"
            assert tn.full((2,), 0.5).dtype == "float32"

    def test_like(self, mode):
        x = tn.matrix("x", dtype="float32")
        f = tn.function([x], [tn.zeros_like(x), tn.ones_like(x, dtype="int8"),
                              tn.full_like(x, 3)], mode=mode)
        z, o, t = f(np.ones((2, 3), dtype="float32"))
        assert z.dtype == np.float32 and z.shape == (2, 3) and not z.any()
        assert o.dtype == np.int8 and o.sum() == 6
        assert t.dtype == np.float32 and (t == 3).all()

    def test_like_does_not_compute_its_argument(self):
        # Only the shape is needed, and infer_shape gives it without running exp.
        x = tn.matrix("x")
        z = tn.zeros_like(tn.exp(x))
        f = tn.function([x], z)
        assert not any(getattr(n.op, "scalar_op", None) is not None
                       and n.op.scalar_op.name == "exp" for n in f.fgraph.apply_nodes)

    def test_results_are_fresh_writable_arrays(self, mode):
        v = tn.vector("v")
        out = tn.function([v], tn.broadcast_to(v, (2, 3)), mode=mode)(np.arange(3.0))
        assert out.flags.writeable and out.shape == (2, 3)
        out[0, 0] = 9  # a real array, not a read-only broadcast view

    def test_static_shapes(self):
        n = tn.scalar("n", dtype="int64")
        assert tn.zeros((n, 3)).type.shape == (None, 3)
        assert tn.alloc(1.0, 2, 3).type.shape == (2, 3)
        assert tn.broadcast_to(tn.vector("v", shape=(3,)), (4, 3)).type.shape == (4, 3)

    def test_errors(self):
        with pytest.raises(ValueError, match="negative length -1"):
            tn.zeros((2, -1))
        with pytest.raises(TypeError, match=r"zeros shape\[0\]: expected an int"):
            tn.zeros((1.5,))
        with pytest.raises(ValueError, match="cannot be broadcast"):
            tn.broadcast_to(tn.vector("v", shape=(3,)), (2, 4))
        with pytest.raises(ValueError, match="cannot broadcast 2-d"):
            tn.broadcast_to(tn.matrix("m"), (3,))
        v = tn.vector("v")
        f = tn.function([v], tn.broadcast_to(v, (2, 3)))
        with pytest.raises(ValueError, match=r"cannot be broadcast to \(2, 3\)"):
            f(np.ones(4))

    def test_gradients(self):
        rng = np.random.default_rng(0)
        verify_grad(lambda v: tn.broadcast_to(v, (4, 3)), [rng.normal(size=3)])
        verify_grad(lambda v: tn.broadcast_to(v, (2, 3)), [rng.normal(size=(2, 1))])
        verify_grad(lambda v: tn.alloc(v, 2, 2), [rng.normal(size=())])


class TestArangeEye:
    @settings(max_examples=40, deadline=None)
    @given(start=st.integers(-5, 5), stop=st.integers(-5, 10),
           step=st.integers(-3, 3).filter(lambda s: s != 0))
    def test_arange_like_numpy(self, start, stop, step):
        expected = np.arange(start, stop, step)
        out = tn.arange(start, stop, step)
        assert out.type.shape == (len(expected),)
        np.testing.assert_array_equal(out.eval(), expected)

    @COMPILED
    @given(start=st.integers(-5, 5), stop=st.integers(-5, 10),
           step=st.integers(-3, 3).filter(lambda s: s != 0))
    def test_arange_symbolic_bounds_and_shape(self, start, stop, step, mode):
        a, b, c = (tn.scalar(n, dtype="int64") for n in "abc")
        out = tn.arange(a, b, c)
        f = tn.function([a, b, c], [out, tn.ops.shape_tuple(out)[0]], mode=mode)
        values, length = f(start, stop, step)
        np.testing.assert_array_equal(values, np.arange(start, stop, step))
        assert int(length) == len(values)

    def test_arange_dtypes(self):
        assert tn.arange(5).dtype == "int64"
        assert tn.arange(0.0, 1.0, 0.25).eval().tolist() == [0.0, 0.25, 0.5, 0.75]
        assert tn.arange(3, dtype="float32").dtype == "float32"
        n = tn.scalar("n", dtype="int32")
        assert tn.arange(n).dtype == "int64"  # NumPy: int32 bound with Python ints

    def test_arange_step_zero(self):
        with pytest.raises(ValueError, match="step must not be 0"):
            tn.arange(0, 5, 0)
        s = tn.scalar("s", dtype="int64")
        with pytest.raises(ValueError, match="step must not be 0"):
            tn.arange(0, 5, s).eval({s: 0})

    def test_eye(self, mode):
        n = tn.scalar("n", dtype="int64")
        f = tn.function([n], [tn.eye(n), tn.eye(3, 4, k=-1, dtype="int32")], mode=mode)
        a, b = f(3)
        np.testing.assert_array_equal(a, np.eye(3))
        np.testing.assert_array_equal(b, np.eye(3, 4, k=-1, dtype=np.int32))
        with pytest.raises(TypeError, match="eye: n must be a 0-d integer"):
            tn.eye(2.5)


class TestSumTo:
    @pytest.mark.parametrize("g_shape, target", [
        ((2, 3), (3,)), ((2, 3), (2, 1)), ((2, 3), (1, 1)), ((4, 2, 3), (2, 3)),
        ((2, 3), (2, 3)), ((0, 3), (1, 3)), ((2, 3), ()),
    ])
    def test_matches_numpy_broadcast_adjoint(self, g_shape, target, mode):
        g = tn.tensor("g", shape=(None,) * len(g_shape))
        like = tn.tensor("like", shape=(None,) * len(target))
        f = tn.function([g, like], tn.sum_to(g, like), mode=mode, on_unused_input="ignore")
        gv = np.random.default_rng(1).normal(size=g_shape)
        lead = len(g_shape) - len(target)
        expected = gv.sum(axis=tuple(range(lead))) if lead else gv
        axes = tuple(i for i, t in enumerate(target) if t == 1 and expected.shape[i] != 1)
        expected = expected.sum(axis=axes, keepdims=True) if axes else expected
        np.testing.assert_allclose(f(gv, np.zeros(target)), expected)

    def test_incompatible_shapes(self):
        g, like = tn.matrix("g"), tn.vector("like")
        f = tn.function([g, like], tn.sum_to(g, like))
        with pytest.raises(ValueError, match="does not broadcast from"):
            f(np.ones((2, 3)), np.ones(4))

    def test_gradient(self):
        like = tn.constant(np.zeros((1, 3)))
        verify_grad(lambda g: tn.sum_to(g, like), [np.random.default_rng(0).normal(size=(4, 3))])


class TestExpandTo:
    @pytest.mark.parametrize("shape, target", [
        ((2, 3), (2, 3)), ((3,), (2, 3)), ((3,), (1, 3)), ((2, 1), (2, 4)), ((), (2, 2)),
        ((1, 3), (0, 3)), ((2, 3), (5, 2, 3)),
    ])
    def test_matches_numpy_broadcast_to(self, shape, target, mode):
        v = tn.tensor("v", shape=(None,) * len(shape))
        n = tn.scalar("n", dtype="int64")
        dims = (n,) + tuple(target[1:]) if target else ()
        f = tn.function([v, n], expand_to(tn.exp(v), *dims), mode=mode,
                        on_unused_input="ignore")
        vv = np.random.default_rng(2).normal(size=shape)
        got = f(vv, np.int64(target[0]) if target else np.int64(0))
        np.testing.assert_allclose(got, np.broadcast_to(np.exp(vv), target))
        assert got.shape == target

    def test_the_value_itself_when_nothing_is_broadcast(self):
        value = np.arange(6.0).reshape(2, 3)
        assert ExpandTo.expanded(value, (2, 3)) is value
        leading = ExpandTo.expanded(value, (1, 2, 3))
        assert leading.shape == (1, 2, 3) and np.shares_memory(leading, value)

    def test_a_broadcast_is_a_new_writable_array(self):
        value = np.arange(3.0)
        out = ExpandTo.expanded(value, (2, 3))
        assert not np.shares_memory(out, value) and out.flags.writeable
        out[0, 0] = 9.0         # a real array: no other element changes
        assert out[1, 0] == 0.0 and value[0] == 0.0

    def test_errors_name_the_op_and_the_shapes(self, mode):
        v, n = tn.vector("v"), tn.scalar("n", dtype="int64")
        f = tn.function([v, n], expand_to(v, n, 3), mode=mode)
        with pytest.raises(ValueError, match=r"expand_to: value of shape \(4,\) cannot be "
                                             r"broadcast to \(2, 3\)"):
            f(np.ones(4), np.int64(2))
        with pytest.raises(ValueError, match="expand_to: negative dimensions"):
            f(np.ones(3), np.int64(-1))
        with pytest.raises(ValueError, match=r"expand_to: value of shape \(4,\) cannot be "
                                             r"broadcast to \(3,\)"):
            expand_to(tn.vector("w", shape=(4,)), 3)
        with pytest.raises(TypeError, match=r"expand_to: shape\[0\] must be a 0-d integer"):
            ExpandTo()(v, tn.vector("d", dtype="int64"))

    def test_static_shape_and_gradient(self):
        assert expand_to(tn.vector("v", shape=(3,)), 4, 3).type.shape == (4, 3)
        rng = np.random.default_rng(0)
        verify_grad(lambda v: expand_to(v, 4, 3), [rng.normal(size=3)])
        verify_grad(lambda v: expand_to(v, 2, 3), [rng.normal(size=(2, 3))])
