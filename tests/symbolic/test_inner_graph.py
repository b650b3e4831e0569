"""Ops with inner graphs: structural equality and hash, cloning, pickling,
and a small real op (a graph applied as one op) compiled into functions."""

import copy
import pickle
import threading

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.python import PythonLinker
from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.graph import Apply, Constant, clone
from tenure.symbolic.inner_graph import OpWithInnerGraphs, graph_signature
from tenure.symbolic.variable import as_tensor_variable


class GraphOp(OpWithInnerGraphs):
    """The graph from ``inputs`` to ``outputs`` applied as one op; ``perform``
    runs it with the Python linker, compiled once per op (and again per clone
    or load: the thunk is a cache)."""

    _cache_attrs = ("_thunk",)
    #: a thunk's storage serves one run at a time (reentrant: an inner graph
    #: may hold another GraphOp)
    _running = threading.RLock()

    def __init__(self, inputs, outputs):
        inputs, outputs = clone(inputs, outputs)
        super().__init__([FunctionGraph(inputs, outputs)])

    @property
    def inner(self) -> FunctionGraph:
        return self.inner_graphs[0]

    def make_node(self, *inputs):
        inputs = [as_tensor_variable(x) for x in inputs]
        if len(inputs) != len(self.inner.inputs):
            raise TypeError(f"GraphOp: {len(self.inner.inputs)} inputs expected, "
                            f"got {len(inputs)}")
        for i, (var, want) in enumerate(zip(inputs, self.inner.inputs)):
            if var.type != want.type:
                raise TypeError(f"GraphOp: input {i} must be {want.type}, got {var.type}")
        return Apply(self, inputs, [out.type() for out in self.inner.outputs])

    def perform(self, node, inputs, output_storage):
        with self._running:
            if self._thunk is None:
                self._thunk = PythonLinker().make_thunk(self.inner, set())
            results = self._thunk(list(inputs))
        # No view_map: an output that is an input, a view of one or a constant is copied.
        held = list(inputs) + [v.data for v in self.inner.variables if isinstance(v, Constant)]
        for cell, result in zip(output_storage, results):
            fresh = not any(np.may_share_memory(result, h) for h in held)
            cell[0] = result if fresh else result.copy()


def affine(scale=2.0, name="x"):
    """The op computing ``exp(x) * scale + x`` for a float64 vector ``x``."""
    x = tn.vector(name, dtype="float64")
    return GraphOp([x], [tn.exp(x) * scale + x])


def reference(value, scale=2.0):
    return np.exp(value) * scale + value


# -- equality and hash ---------------------------------------------------------------

def test_ops_over_structurally_equal_graphs_are_equal_and_hash_alike():
    a, b = affine(name="x"), affine(name="other name")
    assert a.inner is not b.inner
    assert a == b and hash(a) == hash(b)


@pytest.mark.parametrize("other", [
    lambda: affine(scale=3.0),                                   # another constant
    lambda: GraphOp([x := tn.vector("x", dtype="float64")], [tn.exp(x) + x * 2.0]),
    lambda: GraphOp([x := tn.vector("x", dtype="float32")], [tn.exp(x) * 2.0 + x]),
])
def test_ops_over_different_graphs_differ(other):
    assert affine() != other()


def test_the_signature_follows_inputs_by_position_not_by_name():
    x, y = tn.vector("x"), tn.vector("y")
    assert graph_signature(FunctionGraph([x, y], [x - y])) != \
        graph_signature(FunctionGraph([x, y], [y - x]))


def test_identical_applications_merge():
    op_a, op_b = affine(), affine()
    x = tn.vector("x", dtype="float64")
    f = tn.function([x], op_a(x) + op_b(x), mode="py")
    assert sum(isinstance(n.op, GraphOp) for n in f.fgraph.apply_nodes) == 1
    value = np.linspace(0, 1, 5)
    np.testing.assert_allclose(f(value), 2 * reference(value))


# -- cloning ---------------------------------------------------------------------------

def test_clone_copies_the_inner_graphs_and_stays_equal():
    op = affine()
    copied = op.clone()
    assert copied == op and hash(copied) == hash(op)
    assert copied.inner is not op.inner
    constants = {v for v in op.inner.variables if isinstance(v, Constant)}
    assert set(copied.inner.variables) & set(op.inner.variables) <= constants
    assert not set(copied.inner.apply_nodes) & set(op.inner.apply_nodes)


def test_changing_a_clone_leaves_the_original_alone():
    op = affine()
    copied = op.clone()
    inner = copied.inner
    inner.replace(inner.outputs[0], inner.inputs[0])
    assert copied != op
    assert op.inner.outputs[0].owner is not None


def test_clone_forgets_the_compiled_inner_thunk():
    x = tn.vector("x", dtype="float64")
    f = tn.function([x], affine()(x), mode="py")
    f(np.zeros(3))
    # the function runs its own copy of the op (bound to its inner mode)
    (op,) = [node.op for node in f.fgraph.apply_nodes if isinstance(node.op, GraphOp)]
    assert op._thunk is not None
    assert op.clone()._thunk is None


# -- pickling --------------------------------------------------------------------------

def test_the_op_pickles_without_its_thunk_and_stays_equal():
    op = affine()
    x = tn.vector("x", dtype="float64")
    tn.function([x], op(x), mode="py")(np.zeros(3))
    loaded = pickle.loads(pickle.dumps(op))
    assert loaded == op and hash(loaded) == hash(op)
    assert loaded._thunk is None
    assert copy.deepcopy(op) == op


def test_a_pickled_function_using_the_op_computes_the_same():
    x = tn.vector("x", dtype="float64")
    f = tn.function([x], affine()(x), mode="py")
    g = pickle.loads(pickle.dumps(f))
    value = np.arange(4.0)
    np.testing.assert_allclose(g(value), reference(value))


# -- running -----------------------------------------------------------------------------

def run_affine_times_three(mode):
    x = tn.vector("x", dtype="float64")
    f = tn.function([x], affine()(x) * 3.0, mode=mode)
    value = np.linspace(-1, 1, 7)
    np.testing.assert_allclose(f(value), 3 * reference(value))


def test_the_op_runs_in_a_function(mode):
    run_affine_times_three(mode)


def test_the_c_linker_runs_it_by_calling_back_into_perform(cc_or_skip):
    run_affine_times_three("c")


def test_an_output_that_is_the_input_is_a_fresh_array():
    x = tn.vector("x", dtype="float64")
    f = tn.function([tn.In(x, borrow=True)], GraphOp([x], [x])(x), mode="py")
    value = np.arange(3.0)
    result = f(value)
    assert not np.may_share_memory(result, value)
    np.testing.assert_array_equal(result, value)


def test_inner_graphs_nest():
    x = tn.vector("x", dtype="float64")
    outer = GraphOp([x], [affine()(x) + 1.0])
    f = tn.function([x], outer(x), mode="py")
    value = np.arange(3.0)
    np.testing.assert_allclose(f(value), reference(value) + 1.0)


def test_inner_graphs_must_be_function_graphs():
    with pytest.raises(TypeError, match="inner graph 0 must be a FunctionGraph"):
        OpWithInnerGraphs([object()])
