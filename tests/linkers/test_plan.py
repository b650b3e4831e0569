"""The memory plan: buffer reuse per input-shape signature, and its execution.

Reuse is observed through a test op (:class:`Probe`) that records, as plain
addresses, the buffer each call offered it in its output cell and the buffer
it wrote -- holding no array, since a buffer held elsewhere is never handed on.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tenure as tn
from tenure import In, Out
from tenure.linkers.commit import writes_shared_storage
from tenure.linkers.plan import (MOVE_PEAK_SLACK, check_order, make_plan,
                                 python_steps_before_commit, reuse_possible)
from tenure.linkers.python import PythonThunk, take_donor
from tenure.rewrites.sizes import SizeModel
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.variable import as_tensor_variable

from tests.helpers import COMPILED

NO_REWRITES = tn.Mode(rewrites="none")

#: the buffers this file sees handed on are what freeing intermediates gives
pytestmark = pytest.mark.usefixtures("freeing_intermediates")

#: tag -> [(address offered in the output cell or None, address written), ...]
LOG: dict[str, list] = {}


def address(array) -> int | None:
    return None if array is None else array.__array_interface__["data"][0]


class Probe(Op):
    """``x * 2`` into a new buffer (or into a fitting pre-filled output cell),
    logging the addresses under ``tag``."""

    __props__ = ("tag",)

    def __init__(self, tag: str):
        self.tag = tag

    def make_node(self, x):
        x = as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        (x,) = inputs
        cell = output_storage[0]
        offered = address(cell[0]) if isinstance(cell[0], np.ndarray) else None
        if (isinstance(cell[0], np.ndarray) and cell[0].shape == x.shape
                and cell[0].dtype == x.dtype):
            np.multiply(x, 2, out=cell[0])
        else:
            cell[0] = x * 2
        LOG.setdefault(self.tag, []).append((offered, address(cell[0])))

    def infer_shape(self, node, input_shapes):
        return input_shapes


def probe(tag, x):
    return Probe(tag)(x)


def calls(tag):
    """The (offered, written) addresses of each run of the probe (the check
    linker runs perform twice per call: the real run comes first)."""
    return LOG.get(tag, [])


@pytest.fixture(autouse=True)
def clear_log():
    LOG.clear()
    yield
    LOG.clear()


def reusing(mode, graph_inputs, outputs, **kwargs):
    """A compiled function whose plans hand on buffers of any size."""
    f = tn.function(graph_inputs, outputs, mode=mode, **kwargs)
    f._thunk.min_reuse_bytes = 0
    return f


def sized_plan(f, *values, **kwargs):
    shapes = SizeModel(f.fgraph).shapes(list(values) + [c.value for c in f._containers])
    return make_plan(f.fgraph, shapes=shapes, **kwargs)


def by_name(plan, name):
    return next(i for i, v in enumerate(plan.variables) if v.name == name)


# ----------------------------------------------------------------------------
# The buffer assignment


class TestAssignment:
    def test_a_dead_buffer_goes_to_a_later_output_of_the_same_size(self):
        x = tn.vector("x")
        a = probe("a", x)
        a.name = "a"
        b = probe("b", a)
        b.name = "b"
        c = probe("c", b)
        c.name = "c"
        f = tn.function([x], c.sum(), mode=NO_REWRITES)
        plan = sized_plan(f, np.zeros(100))
        # a dies once b is computed: c is computed into a's buffer.
        assert plan.reused_from() == {by_name(plan, "c"): by_name(plan, "a")}
        assert plan.donors == {by_name(plan, "a")}
        step_c = next(s for s in plan.steps if isinstance(s.node.op, Probe)
                      and s.node.op.tag == "c")
        assert step_c.reuse == (by_name(plan, "a"),)
        # The reused buffer is not allocated again.
        allocated = {slot for s in plan.steps for slot, _ in s.allocates}
        assert by_name(plan, "c") not in allocated
        assert plan.shapes[by_name(plan, "c")] == (100,)
        assert plan.nbytes[by_name(plan, "c")] == 800

    def test_only_the_exact_byte_size_is_reused(self):
        x = tn.vector("x")
        a = probe("a", x)
        b = probe("b", a)
        c = probe("c", tn.concatenate([b, b]))  # twice the size
        f = tn.function([x], c.sum(), mode=NO_REWRITES)
        assert sized_plan(f, np.zeros(100)).reused_from() == {}

    def test_without_sizes_or_without_gc_nothing_is_reused(self):
        x = tn.vector("x")
        f = tn.function([x], probe("c", probe("b", probe("a", x))).sum(), mode=NO_REWRITES)
        assert make_plan(f.fgraph).reused_from() == {}
        assert make_plan(f.fgraph).nbytes is None
        assert sized_plan(f, np.zeros(10), allow_gc=False).reused_from() == {}
        assert sized_plan(f, np.zeros(10), min_reuse_bytes=81).reused_from() == {}
        assert sized_plan(f, np.zeros(10), min_reuse_bytes=80).reused_from() != {}

    def test_protected_buffers_are_never_handed_on(self):
        x = tn.vector("x")
        w = tn.shared(np.zeros(50), name="w")
        returned = probe("returned", x)
        viewed = probe("viewed", x)          # returned through a view
        kept = probe("kept", x)              # a borrowed output
        dead = [probe(f"d{i}", x) for i in range(4)]
        total = dead[0] + dead[1] + dead[2] + dead[3]
        later = [probe(f"later{i}", total) for i in range(6)]
        f = tn.function([x], [returned, viewed[::-1], Out(kept, borrow=True),
                              sum(later[1:], later[0])],
                        updates=[(w, probe("upd", w))], mode=NO_REWRITES)
        plan = sized_plan(f, np.zeros(50), keep=[2])
        protected = set(plan.inputs) | {plan.roots[s] for s in plan.outputs}
        assert plan.reused_from()  # something is reused...
        assert not protected & set(plan.donors)  # ...never a protected buffer
        assert not protected & set(plan.donatable)
        assert plan.kept == {plan.outputs[2]}
        assert plan.outputs[2] not in plan.reused_from()  # keeps last call's buffer
        for step in plan.steps:
            for donor in step.reuse:
                assert donor is None or plan.variables[donor].owner is not None

    def test_holding_a_buffer_aside_never_raises_the_peak(self):
        # a dies early; a huge temporary comes next; c (a's size) only after it.
        x, big = tn.vector("x"), tn.vector("big")
        a = probe("a", x)
        b = probe("b", a)
        huge = probe("huge", big)
        c = probe("c", b)
        f = tn.function([x, big], [huge.sum(), c.sum()], mode=NO_REWRITES)
        order = [s.node for s in make_plan(f.fgraph).steps]
        tagged = {n.op.tag: n for n in order if isinstance(n.op, Probe)}
        first = [tagged["a"], tagged["b"], tagged["huge"]]
        forced = first + [n for n in order if n not in first]
        shapes = SizeModel(f.fgraph).shapes([np.zeros(100), np.zeros(10_000)])
        with_reuse = make_plan(f.fgraph, shapes=shapes, order=forced)
        without = make_plan(f.fgraph, shapes=shapes, order=forced, reuse=False)
        assert with_reuse.peak() <= without.peak()
        # Holding a (800 bytes) through the huge step would raise the peak: not reused.
        assert with_reuse.reused_from() == {}


class TestSchedule:
    def test_a_sized_plan_runs_readers_before_the_destroyer(self):
        x = tn.vector("x")
        view = x[::-1]
        destroyed = Elemwise(ps.exp, {0: 0})(x)
        f = tn.function([In(x, borrow=True, mutable=True)],
                        [Out(destroyed, borrow=True), view * 1], mode=NO_REWRITES)
        plan = sized_plan(f, np.arange(3.0))
        order = [s.node for s in plan.steps]
        check_order(f.fgraph, order)
        exp_at = next(i for i, n in enumerate(order) if n.op.destroy_map)
        mul_at = next(i for i, n in enumerate(order)
                      if getattr(n.op, "scalar_op", None) is ps.mul)
        assert mul_at < exp_at

    def test_an_order_breaking_a_destroy_ordering_is_refused(self):
        x = tn.vector("x")
        view = x[::-1] * 1
        destroyed = Elemwise(ps.exp, {0: 0})(x)
        f = tn.function([In(x, borrow=True, mutable=True)],
                        [Out(destroyed, borrow=True), view], mode=NO_REWRITES)
        order = [s.node for s in make_plan(f.fgraph).steps]
        destroyer = next(n for n in order if n.op.destroy_map)
        bad = [destroyer] + [n for n in order if n is not destroyer]
        with pytest.raises(ValueError, match="still reads after it"):
            make_plan(f.fgraph, order=bad)
        with pytest.raises(ValueError, match="runs before"):
            check_order(f.fgraph, list(reversed(order)))

    def test_slots_do_not_depend_on_the_schedule(self, mode):
        x, y = tn.vector("x"), tn.vector("y")
        f = tn.function([x, y], [tn.exp(x).sum(), (tn.sin(y) * 2).sum()], mode=mode)
        small = sized_plan(f, np.zeros(2), np.zeros(3))
        large = sized_plan(f, np.zeros(3000), np.zeros(2))
        assert small.variables == large.variables == f._thunk.plan.variables


# ----------------------------------------------------------------------------
# Executing the reuse


class TestExecution:
    def test_the_later_output_is_written_into_the_dead_buffer(self, mode):
        x = tn.vector("x")
        f = reusing(mode, [x], probe("c", probe("b", probe("a", x))).sum())
        n = 1000
        value = np.arange(float(n))
        assert f(value) == pytest.approx(8 * value.sum())
        offered_c, written_c = calls("c")[0]
        _, written_a = calls("a")[0]
        assert offered_c == written_a == written_c
        assert calls("a")[0][0] is None and calls("b")[0][0] is None

    def test_the_py_linker_hands_on_only_large_buffers(self):
        x = tn.vector("x")
        f = tn.function([x], probe("c", probe("b", probe("a", x))).sum(),
                        mode=tn.Mode(linker="py"))
        f(np.zeros(100))
        assert calls("c")[0][0] is None  # 800 bytes: reallocated
        LOG.clear()
        n = f._thunk.min_reuse_bytes // 8
        f(np.zeros(n))
        assert calls("c")[0][0] == calls("a")[0][1]

    def test_a_buffer_also_held_elsewhere_is_never_handed_on(self):
        held = np.zeros(100)

        class ReturnsHeld(Op):
            """Returns an array it also keeps (a cache): wrong to overwrite."""

            def make_node(self, x):
                x = as_tensor_variable(x)
                return Apply(self, [x], [x.type()])

            def perform(self, node, inputs, output_storage):
                held[...] = inputs[0]
                output_storage[0][0] = held

            def infer_shape(self, node, input_shapes):
                return input_shapes

        x = tn.vector("x")
        cached = ReturnsHeld()(x)
        f = reusing(tn.Mode(linker="py"), [x], probe("c", probe("b", cached)).sum())
        plan = f._thunk.plan_for([np.zeros(100)])
        assert plan.reused_from()  # planned, since the plan cannot know...
        f(np.ones(100))
        assert calls("c")[0][0] is None  # ...but the executor refused it
        np.testing.assert_array_equal(held, np.ones(100))

    def test_nothing_is_kept_aside_after_the_call(self):
        import tracemalloc

        class Ignores(Op):
            """Never uses its output cell: a handed-on buffer is just dropped."""

            def make_node(self, x):
                x = as_tensor_variable(x)
                return Apply(self, [x], [x.type()])

            def perform(self, node, inputs, output_storage):
                output_storage[0][0] = inputs[0] * 3

            def infer_shape(self, node, input_shapes):
                return input_shapes

        x = tn.vector("x")
        a = probe("a", x)
        b = probe("b", a)
        dead = probe("d", x)
        f = reusing(tn.Mode(linker="py"), [x], [Ignores()(b).sum(), dead.sum()])
        n = 100_000
        value = np.zeros(n)
        f(value)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            f(value)
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert after - before < n * 8 / 10

    def test_a_failed_call_keeps_no_dead_buffer_aside(self, mode):
        import tracemalloc

        class SumOrRaise(Op):
            """``x.sum()``, raising when ``x[0]`` is negative."""

            def make_node(self, x):
                x = as_tensor_variable(x)
                return Apply(self, [x], [tn.scalar(dtype=x.dtype).type()])

            def perform(self, node, inputs, output_storage):
                if inputs[0][0] < 0:
                    raise ValueError("negative")
                output_storage[0][0] = np.asarray(inputs[0].sum())

            def infer_shape(self, node, input_shapes):
                return [()]

        x = tn.vector("x")
        b = probe("b", probe("a", x))
        later = b * SumOrRaise()(b)   # takes a's buffer, once SumOrRaise has run
        f = reusing(tn.Mode(linker=mode.linker, rewrites="none"), [x], later.sum())
        n = 100_000
        assert f._thunk.plan_for([np.ones(n)]).reused_from()
        f(np.ones(n))
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            with pytest.raises(ValueError, match="negative"):
                f(np.full(n, -1.0))
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert after - before < n * 8 / 10
        assert all(v is None for i, v in enumerate(f._thunk.storage)
                   if i not in f._thunk.plan.constants)

    def test_a_taken_buffer_is_released_when_its_variables_die(self):
        import tracemalloc

        # c takes a's buffer and dies before the larger second phase starts:
        # the executor must not keep it alive (no lingering reference).
        x, y = tn.vector("x"), tn.vector("y")
        c = probe("c", probe("b", probe("a", x)))
        phase2 = probe("q", probe("p", y))
        total = c.sum() + probe("r", tn.exp(phase2)).sum()
        f = reusing(tn.Mode(linker="py", rewrites="none"), [x, y], total)
        n = 50_000
        values = [np.zeros(n), np.zeros(3 * n)]
        plan = f._thunk.plan_for(values)
        assert plan.reused_from()
        f(*values)
        tracemalloc.start()
        try:
            f(*values)
            measured = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert measured < 1.1 * plan.peak()

    def test_in_place_and_view_chains_hand_on_the_whole_buffer(self, mode):
        x = tn.matrix("x")
        a = probe("a", x)
        a2 = Elemwise(ps.exp, {0: 0})(a)   # in place into a's buffer
        a3 = a2.T                           # a view of it
        b = probe("b", a3)
        c = probe("c", b)
        f = reusing(mode, [x], c.sum())
        value = np.full((20, 30), 0.5)
        np.testing.assert_allclose(f(value), 4 * np.exp(2 * value).sum())
        plan = f._thunk.plan_for([value])
        a_slot = next(s.outputs[0] for s in plan.steps
                      if isinstance(s.node.op, Probe) and s.node.op.tag == "a")
        assert set(plan.reused_from().values()) == {a_slot}
        assert calls("c")[0][0] == calls("a")[0][1]

    def test_a_reused_buffer_is_handed_on_again(self, mode):
        x = tn.vector("x")
        y = x
        for i in range(6):
            y = probe(f"p{i}", y)
        f = reusing(mode, [x], y.sum())
        f(np.ones(500))
        written = [calls(f"p{i}")[0][1] for i in range(6)]
        # Two buffers alternate: p2 takes p0's, p4 takes p2's (p0's again).
        offered = [calls(f"p{i}")[0][0] for i in range(6)]
        assert offered[:2] == [None, None]
        assert offered[2] == offered[4] == written[0] == written[2] == written[4]
        assert offered[3] == offered[5] == written[1] == written[3] == written[5]
        assert written[0] != written[1]

    def test_inputs_shared_values_and_results_are_never_written(self, mode):
        x = tn.vector("x")
        w = tn.shared(np.arange(50.0), name="w")
        r = probe("r", x)
        later = probe("l2", probe("l1", probe("l0", x + w)))
        f = reusing(mode, [In(x, borrow=True)], [r, Out(later, borrow=True), (w * 1).sum()])
        arg = np.arange(50.0)
        first_r, first_later, _ = f(arg)
        kept_address = address(first_later)
        second_r, second_later, _ = f(arg)
        np.testing.assert_array_equal(arg, np.arange(50.0))
        np.testing.assert_array_equal(w.get_value(), np.arange(50.0))
        np.testing.assert_array_equal(first_r, 2 * np.arange(50.0))
        assert address(second_later) == kept_address  # the borrowed output's buffer
        protected = {address(arg), address(w.get_value(borrow=True)), address(first_r)}
        for tag in LOG:
            for offered, _ in calls(tag):
                assert offered not in protected or offered is None


# ----------------------------------------------------------------------------
# The donor check


class TestTakeDonor:
    def take(self, array, shape=(4,), dtype="float64", nbytes=32):
        aside = {7: array}
        del array
        return take_donor(aside, 7, shape, np.dtype(dtype), nbytes)

    def test_an_unshared_buffer_is_taken_and_reinterpreted(self):
        buf = self.take(np.zeros(4), shape=(2, 4), dtype="float32")
        assert buf.shape == (2, 4) and buf.dtype == np.float32

    def test_same_shape_and_dtype_is_the_array_itself(self):
        aside = {0: np.zeros(4)}
        owner_id = id(aside[0])
        assert id(take_donor(aside, 0, (4,), np.dtype("float64"), 32)) == owner_id
        assert 0 not in aside  # taken once

    def test_a_view_of_an_unshared_owner_is_taken(self):
        buf = self.take(np.zeros(8).reshape(2, 4), shape=(8,), nbytes=64)
        assert buf is not None and buf.base is None and buf.shape == (8,)
        # A view of a view: its owner is not known to be unshared.
        assert self.take(np.zeros(8)[::1].reshape(2, 4), shape=(8,), nbytes=64) is None

    def test_refusals(self):
        other = np.zeros(4)
        assert self.take(other) is None                      # held by `other`
        owner = np.zeros(8)
        assert self.take(owner[:4]) is None                  # owner held, and partial
        assert self.take(np.zeros(8)[::2]) is None           # not contiguous / wrong size
        ro = np.zeros(4)
        ro.setflags(write=False)
        aside = {0: ro}
        del ro
        assert take_donor(aside, 0, (4,), np.dtype("float64"), 32) is None
        assert self.take(np.zeros(5)) is None                # wrong size
        assert self.take(3.0) is None                        # not an array
        assert take_donor({}, 0, (4,), np.dtype("float64"), 32) is None


# ----------------------------------------------------------------------------
# Plans per input-shape signature


def _chain(mode):
    x = tn.vector("x")
    return reusing(mode, [x], probe("c", probe("b", probe("a", x))).sum())


class TestSignatures:
    def test_one_plan_per_signature_made_once(self, mode):
        f = _chain(mode)
        thunk = f._thunk
        assert thunk.plans_per_signature
        f(np.zeros(10))
        f(np.zeros(10))
        assert thunk.plans_made == 1
        f(np.zeros(20))
        assert thunk.plans_made == 2
        f(np.zeros(10))
        assert thunk.plans_made == 2
        assert thunk.cached_signatures() == [((20,),), ((10,),)]

    def test_least_recently_used_signatures_are_dropped(self, mode):
        f = _chain(mode)
        thunk = f._thunk
        thunk.max_plans = 3
        for n in (1, 2, 3, 1, 4):
            f(np.zeros(n))
        assert thunk.cached_signatures() == [((3,),), ((1,),), ((4,),)]
        assert thunk.plans_made == 4
        f(np.zeros(2))  # dropped: planned again
        assert thunk.plans_made == 5
        assert len(thunk.cached_signatures()) == 3

    def test_different_shapes_get_different_plans(self, mode):
        x, y = tn.vector("x"), tn.vector("y")
        a = probe("a", x)
        b = probe("b", y)            # may take a's buffer only if y is x's size
        f = reusing(mode, [x, y], [(a * 1).sum(), (b * 1).sum()])
        thunk = f._thunk
        same = thunk.plan_for([np.zeros(10), np.zeros(10)])
        other = thunk.plan_for([np.zeros(10), np.zeros(11)])
        assert same is not other
        assert same.reused_from() and not other.reused_from()
        f(np.ones(10), np.ones(11))
        assert calls("b")[0][0] is None
        LOG.clear()
        f(np.ones(10), np.ones(10))
        assert calls("b")[0][0] == calls("a")[0][1]

    def test_shared_values_are_part_of_the_signature(self, mode):
        w = tn.shared(np.zeros(4), name="w")
        x = tn.vector("x")
        f = reusing(mode, [x], probe("c", probe("b", probe("a", x + w))).sum())
        f(np.zeros(4))
        w.set_value(np.zeros(6))
        assert f(np.zeros(6)) == 0
        assert f._thunk.cached_signatures() == [((4,), (4,)), ((6,), (6,))]

    def test_sizes_read_from_scalar_inputs_join_the_signature(self, mode):
        n = tn.scalar("n", dtype="int64")
        x = tn.vector("x")
        f = reusing(mode, [n, x], [(probe("b", probe("a", tn.zeros((n,)) + 1))).sum(),
                                   probe("c", x).sum()])
        assert f(3, np.ones(3))[0] == 12
        assert f(5, np.ones(3))[0] == 20
        assert f._thunk.plans_made == 2

    def test_indices_giving_equal_sizes_share_a_plan(self, mode):
        """Issue 39: a minibatch sliced by a symbolic index, X[i*20:(i+1)*20],
        has 20 rows whatever i: the signature holds the sizes the index
        decides, not its value, so a loop over 121 indices (the last batch
        of 10 rows) makes two plans, and their results are right."""
        X = tn.shared(np.arange(2410.0 * 3).reshape(2410, 3), name="X")
        i = tn.scalar("i", dtype="int64")
        batch = X[i * 20:(i + 1) * 20]
        f = reusing(mode, [i], [probe("b", probe("a", batch * 2)).sum(axis=0), batch.shape[0]])
        for _ in range(2):
            for k in range(121):
                total, rows = f(k)
                want = X.get_value()[k * 20:(k + 1) * 20]
                assert rows == len(want)
                np.testing.assert_allclose(total, 8 * want.sum(axis=0))   # (each probe doubles)
        assert f._thunk.plans_made == 2
        assert len(f._thunk.cached_signatures()) == 2

    def test_the_issues_minibatch_step_plans_twice_on_every_linker(self):
        """Issue 39's training step over a shared data set, on the linkers
        that plan per signature (the C linker's shape tables are keyed by the
        same signature; the cuda linker's device index is read on the host,
        once per new value, for the sizes it decides): two plans for 121
        minibatches, and the weights the Python linker computes."""
        data = np.random.default_rng(0).random((2410, 16))
        results = []
        for linker in ("py", "c", "check", "cuda"):
            with tn.config.change_flags(cuda_emulation=True,
                                        device="cuda" if linker == "cuda" else "cpu"):
                X = tn.shared(data, name="X")
                W = tn.shared(np.zeros((16, 4)), name="W")
                i = tn.scalar("i", dtype="int64")
                cost = tn.tanh(X[i * 20:(i + 1) * 20] @ W + 0.1).sum()
                f = tn.function([i], [], updates=[(W, W - 0.1 * tn.grad(cost, W))],
                                mode=tn.Mode(linker=linker))
                for _ in range(2):
                    for k in range(121):
                        f(k)
                assert f._thunk.plans_made == 2, linker
                # a memory report reads the plan of its signature: no new one
                peak = f.memory_report(7, print_report=False).predicted_peak
                assert f.memory_report(100, print_report=False).predicted_peak == peak
                if linker != "c":   # (the C thunk counts its calls' tables only)
                    assert f._thunk.plans_made == 2, linker
                results.append(W.get_value())
        for linker, got in zip(("c", "check", "cuda"), results[1:]):
            np.testing.assert_allclose(got, results[0], rtol=1e-12, err_msg=linker)

    def test_the_dask_linker_specializes_once_for_every_minibatch(self):
        """The dask linker makes no memory plan (Dask schedules the chunks),
        but rewrites the graph for what the shapes decide (a SumTo that is
        the identity): those graphs are keyed on the decisions, not on the
        index, so 121 minibatches (the last shorter) share one."""
        pytest.importorskip("dask")
        X = tn.shared(np.random.default_rng(0).random((2410, 16)), name="X")
        W, b = tn.shared(np.zeros((16, 4)), name="W"), tn.shared(np.zeros(4), name="b")
        i = tn.scalar("i", dtype="int64")
        cost = tn.tanh(X[i * 20:(i + 1) * 20] @ W + b).sum()
        f = tn.function([i], cost, updates=[(v, v - 0.1 * tn.grad(cost, v)) for v in (W, b)],
                        mode=tn.Mode(linker="dask", compute=True))
        for k in range(121):
            f(k)
        graphs = f._thunk.graphs
        assert graphs.has_candidates and len(graphs._rebuilt) == 1

    def test_without_gc_there_is_one_plan(self, mode):
        x = tn.vector("x")
        with tn.config.change_flags(allow_gc=False):
            f = tn.function([x], probe("c", probe("b", probe("a", x))).sum(), mode=mode)
        assert not f._thunk.plans_per_signature
        f(np.zeros(3))
        f(np.zeros(4))
        assert f._thunk.plans_made == 0

    def test_a_single_node_graph_pays_nothing_per_call(self):
        x = tn.vector("x")
        f = tn.function([In(x, borrow=True)], Out((tn.exp(x) * 2 + 1).sum(), borrow=True))
        assert len(f.fgraph.apply_nodes) == 1
        assert not f._thunk.plans_per_signature
        assert not reuse_possible(f._thunk.plan)


# ----------------------------------------------------------------------------
# Random graphs: planned execution equals unplanned execution


UNARY = [tn.exp, tn.sin, tn.tanh, lambda v: v * 0.5, lambda v: -v, tn.softmax]
BINARY = [tn.add, tn.mul, tn.sub]


@st.composite
def graphs(draw):
    """A recipe: ops over a matrix ``x`` (m, n) and a vector ``y`` (n,)."""
    steps = []
    for _ in range(draw(st.integers(2, 12))):
        kind = draw(st.sampled_from(["unary", "unary", "binary", "reduce", "transpose2"]))
        # Operands counted from the most recent value: mostly chains, which free early.
        steps.append((kind, draw(st.integers(0, 3)), draw(st.integers(0, 100))))
    outputs = draw(st.lists(st.integers(0, 4), min_size=1, max_size=2))
    shapes = draw(st.lists(st.tuples(st.integers(1, 12), st.integers(1, 12)),
                           min_size=1, max_size=3))
    return steps, outputs, shapes, draw(st.sampled_from(["default", "none", "none"]))


def build(recipe):
    steps, outputs = recipe[:2]
    x, y = tn.matrix("x"), tn.vector("y")
    pool = {"mat": [x], "vec": [y]}
    for kind, i, j in steps:
        mats, vecs = pool["mat"], pool["vec"]
        mat = mats[-1 - i % len(mats)]
        if kind == "unary":
            pool["mat"].append(UNARY[j % len(UNARY)](mat))
        elif kind == "binary":
            other = vecs[j % len(vecs)] if j % 2 else mats[j % len(mats)]
            pool["mat"].append(BINARY[j % len(BINARY)](mat, other))
        elif kind == "reduce":
            pool["vec"].append(tn.sum(mat, axis=0) + vecs[j % len(vecs)])
        else:
            pool["mat"].append(mat.T.T * 1.5)
    every = pool["vec"] + pool["mat"]
    return [x, y], [every[-1 - k % len(every)].sum() if k % 2 else every[-1 - k % len(every)]
                    for k in outputs]


@COMPILED
@given(recipe=graphs())
def test_planned_execution_equals_unplanned(mode, recipe):
    inputs, outputs = build(recipe)
    mode = tn.Mode(linker=mode.linker, rewrites=recipe[3])
    planned = reusing(mode, inputs, outputs, on_unused_input="ignore")
    reference = tn.function(inputs, outputs, mode=mode, on_unused_input="ignore")
    unplanned = PythonThunk(reference._thunk.plan, set(reference._thunk.kept_slots))
    reference._thunk = unplanned  # the plan made without sizes: no reuse
    rng = np.random.default_rng(0)
    for m, n in recipe[2]:
        xv, yv = rng.normal(size=(m, n)), rng.normal(size=n)
        with np.errstate(all="ignore"):  # exp of exp of ... may overflow: alike in both
            got = planned(xv, yv)
            want = reference(xv, yv)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_random_graphs_do_reuse():
    # The strategy above exercises reuse (not only plans that reuse nothing).
    inputs, outputs = build(([("unary", 0, 0), ("unary", 0, 1), ("unary", 0, 2),
                              ("unary", 0, 3)], [0], [(5, 6)], "none"))
    f = reusing(tn.Mode(linker="check", rewrites="none"), inputs, outputs,
                on_unused_input="ignore")
    assert f._thunk.plan_for([np.zeros((5, 6)), np.zeros(6)]).reused_from()


class TestPythonStepsBeforeTheCommitPoint:
    """The C linker's schedule puts the steps it runs as Python before the
    first write into shared storage where it can: a Python step after it
    keeps every call on the Python call path."""

    @staticmethod
    def minibatch_step(linker):
        X = tn.shared(np.random.default_rng(0).random((200, 8)), name="X")
        W, b = tn.shared(np.zeros((8, 3)), name="W"), tn.shared(np.zeros(3), name="b")
        i = tn.scalar("i", dtype="int64")
        cost = tn.tanh(X[i * 20:(i + 1) * 20] @ W + b).sum()
        f = tn.function([i], cost, updates=[(v, v - 0.1 * tn.grad(cost, v)) for v in (W, b)],
                        mode=tn.Mode(linker=linker))
        return f, W, b

    def test_a_bias_gradients_sum_goes_before_the_updates(self, cc_or_skip):
        """Issue 39's step: b's gradient is a SumTo that needs no write;
        before, it ran as Python after W's in-place update and the calls took
        the Python path.  The move put it first; now it is a C step (issue
        33), and the calls take the compiled path, with the same numbers.
        (The other tests here move sorts, which are still Python steps.)"""
        f, W, b = self.minibatch_step("c")
        thunk = f._thunk
        assert "py" not in thunk.graph.kinds
        assert f._fast_call is not None
        g, W_py, b_py = self.minibatch_step("py")
        for k in range(10):
            np.testing.assert_allclose(f(k), g(k), rtol=1e-12)
        np.testing.assert_allclose(W.get_value(), W_py.get_value(), rtol=1e-12)
        np.testing.assert_allclose(b.get_value(), b_py.get_value(), rtol=1e-12)

    def test_a_step_reading_a_write_stays_after_it(self):
        """A Python step of an output that reads the updated value (the same
        node as the in-place update) cannot move; the others still do."""
        w = tn.shared(np.arange(4.0), name="w")
        x = tn.vector("x")
        new_w = w - 0.1 * x
        f = tn.function([x], [tn.sort(new_w), tn.sort(x)], updates=[(w, new_w)],
                        mode=tn.Mode(linker="py"))
        order = [step.node for step in f._thunk.plan.steps]
        fgraph = f.fgraph
        moved = python_steps_before_commit(fgraph, order, lambda n: isinstance(
            n.op, type(fgraph.outputs[0].owner.op)))
        check_order(fgraph, moved)
        first = next(k for k, n in enumerate(moved) if writes_shared_storage(n))
        sorts = [k for k, n in enumerate(moved) if n in {o.owner for o in fgraph.outputs[:2]}]
        reads_x = moved.index(fgraph.outputs[1].owner)
        reads_write = moved.index(fgraph.outputs[0].owner)
        assert reads_x < first < reads_write and len(sorts) == 2

    def test_no_move_that_raises_the_planned_peak(self):
        """Moving a sort (a Python step) before the write keeps its result
        alive while the join after it allocates twice x's size: the planned
        peak would rise by half, more than MOVE_PEAK_SLACK, so with sizes
        given nothing moves."""
        w = tn.shared(np.zeros(3), name="w")
        x = tn.vector("x")
        f = tn.function([x], [tn.sort(x * 2), tn.concatenate([x, x]).sum()],
                        updates=[(w, w + 1)], mode=tn.Mode(linker="py", exclude=["fusion"]))
        mul, sort, join, total, write = [step.node for step in f._thunk.plan.steps]
        assert writes_shared_storage(write) and not writes_shared_storage(sort)
        order = [write, join, total, mul, sort]

        def is_sort(node):
            return node is sort
        moved = python_steps_before_commit(f.fgraph, order, is_sort)
        assert moved == [mul, sort, write, join, total]
        shapes = SizeModel(f.fgraph).shapes([np.zeros(1000), w.get_value()])
        assert (make_plan(f.fgraph, True, shapes, order=moved).peak()
                > MOVE_PEAK_SLACK * make_plan(f.fgraph, True, shapes, order=order).peak())
        assert python_steps_before_commit(f.fgraph, order, is_sort, shapes) is order

    def test_nothing_moves_without_a_write(self):
        x = tn.vector("x")
        f = tn.function([x], tn.sort(x) * 2, mode=tn.Mode(linker="py"))
        order = [step.node for step in f._thunk.plan.steps]
        assert python_steps_before_commit(f.fgraph, order, lambda n: True) is order
