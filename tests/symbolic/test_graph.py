"""The graph core: variables, apply nodes, ops, traversal, cloning and replacement."""

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenure as tn
from tenure.symbolic.graph import (
    Apply, Constant, Op, Variable, ancestors, clone, clone_get_equiv, clone_replace,
    graph_inputs, io_toposort)
from tenure.symbolic.types import TensorType

F64 = TensorType("float64", ())


class Combine(Op):
    """A test op: any number of float64 scalar inputs, ``nout`` outputs."""

    __props__ = ("tag", "nout")

    def __init__(self, tag="c", nout=1):
        self.tag = tag
        self.nout = nout

    def make_node(self, *inputs):
        return Apply(self, list(inputs), [F64() for _ in range(self.nout)])

    def perform(self, node, inputs, output_storage):
        total = sum(float(v) for v in inputs)
        for k, cell in enumerate(output_storage):
            cell[0] = np.asarray(total + k)


class NoProps(Op):
    def make_node(self, x):
        return Apply(self, [x], [F64()])


# --------------------------------------------------------------------------
# Variables, apply nodes and ops


def test_root_variable_basics():
    x = tn.vector("x")
    assert isinstance(x, Variable)
    assert x.owner is None and x.index is None
    assert x.type == TensorType("float64", (None,))


def test_apply_sets_owner_and_index():
    a, b = F64("a"), F64("b")
    node = Combine(nout=2).make_node(a, b)
    assert node.inputs == [a, b]
    assert [o.owner for o in node.outputs] == [node, node]
    assert [o.index for o in node.outputs] == [0, 1]
    with pytest.raises(AttributeError, match="2 outputs"):
        node.out
    single = Combine().make_node(a)
    assert single.out is single.outputs[0]


def test_op_call_returns_variable_or_list():
    a = F64("a")
    out = Combine()(a)
    assert isinstance(out, Variable) and out.owner.op == Combine()
    outs = Combine(nout=3)(a)
    assert isinstance(outs, list) and len(outs) == 3


def test_apply_rejects_non_variable_inputs():
    with pytest.raises(TypeError) as info:
        Apply(Combine(), [F64("a"), 3.0], [F64()])
    msg = str(info.value)
    assert "input 1" in msg and "float" in msg


def test_apply_rejects_output_owned_by_another_node():
    a = F64("a")
    out = Combine()(a)
    with pytest.raises(ValueError, match="already belongs"):
        Apply(Combine(), [a], [out])


def test_variable_str_and_repr_readable():
    x = tn.matrix("x")
    assert str(x) == "x"
    assert "x" in repr(x) and "float64(?, ?)" in repr(x)
    y = tn.exp(x)
    assert str(y) == "exp.0"
    assert "exp" in repr(y)
    assert str(y.owner) == "exp(x)"
    assert str(tn.vector(dtype="int8")) == "<int8(?,)>"
    outs = Combine(nout=2)(F64("a"))
    assert str(outs[1]).endswith(".1") and "Combine" in str(outs[1])
    named = tn.exp(x)
    named.name = "ex"
    assert str(named) == "ex"


def test_constant_str_shows_value():
    c = tn.constant([1, 2, 3])
    assert "1" in str(c) and "3" in str(c)
    assert "int64" in repr(c)
    big = tn.constant(np.zeros(100))
    assert len(str(big)) < 60  # large constants are not dumped in full


def test_constants_are_immutable_and_comparable():
    c = tn.constant(np.arange(3.0))
    assert isinstance(c, Constant)
    assert not c.data.flags.writeable
    with pytest.raises(ValueError):
        c.data[0] = 5.0
    assert c.equals(tn.constant(np.arange(3.0)))
    assert not c.equals(tn.constant(np.arange(3.0) + 1))
    assert not c.equals(tn.constant(np.arange(3.0).astype("float32")))
    source = np.arange(3.0)
    d = tn.constant(source)
    source[0] = 100.0  # constant() copies
    assert d.data[0] == 0.0


def test_variable_clone_is_a_fresh_root():
    x = tn.vector("x")
    y = x.clone()
    assert y is not x and y.type == x.type and y.name == "x" and y.owner is None
    assert x.clone(name="z").name == "z"
    out = tn.exp(x)
    c = out.clone()
    assert c.owner is None and c.type == out.type


