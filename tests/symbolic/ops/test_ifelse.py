"""``tn.ifelse`` (tenure/symbolic/ops/ifelse.py, the ``lazy_ifelse`` rewrite):
the chosen branch's values, only the chosen branch computed, on every
linker the op suite runs on (py, check, c, cuda on the emulated device,
dask)."""

import pickle

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.ops.ifelse import IfElse, LazyIfElse


def _nodes(f, kind) -> list:
    return [node for node in f.fgraph.toposort() if isinstance(node.op, kind)]


def test_the_chosen_branch_on_every_linker(mode):
    c = tn.scalar("c")
    x, y = tn.vector("x"), tn.matrix("y")
    then = [tn.exp(x) * 2, y.sum(axis=0)]
    other = [x - 1, y[0] * 3]
    f = tn.function([c, x, y], tn.ifelse(c > 0, then, other), mode=mode)
    xv, yv = np.array([0.0, 1.0, 2.0]), np.arange(6.0).reshape(2, 3)
    for cv, expected in ((1.0, [np.exp(xv) * 2, yv.sum(axis=0)]), (-1.0, [xv - 1, yv[0] * 3])):
        for got, want in zip(f(cv, xv, yv), expected):
            np.testing.assert_allclose(got, want, rtol=1e-12)


def test_the_untaken_branch_is_not_computed(mode):
    """The else branch would raise (an index past x's end): never run while
    the condition holds, and raised when it does not."""
    c = tn.scalar("c", dtype="int64")
    x = tn.vector("x")
    f = tn.function([c, x], tn.ifelse(c, tn.exp(x), x[10] + x), mode=mode)
    np.testing.assert_allclose(f(1, np.zeros(3)), np.ones(3))
    with pytest.raises(IndexError, match="10"):
        f(0, np.zeros(3))
    np.testing.assert_allclose(f(0, np.arange(12.0)), np.arange(12.0) + 10)


def test_compiling_leaves_one_lazy_node_and_no_branch_work_outside():
    c = tn.scalar("c")
    x = tn.vector("x")
    f = tn.function([c, x], tn.ifelse(c > 0, tn.exp(x) * 2, tn.log(x + 3)),
                    mode=tn.Mode(linker="py"))
    assert not _nodes(f, IfElse)
    (node,) = _nodes(f, LazyIfElse)
    outside = [n for n in f.fgraph.toposort() if n is not node]
    assert all("exp" not in str(n.op) and "log" not in str(n.op) for n in outside), outside
    then_graph, else_graph = node.op.inner_graphs
    assert any("exp" in str(n.op) for n in then_graph.toposort())
    assert any("log" in str(n.op) for n in else_graph.toposort())


def test_what_the_rest_reads_is_computed_once_outside(mode):
    """exp(x) is a branch value and an output of its own: computed outside,
    once, and handed to the branch."""
    c = tn.scalar("c")
    x = tn.vector("x")
    shared = tn.exp(x)
    f = tn.function([c, x], [tn.ifelse(c > 0, shared * 2, x), shared], mode=mode)
    xv = np.array([0.0, 1.0])
    got, also = f(1.0, xv)
    np.testing.assert_allclose(got, np.exp(xv) * 2)
    np.testing.assert_allclose(also, np.exp(xv))
    np.testing.assert_allclose(f(-1.0, xv)[0], xv)


def test_branches_of_different_lengths_and_a_result_of_its_own(mode):
    """The output's length is the taken branch's; an output is never an
    input's memory."""
    c = tn.scalar("c", dtype="bool")
    x = tn.vector("x")
    out = tn.ifelse(c, x, tn.concatenate([x, x]))
    assert out.type.shape == (None,)
    f = tn.function([c, x], out, mode=mode)
    xv = np.array([1.0, 2.0])
    assert f(True, xv).shape == (2,) and f(False, xv).shape == (4,)
    got = f(True, xv)
    assert not np.shares_memory(got, xv)


def test_the_gradient_goes_to_the_taken_branch(mode):
    c = tn.scalar("c")
    x = tn.vector("x")
    cost = tn.ifelse(c > 0, (x ** 2).sum(), tn.sin(x).sum())
    f = tn.function([c, x], tn.grad(cost, x), mode=mode)
    xv = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(f(1.0, xv), 2 * xv, rtol=1e-12)
    np.testing.assert_allclose(f(-1.0, xv), np.cos(xv), rtol=1e-12)


def test_nested_ifelse(mode):
    a, b = tn.scalar("a"), tn.scalar("b")
    x = tn.vector("x")
    inner = tn.ifelse(b > 0, x * 2, x * 3)
    f = tn.function([a, b, x], tn.ifelse(a > 0, inner + 1, x - 1), mode=mode)
    xv = np.array([1.0, 2.0])
    np.testing.assert_allclose(f(1.0, 1.0, xv), xv * 2 + 1)
    np.testing.assert_allclose(f(1.0, -1.0, xv), xv * 3 + 1)
    np.testing.assert_allclose(f(-1.0, 1.0, xv), xv - 1)


def test_the_graph_form_without_the_rewrite(mode):
    """Compiled without lazy_ifelse, the IfElse node itself runs (both
    branches computed): the chosen values, as buffers of their own."""
    c = tn.scalar("c")
    x = tn.vector("x")
    plain = tn.Mode(linker=mode.linker, exclude=["lazy_ifelse"],
                    cuda_emulation=mode.cuda_emulation, compute=mode.compute)
    f = tn.function([c, x], tn.ifelse(c > 0, x, x * 3), mode=plain)
    assert _nodes(f, IfElse) and not _nodes(f, LazyIfElse)
    xv = np.array([1.0, 2.0])
    got = f(1.0, xv)
    np.testing.assert_allclose(got, xv)
    assert not np.shares_memory(got, xv)
    np.testing.assert_allclose(f(-1.0, xv), xv * 3)


def test_the_branches_must_agree():
    c = tn.scalar("c")
    x, m = tn.vector("x"), tn.matrix("m")
    with pytest.raises(TypeError, match=r"ifelse: then_branch is x .* but else_branch is m"):
        tn.ifelse(c, x, m)
    with pytest.raises(TypeError, match=r"then_branch\[1\] .* else_branch\[1\]"):
        tn.ifelse(c, [x, x], [x, tn.cast(x, "float32")])
    with pytest.raises(ValueError, match=r"then_branch has 2 value\(s\), else_branch 1"):
        tn.ifelse(c, [x, x], [x])
    with pytest.raises(TypeError, match=r"the condition must be a 0-d number or bool, got x"):
        tn.ifelse(x, x, x)


def test_structure_and_names():
    c = tn.scalar("c")
    x = tn.vector("x")
    single = tn.ifelse(c, x, x + 1, name="pick")
    pair = tn.ifelse(c, (x, x), [x + 1, x - 1], name="both")
    assert single.name == "pick"
    assert isinstance(pair, list) and [v.name for v in pair] == ["both[0]", "both[1]"]


def test_a_compiled_ifelse_pickles():
    c = tn.scalar("c")
    x = tn.vector("x")
    f = tn.function([c, x], tn.ifelse(c > 0, x * 2, x[5] + x), mode=tn.Mode(linker="c"))
    g = pickle.loads(pickle.dumps(f))
    np.testing.assert_allclose(g(1.0, np.ones(2)), [2.0, 2.0])
    with pytest.raises(IndexError):
        g(-1.0, np.ones(2))
