"""Broadcasting without copies (issue 37, item 1): ``alloc_read_as_broadcast``
drops an alloc that fused elementwise ops can read broadcast, where the
graph proves the shape (``dim_key``), and only there; and the gradient of a
hand-written layer norm keeps no full-size alloc and no Python step."""

import numpy as np
import pytest

import tenure as tn
from tenure.rewrites.broadcast import Lengths, broadcasts_to, dim_key, has_shape, scalar_key
from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.composite import Composite
from tenure.symbolic.ops.elemwise import Elemwise
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
        # v's axis 0 may be 1 at run time: the broadcast of the two, not x's
        both = dim_key(tn.exp(x) - v, 0)
        assert both == ("bcast", frozenset({dim_key(x, 0), dim_key(v, 0)})) and both != n0
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

    def test_a_broadcast_length_is_the_set_of_what_it_broadcasts(self):
        x, y, z = tn.matrix("x"), tn.matrix("y"), tn.matrix("z")
        assert dim_key(x + y, 0) == dim_key(y * x, 0) == dim_key((x + y) * x, 0)
        assert dim_key((x + y) * z, 0) == dim_key(x + (y + z), 0) != dim_key(x + y, 0)
        # the length shape inference builds for it: where(d == 1, e, d)
        assert scalar_key((x + y).shape[0]) == dim_key(x + y, 0)
        assert has_shape(tn.exp(x + y), [(x + y).shape[0], (y - x).shape[1]])
        # ... fused into one Composite, as the fuse phase leaves it
        fused = Elemwise(Composite(2, [(ps.equal, (("i", 0), ("c", 1))),
                                       (ps.where, (("t", 0), ("i", 1), ("i", 0)))]))
        assert scalar_key(fused(x.shape[0], y.shape[0])) == dim_key(x + y, 0)
        other = Elemwise(Composite(2, [(ps.equal, (("i", 0), ("c", 2))),
                                       (ps.where, (("t", 0), ("i", 1), ("i", 0)))]))
        assert scalar_key(other(x.shape[0], y.shape[0]))[0] == "scalar"   # not a broadcast
        # a static length other than 1 is what a broadcast with it gives
        s = tn.matrix("s", shape=(4, None))
        assert dim_key(x + s, 0) == ("static", 4)

    def test_what_it_cannot_tell(self):
        x, y = tn.matrix("x"), tn.matrix("y")
        assert dim_key(x + y, 0) != dim_key(x, 0)        # either may be 1 at run time
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


def sum_tos(f):
    return [n for n in f.fgraph.apply_nodes if isinstance(n.op, SumTo)]


def mlp_grads(x, w1, b1, w2, t):
    """The gradients of a one-hidden-layer tanh network's squared error."""
    y = tn.tanh(x @ w1 + b1) @ w2
    return tn.grad(tn.sum((y - t) ** 2), [w1, b1, w2])