def test_op_equality_and_hash_follow_props():
    assert Combine("a") == Combine("a")
    assert hash(Combine("a")) == hash(Combine("a"))
    assert Combine("a") != Combine("b")
    assert Combine("a", 1) != Combine("a", 2)
    assert len({Combine("a"), Combine("a"), Combine("b")}) == 2

    class OtherCombine(Combine):
        pass

    assert OtherCombine("a") != Combine("a")
    assert NoProps() == NoProps()
    assert hash(NoProps()) == hash(NoProps())


def test_elemwise_op_equality():
    from tenure.symbolic.ops import scalar as ps
    from tenure.symbolic.ops.elemwise import Elemwise
    assert Elemwise(ps.add) == Elemwise(ps.add)
    assert hash(Elemwise(ps.add)) == hash(Elemwise(ps.add))
    assert Elemwise(ps.add) != Elemwise(ps.mul)
    assert Elemwise(ps.add, {0: 0}) != Elemwise(ps.add)
    assert Elemwise(ps.add, {0: 0}) == Elemwise(ps.add, {0: 0})
    x = tn.vector()
    assert (x + 1).owner.op == (x + 2).owner.op
    assert x.astype("int32").owner.op != x.astype("int64").owner.op
    assert x.astype("int32").owner.op == tn.vector().astype("int32").owner.op


def test_op_str():
    assert str(NoProps()) == "NoProps"
    s = str(Combine("a", 2))
    assert "Combine" in s and "tag='a'" in s and "nout=2" in s


def test_variables_are_hashable_by_identity():
    x, y = tn.vector("x"), tn.vector("x")
    d = {x: 1, y: 2}
    assert d[x] == 1 and d[y] == 2


# --------------------------------------------------------------------------
# Traversal


def _diamond():
    x, y = F64("x"), F64("y")
    a = Combine("a")(x, y)
    b = Combine("b")(a, x)
    c = Combine("c")(a, b)
    return x, y, a, b, c


def test_ancestors():
    x, y, a, b, c = _diamond()
    anc = ancestors(c)
    assert set(anc) == {x, y, a, b, c}
    assert len(anc) == len(set(anc))
    assert anc[0] is c
    assert set(ancestors([c], blockers=[a])) == {a, b, c, x}
    assert ancestors(x) == [x]


def test_graph_inputs():
    x, y, a, b, c = _diamond()
    assert set(graph_inputs([c])) == {x, y}
    assert set(graph_inputs([c], blockers=[a])) == {a, x}
    k = tn.constant(1.0)
    z = tn.scalar("z")
    assert set(graph_inputs(z + k)) == {z, k}


def test_io_toposort_diamond():
    x, y, a, b, c = _diamond()
    order = io_toposort([x, y], [c])
    assert order == [a.owner, b.owner, c.owner]
    # nodes behind the given inputs are left out
    assert io_toposort([a], [c]) == [b.owner, c.owner]
    assert io_toposort([x, y], [x]) == []


def test_io_toposort_multiple_outputs_no_duplicates():
    x, y, a, b, c = _diamond()
    order = io_toposort([x, y], [c, b, a])
    assert len(order) == 3 and set(order) == {a.owner, b.owner, c.owner}


def test_io_toposort_multi_output_node_once():
    x = F64("x")
    o1, o2 = Combine(nout=2)(x)
    z = Combine()(o1, o2)
    order = io_toposort([x], [z, o2])
    assert order == [o1.owner, z.owner]


@st.composite
def random_dags(draw):
    n_roots = draw(st.integers(1, 4))
    n_nodes = draw(st.integers(1, 30))
    ops_inputs = []
    for k in range(n_nodes):
        n_avail = n_roots + k
        ops_inputs.append(draw(st.lists(st.integers(0, n_avail - 1), min_size=1, max_size=4)))
    n_out = draw(st.integers(1, 3))
    outs = draw(st.lists(st.integers(0, n_roots + n_nodes - 1), min_size=1, max_size=n_out))
    return n_roots, ops_inputs, outs


