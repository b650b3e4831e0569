"""The plan and the NumPy executor: schedule, lifetimes, buffer reuse."""

import tracemalloc

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out
from tenure.linkers.plan import make_plan, schedule
from tenure.rewrites.destroy import view_root
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.elemwise import Elemwise


#: the executor's own behaviour, on the graph as written
NO_REWRITES = tn.Mode(rewrites="none")


def inplace(scalar_op, *inputs, into=0):
    return Elemwise(scalar_op, {0: into})(*inputs)


def _chain_function(allow_gc: bool):
    """A chain of 12 elementwise ops ending in a sum."""
    x = tn.vector("x")
    y = x
    for _ in range(6):
        y = tn.exp(y * 0.5) - 1
    with tn.config.change_flags(allow_gc=allow_gc):
        # Without rewrites: in-place ops would run the whole chain in one buffer.
        return tn.function([In(x, borrow=True)], y.sum(), mode=NO_REWRITES)


def chain_memory(allow_gc: bool, n: int = 500_000) -> tuple[int, int]:
    """(bytes held after a first call, peak during a second call), by tracemalloc."""
    f = _chain_function(allow_gc)
    arg = np.zeros(n)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        f(arg)
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        f(arg)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak, held


class TestLifetimes:
    def test_gc_frees_intermediates_after_their_last_reader(self):
        n = 500_000
        peak, held = chain_memory(True, n)
        assert peak < 3.5 * n * 8      # a couple of live arrays at a time
        assert held < n * 8 / 10       # nothing kept after the call

    def test_without_gc_intermediates_are_kept_and_reused(self):
        n = 500_000
        peak, held = chain_memory(False, n)
        assert held > 10 * n * 8       # every intermediate kept after the first call...
        assert peak < n * 8 / 10       # ...and written over in place by the next one

    def test_without_gc_results_are_not_overwritten_by_the_next_call(self):
        x = tn.vector("x")
        w = tn.shared(np.zeros(3), name="w")
        with tn.config.change_flags(allow_gc=False):
            f = tn.function([x], tn.exp(x)[::-1], updates=[(w, (x * 2)[::-1])])
        first = f(np.array([0.0, 1.0, 2.0]))
        f(np.array([5.0, 5.0, 5.0]))
        np.testing.assert_allclose(first, np.exp([2.0, 1.0, 0.0]))
        f(np.array([0.0, 1.0, 2.0]))
        np.testing.assert_array_equal(w.get_value(), [4.0, 2.0, 0.0])

    def test_plan_frees_each_intermediate_once_and_never_inputs_or_outputs(self):
        x = tn.vector("x")
        a = tn.exp(x)
        b = a * 2
        c = a + b
        f = tn.function([x], [c, b], mode=NO_REWRITES)
        plan = make_plan(f.fgraph)
        freed = [plan.variables[s] for step in plan.steps for s in step.frees]
        assert len(freed) == len(set(freed))
        protected = set(f.fgraph.inputs) | set(f.fgraph.outputs)
        assert not protected & set(freed)
        # `a` dies after its last reader (the add), not before.
        add_step = next(i for i, s in enumerate(plan.steps) if s.node.op.scalar_op is ps.add)
        a_slot = plan.variables.index(f.fgraph.outputs[0].owner.inputs[0])
        assert a_slot in plan.steps[add_step].frees

    def test_nothing_is_held_between_calls_except_borrowed_outputs(self):
        x = tn.vector("x")
        f = tn.function([x], [Out(tn.exp(x), borrow=True), tn.sin(x)], mode=NO_REWRITES)
        f(np.ones(3))
        held = [v for v in f._thunk.storage if isinstance(v, np.ndarray) and v.size == 3]
        assert len(held) == 1  # the borrowed output's buffer