class TestUselessSumTo:
    def test_a_product_proves_the_lengths_it_contracts_equal(self):
        a, b, c = tn.matrix("a"), tn.matrix("b"), tn.vector("c")
        h = a + c                       # h's axis 1: the broadcast of a's and c's
        y = h @ b                       # ... equal to b's axis 0, or the call fails
        fg = FunctionGraph([a, b, c], [y])
        lengths = Lengths(fg)
        assert lengths.of_axis(h, 1) == lengths.of_axis(b, 0) == dim_key(b, 0)
        assert lengths.of_axis(h * b.T, 1) == dim_key(b, 0)    # (a + c) * b.T: one length
        assert lengths.of_axis(a, 1) != dim_key(b, 0)          # a alone may be 1
        assert Lengths().of_axis(h, 1) != dim_key(b, 0)        # no graph: no products

    def test_two_broadcasts_a_product_contracts_are_one_length(self):
        """Both inner lengths are broadcasts: the product makes them one class,
        named alike whichever is asked."""
        a, b = tn.matrix("a"), tn.matrix("b")
        c, e = tn.vector("c"), tn.matrix("e", shape=(None, 1))
        h1, h2 = a + c, b + e           # h1's axis 1, h2's axis 0: broadcasts
        fg = FunctionGraph([a, b, c, e], [h1 @ h2])
        lengths = Lengths(fg)
        assert lengths.of_axis(h1, 1) == lengths.of_axis(h2, 0)
        assert Lengths().of_axis(h1, 1) != Lengths().of_axis(h2, 0)

    def test_a_lazy_ifelse_takes_the_products_equalities_away(self):
        a, b, c = tn.matrix("a"), tn.matrix("b"), tn.vector("c")
        h = a + c
        fg = FunctionGraph([a, b, c], [tn.ifelse(tn.sum(a) > 0, h @ b, b)])
        assert Lengths(fg).of_axis(h, 1) != dim_key(b, 0)

    @pytest.mark.parametrize("linker", LINKERS)
    def test_the_gradient_of_a_hidden_layer_fuses_without_sum_to(self, linker):
        x, w1, w2, t = (tn.matrix(n) for n in ("x", "w1", "w2", "t"))
        b1 = tn.vector("b1")
        outs = mlp_grads(x, w1, b1, w2, t)
        f = tn.function([x, w1, b1, w2, t], outs, mode=tn.Mode(linker=linker))
        kept = tn.function([x, w1, b1, w2, t], outs,
                           mode=tn.Mode(linker=linker, exclude=["useless_sum_to"]))
        assert "useless_sum_to" in f.rewrites_applied
        assert len(sum_tos(f)) < len(sum_tos(kept))
        assert len(f.fgraph.apply_nodes) < len(kept.fgraph.apply_nodes)   # fused further

    @pytest.mark.parametrize("linker", LINKERS)
    def test_a_mean_squared_error_s_gradient_keeps_no_alloc(self, linker):
        """The mean's gradient fills its scale to the error's shape; the
        error ``x @ w + b - t`` provably has that shape (its lengths are
        broadcasts, fused into Composites by then), so it is read broadcast."""
        x, w, t = tn.matrix("x"), tn.matrix("w"), tn.matrix("t")
        b = tn.vector("b")
        g = tn.grad(tn.mean((x @ w + b - t) ** 2), w)
        f = tn.function([x, w, b, t], g, mode=tn.Mode(linker=linker))
        assert not allocs(f)
        rng = np.random.default_rng(2)
        args = [rng.standard_normal(s) for s in ((3, 5), (5, 4), (4,), (3, 4))]
        np.testing.assert_allclose(f(*args), tn.function([x, w, b, t], g, mode=NONE)(*args),
                                   rtol=1e-12)

    @pytest.mark.parametrize("linker", LINKERS)
    @pytest.mark.parametrize("b1_len, w1_cols", [(4, 4), (1, 4), (4, 1)])
    def test_broadcasts_at_run_time_are_still_summed(self, linker, b1_len, w1_cols):
        """Lengths of 1 that the graph does not know of: the sums stay where
        they may be needed, and the gradients are right."""
        x, w1, w2, t = (tn.matrix(n) for n in ("x", "w1", "w2", "t"))
        b1 = tn.vector("b1")
        inputs = [x, w1, b1, w2, t]
        f = tn.function(inputs, mlp_grads(*inputs), mode=tn.Mode(linker=linker))
        ref = tn.function(inputs, mlp_grads(*inputs), mode=NONE)
        rng = np.random.default_rng(1)
        args = [rng.standard_normal(s) for s in
                ((3, 5), (5, w1_cols), (b1_len,), (4, 2), (3, 2))]
        for got, want in zip(f(*args), ref(*args)):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

    def test_a_mismatch_still_fails_with_the_products_error(self):
        x, w1, w2, t = (tn.matrix(n) for n in ("x", "w1", "w2", "t"))
        b1 = tn.vector("b1")
        inputs = [x, w1, b1, w2, t]
        f = tn.function(inputs, mlp_grads(*inputs))
        rng = np.random.default_rng(1)
        args = [rng.standard_normal(s) for s in ((3, 5), (5, 4), (4,), (6, 2), (3, 2))]
        with pytest.raises(ValueError):
            f(*args)