def _build(n_roots, ops_inputs, outs):
    vars_ = [F64(f"r{i}") for i in range(n_roots)]
    for k, idx in enumerate(ops_inputs):
        vars_.append(Combine(f"n{k}")(*[vars_[i] for i in idx]))
    return vars_[:n_roots], vars_, [vars_[i] for i in outs]


@settings(max_examples=100, deadline=None)
@given(random_dags())
def test_io_toposort_is_topological_on_random_dags(dag):
    roots, all_vars, outputs = _build(*dag)
    order = io_toposort(roots, outputs)
    assert len(order) == len(set(order))
    position = {node: i for i, node in enumerate(order)}
    # every node appears after the nodes computing its inputs
    for node in order:
        for inp in node.inputs:
            if inp.owner is not None:
                assert position[inp.owner] < position[node]
    # exactly the nodes the outputs depend on
    needed = {v.owner for v in ancestors(outputs) if v.owner is not None}
    assert set(order) == needed
    # graph_inputs finds exactly the roots that are used
    used_roots = {v for v in ancestors(outputs) if v.owner is None}
    assert set(graph_inputs(outputs)) == used_roots
    assert used_roots <= set(roots)


@settings(max_examples=50, deadline=None)
@given(random_dags(), st.data())
def test_io_toposort_stops_at_blockers_on_random_dags(dag, data):
    roots, all_vars, outputs = _build(*dag)
    blockers = data.draw(st.lists(st.sampled_from(all_vars), max_size=3))
    order = io_toposort(list(roots) + blockers, outputs)
    blocked_owners = {b.owner for b in blockers if b.owner is not None}
    reachable = {v.owner for v in ancestors(outputs, blockers=blockers)
                 if v.owner is not None and v not in blockers}
    assert set(order) == reachable
    for node in order:
        assert node not in blocked_owners or any(o not in blockers for o in node.outputs)


@settings(max_examples=50, deadline=None)
@given(random_dags())
def test_clone_on_random_dags_preserves_structure(dag):
    roots, all_vars, outputs = _build(*dag)
    before = [(n, list(n.inputs), list(n.outputs)) for n in io_toposort(roots, outputs)]
    new_roots, new_outs = clone(roots, outputs)
    assert all(a is not b and a.type == b.type for a, b in zip(roots, new_roots))
    old_order = io_toposort(roots, outputs)
    new_order = io_toposort(new_roots, new_outs)
    assert [n.op for n in old_order] == [n.op for n in new_order]
    assert not set(old_order) & set(new_order)
    assert set(graph_inputs(new_outs)) <= set(new_roots)
    # the original is untouched
    for node, inputs, outputs_ in before:
        assert node.inputs == inputs and node.outputs == outputs_
        assert all(o.owner is node for o in outputs_)


# --------------------------------------------------------------------------
# Cloning and replacement


def test_clone_tensor_graph_computes_the_same(mode):
    x, y = tn.vector("x"), tn.vector("y")
    out = tn.exp(x) * y + 1
    (nx, ny), (nout,) = clone([x, y], [out])
    assert nx is not x and ny is not y and nout is not out
    assert nx.name == "x" and nout.type == out.type
    assert set(graph_inputs([nout])) >= {nx, ny}
    assert x not in ancestors(nout)
    f = tn.function([nx, ny], nout, mode=mode)
    np.testing.assert_allclose(f([0.0, 1.0], [2.0, 3.0]), np.exp([0.0, 1.0]) * [2, 3] + 1)


def test_clone_without_copying_inputs():
    x = tn.vector("x")
    out = x * 2
    (nx,), (nout,) = clone([x], [out], copy_inputs=False)
    assert nx is x and nout is not out and nout.owner.inputs[0] is x


def test_clone_keeps_shared_variables_and_constants():
    x = tn.vector("x")
    s = tn.shared(np.ones(2), name="s")
    k = tn.constant(3.0)
    out = x * s + k
    _, (nout,) = clone([x], [out])
    anc = ancestors(nout)
    assert s in anc and k in anc and x not in anc


def test_clone_get_equiv_maps_nodes_and_variables():
    x = tn.vector("x")
    out = tn.exp(x)
    equiv = clone_get_equiv([x], [out])
    assert equiv[x] is not x
    assert equiv[out.owner].outputs[0] is equiv[out]
    assert equiv[out].owner.inputs[0] is equiv[x]