class TestSchedule:
    def test_readers_before_destroyer_even_through_views(self):
        x = tn.vector("x")
        view = x[::-1]
        destroyed = inplace(ps.exp, x)
        f = tn.function([In(x, borrow=True, mutable=True)],
                        [Out(destroyed, borrow=True), view * 1], mode="py")
        order = schedule(f.fgraph)
        exp_at = next(i for i, n in enumerate(order) if n.op.destroy_map)
        mul_at = next(i for i, n in enumerate(order)
                      if getattr(n.op, "scalar_op", None) is ps.mul)
        assert mul_at < exp_at
        _, reversed_x = f(np.arange(3.0))
        np.testing.assert_array_equal(reversed_x, [2.0, 1.0, 0.0])

    def test_a_buffer_destroyed_twice_is_refused(self):
        x = tn.vector("x")
        with pytest.raises(ValueError, match="overwritten by two nodes"):
            tn.function([In(x, borrow=True, mutable=True)],
                        [inplace(ps.exp, x) * 1, inplace(ps.sin, x) * 1])

    def test_unorderable_destruction_is_refused(self):
        # The destroyer's own result feeds a reader of the old buffer: a cycle.
        x = tn.vector("x")
        d = inplace(ps.exp, x)
        y = tn.add(x, d)  # must read old x (before d) and d (after d)
        with pytest.raises(ValueError, match="cannot be ordered"):
            tn.function([In(x, borrow=True, mutable=True)], y)

    def test_view_root(self):
        x = tn.matrix("x")
        assert view_root(x.T[0]) is x
        e = tn.exp(x)
        assert view_root(e.T) is e


class TestExecution:
    def test_results_match_numpy_on_a_larger_graph(self, mode, rng):
        x, y = tn.matrix("x"), tn.vector("y")
        z = tn.where(x > 0, tn.exp(-x), x ** 2).sum(axis=1) + tn.tanh(y) @ x.T
        f = tn.function([x, y], z, mode=mode)
        xv, yv = rng.normal(size=(4, 3)), rng.normal(size=3)
        expected = np.where(xv > 0, np.exp(-xv), xv ** 2).sum(axis=1) + np.tanh(yv) @ xv.T
        np.testing.assert_allclose(f(xv, yv), expected)

    def test_zero_size_inputs(self, mode):
        x = tn.matrix("x")
        f = tn.function([x], [tn.exp(x), x.sum(axis=0)], mode=mode)
        e, s = f(np.zeros((0, 3)))
        assert e.shape == (0, 3)
        np.testing.assert_array_equal(s, np.zeros(3))

    def test_non_contiguous_and_negative_stride_inputs(self, mode):
        x = tn.matrix("x")
        f = tn.function([x], tn.exp(x) + x.T.T, mode=mode)
        base = np.arange(24.0).reshape(4, 6)
        arg = base[::-2, ::3]
        np.testing.assert_allclose(f(arg), np.exp(arg) + arg)


@pytest.mark.usefixtures("freeing_intermediates")
class TestPlansPerSignature:
    def test_calls_run_the_plan_made_for_their_shapes(self):
        x, y = tn.vector("x"), tn.matrix("y")
        f = tn.function([x, y], [(tn.exp(x) * 2).sum(), (tn.sin(y) + 1).sum(axis=0)],
                        mode=NO_REWRITES)
        thunk = f._thunk
        values = [np.ones(5), np.ones((3, 4))]
        plan = thunk.plan_for(values)
        assert plan.sized and plan.shapes[plan.inputs[1]] == (3, 4)
        ran = []
        results = thunk.run_observed(values, lambda i, node, *rest: ran.append(node))
        assert ran == [s.node for s in plan.steps]
        np.testing.assert_allclose(results[0], 10 * np.e)
        np.testing.assert_allclose(results[1], np.full(4, 3 * (np.sin(1) + 1)))
        # Nothing but constants is held after the call.
        assert all(v is None for s, v in enumerate(thunk.storage) if s not in plan.constants)

    def test_reuse_keeps_the_peak_of_a_long_chain_at_two_arrays(self, mode):
        n = 100_000
        x = tn.vector("x")
        y = x
        for _ in range(8):
            y = tn.sin(y) * 0.5
        f = tn.function([In(x, borrow=True)], y.sum(), mode=tn.Mode(linker=mode.linker,
                                                                     rewrites="none"))
        plan = f._thunk.plan_for([np.zeros(n)])
        assert len(plan.reused_from()) >= 10
        assert plan.peak() == 2 * n * 8
        np.testing.assert_allclose(f(np.full(n, 0.3)), n * _repeat(0.3, 8))


def _repeat(v, times):
    for _ in range(times):
        v = np.sin(v) * 0.5
    return v
