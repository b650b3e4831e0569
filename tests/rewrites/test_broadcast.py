"""Broadcasting without copies (issue 37, item 1): ``alloc_read_as_broadcast``
drops an alloc that fused elementwise ops can read broadcast, where the
graph proves the shape (``dim_key``), and only there; and the gradient of a
hand-written layer norm keeps no full-size alloc and no Python step."""

import numpy as np
import pytest

import tenure as tn
from tenure.rewrites.broadcast import broadcasts_to, dim_key, has_shape, scalar_key
from tenure.symbolic.ops.creation import Alloc
from tenure.symbolic.ops.reduce import SumTo

NONE = tn.Mode(rewrites="none")
LINKERS = ["py", "c"]


def allocs(f):
    return [n for n in f.fgraph.apply_nodes if isinstance(n.op, Alloc)]


def layer_norm_grads(x, g, b, w):
    """The gradients of sum(layer_norm(x) * w), written from primitives."""
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    y = (x - mu) / tn.sqrt(var + 1e-5) * g + b
    return tn.grad(tn.sum(y * w), [x, g, b])


def layer_norm_args(rows=5, cols=7, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, cols)), rng.standard_normal(cols),
            rng.standard_normal(cols), rng.standard_normal((rows, cols)))


class TestDimKey:
    def test_lengths_the_graph_states(self):
        x, v = tn.matrix("x"), tn.matrix("v", shape=(None, 1))
        n0 = scalar_key(x.shape[0])
        assert n0 == dim_key(x, 0) and scalar_key(x.shape[1]) == dim_key(x, 1)
        row = x.mean(axis=1, keepdims=True)
        assert dim_key(tn.exp(x) - row, 0) == n0        # the row keeps x's axis 0
        assert dim_key(tn.exp(x) - v, 1) == dim_key(x, 1)   # v is statically 1 there
        assert dim_key(tn.exp(x) - v, 0) is None        # v's axis 0 may be 1 at run time
        assert dim_key(x.mean(axis=1, keepdims=True), 0) == n0
        assert dim_key(x.T, 0) == dim_key(x, 1)
        s = SumTo()(tn.exp(x), x.shape[0], 1)
        assert dim_key(s, 0) == n0 and dim_key(s, 1) == ("static", 1)
        assert scalar_key(tn.constant(np.int64(3))) == ("static", 3)

    def test_a_deep_diamond_is_walked_once(self):
        """Each elementwise step reads the previous one twice: 2**40 paths,
        one walk of 80 nodes (the memo), still to x's length."""
        x = tn.matrix("x")
        y = x
        for _ in range(40):
            y = y * 2.0 + y * 3.0
        assert dim_key(y, 0) == dim_key(x, 0) == scalar_key(x.shape[0])

    def test_what_it_cannot_tell(self):
        x, y = tn.matrix("x"), tn.matrix("y")
        assert dim_key(x + y, 0) is None        # either may be 1 at run time
        assert dim_key(x, 0) != dim_key(y, 0)
        assert not has_shape(x + y, [x.shape[0], x.shape[1]])
        assert has_shape(x * 2, [x.shape[0], x.shape[1]])
        assert broadcasts_to(x.sum(axis=1, keepdims=True), [x.shape[0], x.shape[1]])
        assert not broadcasts_to(y, [x.shape[0], x.shape[1]])


class TestAllocReadAsBroadcast:
    @pytest.mark.parametrize("linker", LINKERS)
    def test_the_layer_norm_gradient_keeps_no_alloc(self, linker):
        x, w = tn.matrix("x"), tn.matrix("w")
        g, b = tn.vector("g"), tn.vector("b")
        outs = layer_norm_grads(x, g, b, w)
        f = tn.function([x, g, b, w], outs, mode=tn.Mode(linker=linker))
        assert "alloc_read_as_broadcast" in f.rewrites_applied and not allocs(f)
        kept = tn.function([x, g, b, w], outs, mode=tn.Mode(
            linker=linker, exclude=["alloc_read_as_broadcast"]))
        assert allocs(kept)
        reference = tn.function([x, g, b, w], outs, mode=NONE)
        args = layer_norm_args()
        for got, want in zip(f(*args), reference(*args)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        for got, want in zip(f(*args), kept(*args)):
            np.testing.assert_array_equal(got, want)    # reading v broadcast: the same bits

    def test_an_alloc_that_gives_the_shape_stays(self):
        x = tn.matrix("x")
        r = x.sum(axis=1, keepdims=True)
        out = tn.alloc(r, x.shape[0], x.shape[1]) * 2.0   # nothing else is full-size
        f = tn.function([x], out)
        assert allocs(f)
        np.testing.assert_array_equal(f(np.ones((2, 3))), np.full((2, 3), 6.0))

    def test_a_value_that_might_not_broadcast_keeps_its_alloc_and_error(self):
        x, v = tn.matrix("x"), tn.matrix("v")
        out = tn.alloc(v, x.shape[0], x.shape[1]) * tn.exp(x)
        f = tn.function([x, v], out)
        assert allocs(f)
        with pytest.raises(ValueError, match="cannot be broadcast"):
            f(np.ones((1, 3)), np.ones((2, 3)))   # x * v alone would broadcast to (2, 3)

    def test_two_allocs_read_together_both_stay(self):
        """Neither gives the shape the other may lose: whether one goes never
        depends on another that may go too (the output keeps its shape)."""
        x, c, d = tn.matrix("x"), tn.scalar("c"), tn.scalar("d")
        a1 = tn.alloc(c, x.shape[0], x.shape[1])
        a2 = tn.alloc(d, x.shape[0], x.shape[1])
        f = tn.function([x, c, d], a1 * a2 + 1)
        assert len(allocs(f)) == 2
        assert f(np.zeros((2, 3)), 2.0, 3.0).shape == (2, 3)
        g = tn.function([x, c, d], a1 * a2 + x)    # x gives it: both go
        assert not allocs(g)
        np.testing.assert_array_equal(g(np.ones((2, 3)), 2.0, 3.0), np.full((2, 3), 7.0))