def test_clone_replace_leaves_original_untouched(mode):
    x, y = tn.vector("x"), tn.vector("y")
    z = tn.vector("z")
    out = tn.exp(x) + y
    old_inputs = list(out.owner.inputs)
    new = clone_replace(out, {x: z})
    assert isinstance(new, Variable) and new is not out
    assert out.owner.inputs == old_inputs
    assert x in ancestors(out) and x not in ancestors(new) and z in ancestors(new)
    assert y in ancestors(new)  # untouched parts are not cloned roots
    f = tn.function([z, y], new, mode=mode)
    np.testing.assert_allclose(f([0.0], [1.0]), [2.0])
    g = tn.function([x, y], out, mode=mode)
    np.testing.assert_allclose(g([0.0], [1.0]), [2.0])


def test_clone_replace_keeps_list_structure():
    x, z = tn.vector("x"), tn.vector("z")
    a, b = x + 1, x * 2
    res = clone_replace([a, b], {x: z})
    assert isinstance(res, list) and len(res) == 2
    assert all(z in ancestors(r) and x not in ancestors(r) for r in res)


def test_clone_replace_with_an_expression():
    x = tn.vector("x")
    out = x * 3
    new = clone_replace(out, {x: x + 1})
    f = tn.function([x], new)
    np.testing.assert_allclose(f([1.0, 2.0]), [6.0, 9.0])


def test_clone_replace_intermediate_variable():
    x = tn.vector("x")
    mid = tn.exp(x)
    out = mid + 1
    new = clone_replace(out, {mid: x})
    f = tn.function([x], new)
    np.testing.assert_allclose(f([1.0]), [2.0])


def test_clone_replace_propagates_more_specific_static_shape():
    x = tn.vector("x")
    out = tn.exp(x) * 2
    x3 = tn.vector("x3", shape=(3,))
    new = clone_replace(out, {x: x3})
    assert new.type.shape == (3,)


@pytest.mark.parametrize("replacement", [
    lambda: tn.vector(dtype="float32"),
    lambda: tn.matrix(),
    lambda: tn.vector(dtype="int64"),
])
def test_clone_replace_type_mismatch_is_a_type_error(replacement):
    x = tn.vector("x")
    out = x + 1
    new = replacement()
    with pytest.raises(TypeError) as info:
        clone_replace(out, {x: new})
    assert "x" in str(info.value) and str(x.type) in str(info.value)
    assert str(new.type) in str(info.value)


def test_clone_replace_conflicting_static_shape_is_a_type_error():
    x = tn.vector("x", shape=(3,))
    with pytest.raises(TypeError):
        clone_replace(x * 2, {x: tn.vector(shape=(4,))})


# --------------------------------------------------------------------------
# Deep graphs

DEPTH = 5000


@pytest.fixture(scope="module")
def deep_chain():
    x = tn.scalar("x")
    y = x
    for _ in range(DEPTH):
        y = y + 1.0
    return x, y


def test_deep_graph_toposort_and_ancestors(deep_chain):
    x, y = deep_chain
    assert DEPTH > sys.getrecursionlimit()
    order = io_toposort([x], [y])
    assert len(order) == DEPTH
    assert order[-1] is y.owner and order[0].inputs[0] is x
    assert len([v for v in ancestors(y) if v.owner is not None]) == DEPTH
    assert x in graph_inputs([y])


def test_deep_graph_clone_and_replace(deep_chain):
    x, y = deep_chain
    (nx,), (ny,) = clone([x], [y])
    assert len(io_toposort([nx], [ny])) == DEPTH
    z = tn.scalar("z")
    r = clone_replace(y, {x: z})
    assert len(io_toposort([z], [r])) == DEPTH


def test_deep_graph_compiles_and_runs(deep_chain, mode):
    x, y = deep_chain
    f = tn.function([x], y, mode=mode)
    assert float(f(0.5)) == 0.5 + DEPTH


def test_deep_graph_shape_tuple(deep_chain):
    x, y = deep_chain
    assert tn.shape_tuple(y) == ()
    v = tn.vector("v")
    w = v
    for _ in range(2000):
        w = w * 1.0
    (dim,) = tn.shape_tuple(w)
    f = tn.function([v], dim)
    assert int(f(np.zeros(7))) == 7
