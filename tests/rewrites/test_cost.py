"""The per-op cost model (tenure/rewrites/cost.py): flops and bytes moved per
op family, from numeric shapes."""

import math

import numpy as np
import pytest

import tenure as tn
from tenure.rewrites import cost
from tenure.symbolic.fgraph import FunctionGraph
from tenure.rewrites.sizes import SizeModel
from tenure.symbolic.ops.composite import Composite
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.gemm import Gemm


def shapes_of(inputs, outputs, values):
    fg = FunctionGraph(inputs, outputs)
    return SizeModel(fg).shapes(values)


def seconds(flops, nbytes):
    return flops / cost.FLOPS_RATE + nbytes / cost.BYTES_RATE + cost.NODE_OVERHEAD


def test_matmul_is_two_m_n_k_flops_and_reads_and_writes_its_operands():
    a, b = tn.matrix("a"), tn.matrix("b")
    y = a @ b
    shapes = shapes_of([a, b], [y], [np.zeros((3, 5)), np.zeros((5, 7))])
    node = y.owner
    assert cost.node_flops(node, shapes) == 2 * 3 * 5 * 7
    assert cost.bytes_moved(node, shapes) == 8 * (3 * 5 + 5 * 7 + 3 * 7)
    assert cost.node_cost(node, shapes) == pytest.approx(seconds(2 * 3 * 5 * 7,
                                                                 8 * (15 + 35 + 21)))


def test_dot_and_tensordot_count_the_summed_length():
    a, b = tn.matrix("a", dtype="float32"), tn.matrix("b", dtype="float32")
    d = tn.dot(a, b)
    t = tn.tensordot(a, b, axes=[[0, 1], [0, 1]])
    shapes = shapes_of([a, b], [d, t], [np.zeros((4, 6), "float32"), np.zeros((6, 4), "float32")])
    assert cost.node_flops(d.owner, shapes) == 2 * 4 * 4 * 6
    t_shapes = shapes_of([a, b], [t], [np.zeros((4, 6), "float32"), np.zeros((4, 6), "float32")])
    assert cost.node_flops(t.owner, t_shapes) == 2 * 1 * 24


def test_gemm_counts_the_product_and_the_scaling():
    z, x, y = tn.matrix("z"), tn.matrix("x"), tn.matrix("y")
    out = Gemm()(z, 0.5, x, y, 1.0)
    shapes = shapes_of([z, x, y], [out], [np.zeros((2, 3)), np.zeros((2, 4)), np.zeros((4, 3))])
    assert cost.node_flops(out.owner, shapes) == 2 * 2 * 3 * 4 + 3 * 6


def _scalar(name):
    x, y = tn.vector(), tn.vector()
    var = {"add": x + y, "mul": x * y, "exp": tn.exp(x)}[name]
    return var.owner.op.scalar_op


def test_elemwise_counts_scalar_ops_per_element():
    x, y = tn.matrix("x"), tn.matrix("y")
    e = tn.exp(x)
    comp = Composite(2, [(_scalar("add"), [("i", 0), ("i", 1)]),
                         (_scalar("exp"), [("t", 0)]),
                         (_scalar("mul"), [("t", 1), ("c", 2)])])
    f = Elemwise(comp)(x, y)
    shapes = shapes_of([x, y], [e, f], [np.zeros((4, 5)), np.zeros((4, 5))])
    assert cost.node_flops(e.owner, shapes) == 20
    assert cost.node_flops(f.owner, shapes) == 3 * 20
    # Two inputs read, one output written.
    assert cost.bytes_moved(f.owner, shapes) == 8 * 3 * 20


def test_reductions_cost_their_input_size():
    x = tn.matrix("x")
    s = tn.sum(x, axis=0)
    shapes = shapes_of([x], [s], [np.zeros((6, 7))])
    assert cost.node_flops(s.owner, shapes) == 42
    assert cost.bytes_moved(s.owner, shapes) == 8 * (42 + 7)


def test_views_and_shape_ops_cost_only_the_overhead():
    x = tn.matrix("x")
    t = x.T
    r = tn.reshape(x, (-1,))
    sh = tn.shape(x)
    shapes = shapes_of([x], [t, r, sh], [np.zeros((6, 7))])
    for var in (t, r, sh):
        assert cost.node_flops(var.owner, shapes) == 0
        assert cost.bytes_moved(var.owner, shapes) == 0
        assert cost.node_cost(var.owner, shapes) == cost.NODE_OVERHEAD


def test_unknown_shapes_cost_a_little_but_not_nothing():
    a, b = tn.matrix("a"), tn.matrix("b")
    y = a @ b
    shapes = {a: None, b: None, y: None}
    assert cost.node_cost(y.owner, shapes) == cost.NODE_OVERHEAD > 0
    assert cost.node_cost(y.owner, {}) == cost.NODE_OVERHEAD


def test_cost_grows_with_size_and_products_dominate_elementwise_ops():
    a, w = tn.matrix("a", dtype="float32"), tn.matrix("w", dtype="float32")
    y = tn.relu(a @ w)
    small = shapes_of([a, w], [y], [np.zeros((8, 8), "float32"), np.zeros((8, 8), "float32")])
    big = shapes_of([a, w], [y], [np.zeros((512, 512), "float32"),
                                  np.zeros((512, 512), "float32")])
    mm, relu = y.owner.inputs[0].owner, y.owner
    assert cost.node_cost(mm, big) > cost.node_cost(mm, small)
    assert cost.node_cost(mm, big) > 10 * cost.node_cost(relu, big)
    assert cost.nodes_cost([mm, relu], big) == pytest.approx(
        cost.node_cost(mm, big) + cost.node_cost(relu, big))


def test_rates_are_plausible_for_a_cpu():
    # A 1024^3 float32 product: between a millisecond and a second.
    seconds_ = 2 * 1024 ** 3 / cost.FLOPS_RATE + 3 * 4 * 1024 ** 2 / cost.BYTES_RATE
    assert 1e-3 < seconds_ < 1
    assert math.isfinite(cost.NODE_OVERHEAD) and cost.NODE_OVERHEAD > 0
