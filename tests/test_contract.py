"""The memory contract of DESIGN.md, one test (or a few) per clause.

Every test takes the ``mode`` fixture, so each linker must pass all of them.
Destructive ops are built explicitly here (an Elemwise with an
``inplace_pattern``) so the clauses about overwriting can be checked before
the in-place rewrites exist.
"""

import tracemalloc

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.elemwise import Elemwise


def inplace(scalar_op, *inputs, into=0):
    """``scalar_op(*inputs)`` written into the buffer of ``inputs[into]``."""
    return Elemwise(scalar_op, {0: into})(*inputs)


# ---------------------------------------------------------------------------
# Shared variables


class TestSharedConstruction:
    @pytest.mark.parametrize("kwargs", [{}, {"borrow": False}])
    def test_default_and_borrow_false_deep_copy(self, kwargs):
        value = np.ones(3)
        s = tn.shared(value, **kwargs)
        value += 1
        np.testing.assert_array_equal(s.get_value(), np.ones(3))
        assert not np.shares_memory(s.get_value(borrow=True), value)

    def test_borrow_true_keeps_the_array_on_cpu(self):
        value = np.ones(3)
        s = tn.shared(value, borrow=True)
        value += 1
        np.testing.assert_array_equal(s.get_value(), np.full(3, 2.0))
        assert s.get_value(borrow=True) is value

    def test_borrow_true_of_read_only_array_copies(self):
        # Storage must be writable so updates may go in place.
        value = np.ones(3)
        value.setflags(write=False)
        s = tn.shared(value, borrow=True)
        assert s.get_value(borrow=True).flags.writeable
        assert not np.shares_memory(s.get_value(borrow=True), value)


class TestSharedStorageIsUnique:
    def test_borrowing_the_same_array_twice(self):
        value = np.zeros(4)
        a = tn.shared(value, borrow=True)
        b = tn.shared(value, borrow=True)
        assert not np.shares_memory(a.get_value(borrow=True), b.get_value(borrow=True))

    def test_borrowing_a_view_of_other_storage(self):
        a = tn.shared(np.zeros(4))
        b = tn.shared(a.get_value(borrow=True)[1:], borrow=True)
        assert not np.shares_memory(a.get_value(borrow=True), b.get_value(borrow=True))

    def test_set_value_borrow_of_other_storage(self):
        a = tn.shared(np.zeros(4))
        b = tn.shared(np.ones(4))
        b.set_value(a.get_value(borrow=True), borrow=True)
        assert not np.shares_memory(a.get_value(borrow=True), b.get_value(borrow=True))

    def test_update_from_another_shared(self, mode):
        a = tn.shared(np.zeros(3), name="a")
        b = tn.shared(np.ones(3), name="b")
        f = tn.function([], [], updates=[(a, b)], mode=mode)
        f()
        assert not np.shares_memory(a.get_value(borrow=True), b.get_value(borrow=True))
        np.testing.assert_array_equal(a.get_value(), np.ones(3))

    def test_update_from_view_of_another_shared(self, mode):
        a = tn.shared(np.zeros((2, 2)), name="a")
        b = tn.shared(np.arange(4.0).reshape(2, 2), name="b")
        f = tn.function([], [], updates=[(a, b.T)], mode=mode)
        f()
        assert not np.shares_memory(a.get_value(borrow=True), b.get_value(borrow=True))
        np.testing.assert_array_equal(a.get_value(), np.arange(4.0).reshape(2, 2).T)

    def test_two_updates_from_one_expression(self, mode):
        a = tn.shared(np.zeros(3), name="a")
        b = tn.shared(np.zeros(3), name="b")
        x = tn.vector("x")
        y = tn.exp(x)
        f = tn.function([x], [], updates=[(a, y), (b, y)], mode=mode)
        f(np.ones(3))
        assert not np.shares_memory(a.get_value(borrow=True), b.get_value(borrow=True))

    def test_update_does_not_adopt_a_borrowed_input(self, mode):
        # A borrowed input stays the caller's: shared storage must not alias it.
        a = tn.shared(np.zeros(3), name="a")
        x = tn.vector("x")
        f = tn.function([In(x, borrow=True)], [], updates=[(a, x)], mode=mode)
        arg = np.ones(3)
        f(arg)
        assert not np.shares_memory(a.get_value(borrow=True), arg)
        arg[:] = 5
        np.testing.assert_array_equal(a.get_value(), np.ones(3))

    @pytest.mark.host_buffers
    def test_update_may_adopt_a_mutable_input(self, mode):
        a = tn.shared(np.zeros(3), name="a")
        x = tn.vector("x")
        f = tn.function([In(x, borrow=True, mutable=True)], [], updates=[(a, x)], mode=mode)
        arg = np.ones(3)
        f(arg)
        assert a.get_value(borrow=True) is arg  # given away: no copy needed

    def test_update_from_a_constant_is_writable_storage(self, mode):
        a = tn.shared(np.zeros(3), name="a")
        f = tn.function([], [], updates=[(a, tn.constant(np.ones(3)))], mode=mode)
        f()
        assert a.get_value(borrow=True).flags.writeable
        a.get_value(borrow=True)[:] = 7  # must not corrupt the constant
        f()
        np.testing.assert_array_equal(a.get_value(), np.ones(3))

    def test_a_borrowed_constant_output_is_the_functions_writable_copy(self, mode):
        """Out(constant, borrow=True) -- PyTensor's test_constant_output --
        lends a buffer the caller may write into: the function's own copy
        (the constant is not the function's to lend), the same one every
        call, so what the caller wrote stays in it, as PyTensor's output
        storage keeps it.  A borrowed view of a constant too; an output not
        borrowed is the constant's value every call; the constant is never
        written.  (The dask linker makes every result anew.)"""
        x, values = tn.vector("x"), np.arange(4.0)
        c = tn.constant(values)
        f = tn.function([x], [Out(c, borrow=True), Out(c[1:], borrow=True),
                              Out(x + 1, borrow=True), c], mode=mode)
        whole, tail, _, owned = f(np.ones(4))
        for result in (whole, tail, owned):
            assert result.flags.writeable
        np.testing.assert_array_equal(whole, values)
        np.testing.assert_array_equal(tail, values[1:])
        whole[:] = -1
        tail[:] = -2
        owned[:] = -3
        whole2, tail2, _, owned2 = f(np.ones(4))
        np.testing.assert_array_equal(owned2, values)
        if mode.linker not in ("dask", "cuda"):   # (the suites copy device results)
            assert whole2 is whole and tail2 is tail
            np.testing.assert_array_equal(whole2, [-1] * 4)
            np.testing.assert_array_equal(tail2, [-2] * 3)
        np.testing.assert_array_equal(c.data, values)


class TestGetValue:
    def test_default_returns_a_copy_the_caller_owns(self):
        s = tn.shared(np.zeros(3))
        v = s.get_value()
        v += 1
        np.testing.assert_array_equal(s.get_value(), np.zeros(3))
        assert s.get_value() is not s.get_value()

    def test_borrow_may_return_the_internal_buffer(self):
        s = tn.shared(np.zeros(3))
        assert s.get_value(borrow=True) is s.get_value(borrow=True)

    def test_return_internal_type(self):
        s = tn.shared(np.zeros(3))
        internal = s.get_value(borrow=True, return_internal_type=True)
        assert type(internal) is np.ndarray
        assert internal is s.get_value(borrow=True)
        copy = s.get_value(borrow=False, return_internal_type=True)
        assert type(copy) is np.ndarray and not np.shares_memory(copy, internal)


class TestSetValue:
    def test_default_copies(self):
        s = tn.shared(np.zeros(3))
        new = np.ones(3)
        s.set_value(new)
        new += 1
        np.testing.assert_array_equal(s.get_value(), np.ones(3))

    def test_borrow_may_adopt(self):
        s = tn.shared(np.zeros(3))
        new = np.ones(3)
        s.set_value(new, borrow=True)
        assert s.get_value(borrow=True) is new

    def test_in_place_pattern(self):
        s = tn.shared(np.arange(3.0))

        def double_in_place(v):
            v *= 2
            return v

        s.set_value(double_in_place(s.get_value(borrow=True)), borrow=True)
        np.testing.assert_array_equal(s.get_value(), [0.0, 2.0, 4.0])

    def test_functions_see_the_new_value(self, mode):
        s = tn.shared(np.zeros(3), name="s")
        f = tn.function([], s.sum(), mode=mode)
        s.set_value(np.ones(3))
        assert f() == 3.0
        s.set_value(np.ones(5))  # the shape may change
        assert f() == 5.0


class TestUpdates:
    def test_swap(self, mode):
        a = tn.shared(np.zeros(2), name="a")
        b = tn.shared(np.ones(2), name="b")
        f = tn.function([], [], updates=[(a, b), (b, a)], mode=mode)
        f()
        np.testing.assert_array_equal(a.get_value(), np.ones(2))
        np.testing.assert_array_equal(b.get_value(), np.zeros(2))
        assert not np.shares_memory(a.get_value(borrow=True), b.get_value(borrow=True))

    def test_outputs_and_updates_use_values_from_before_the_call(self, mode):
        w = tn.shared(np.float64(1.0), name="w")
        v = tn.shared(np.float64(10.0), name="v")
        f = tn.function([], [w * 1, v * 1], updates=[(w, w + v), (v, w * 2)], mode=mode)
        assert f() == [1.0, 10.0]
        assert float(w.get_value()) == 11.0 and float(v.get_value()) == 2.0

    @pytest.mark.shares_buffers
    def test_update_in_place_into_own_buffer(self, mode):
        # Overwriting an updated shared variable's own buffer is allowed.
        w = tn.shared(np.ones(3), name="w", borrow=True)
        buffer = w.get_value(borrow=True)
        f = tn.function([], [], updates=[(w, inplace(ps.add, w, 1.0))], mode=mode)
        f()
        f()
        np.testing.assert_array_equal(w.get_value(), np.full(3, 3.0))
        assert w.get_value(borrow=True) is buffer

    def test_overwriting_a_shared_variable_that_is_not_updated_is_refused(self, mode):
        w = tn.shared(np.ones(3), name="w")
        with pytest.raises(ValueError, match="does not update"):
            tn.function([], inplace(ps.exp, w), mode=mode)


# ---------------------------------------------------------------------------
# Function inputs


class TestInDefault:
    @pytest.mark.parametrize("expr", [
        lambda x: x, lambda x: x.T, lambda x: x[1:], lambda x: x.reshape((-1,)),
        lambda x: x[None, ...],
    ])
    def test_outputs_never_alias_the_caller_array(self, mode, expr):
        x = tn.matrix("x")
        f = tn.function([x], expr(x), mode=mode)
        arg = np.arange(6.0).reshape(2, 3)
        result = f(arg)
        assert not np.shares_memory(result, arg)
        np.testing.assert_array_equal(result, expr(arg))

    def test_never_writes_the_caller_array(self, mode):
        x = tn.matrix("x")
        y = tn.exp(x) * 2 + x.sum(axis=0) - x.T.T
        f = tn.function([x], [y, x.T], mode=mode)
        arg = np.arange(6.0).reshape(2, 3)
        before = arg.copy()
        for _ in range(2):
            f(arg)
        np.testing.assert_array_equal(arg, before)

    def test_overwriting_a_non_mutable_input_is_refused(self, mode):
        x = tn.vector("x")
        with pytest.raises(ValueError, match="would overwrite input x"):
            tn.function([In(x, borrow=True)], inplace(ps.exp, x), mode=mode)
        with pytest.raises(ValueError, match="would overwrite input x"):
            tn.function([x], inplace(ps.exp, x), mode=mode)

    def test_overwriting_a_constant_is_refused(self, mode):
        c = tn.constant(np.ones(3))
        with pytest.raises(ValueError, match="would overwrite constant"):
            tn.function([], inplace(ps.exp, c), mode=mode)


class TestInBorrow:
    @pytest.mark.shares_buffers
    def test_outputs_may_alias_a_borrowed_input(self, mode):
        x = tn.matrix("x")
        f = tn.function([In(x, borrow=True)], x.T, mode=mode)
        arg = np.arange(6.0).reshape(2, 3)
        assert np.shares_memory(f(arg), arg)  # no defensive copy

    @pytest.mark.host_buffers
    def test_borrowed_output_of_borrowed_input(self, mode):
        x = tn.matrix("x")
        f = tn.function([In(x, borrow=True)], Out(x, borrow=True), mode=mode)
        arg = np.ones((2, 2))
        assert f(arg) is arg

    def test_a_default_value_is_never_handed_out(self, mode):
        x = tn.vector("x")
        f = tn.function([In(x, borrow=True, value=np.zeros(2))], x, mode=mode)
        first = f()
        first += 5
        np.testing.assert_array_equal(f(), np.zeros(2))


class TestInMutable:
    def test_mutable_without_borrow_is_a_value_error(self):
        x = tn.vector("x")
        with pytest.raises(ValueError, match="mutable=True requires borrow=True"):
            In(x, mutable=True, borrow=False)

    @pytest.mark.shares_buffers
    def test_mutable_buffer_is_used_as_workspace(self, mode):
        x = tn.vector("x")
        f = tn.function([In(x, borrow=True, mutable=True)], Out(inplace(ps.exp, x), borrow=True),
                        mode=mode)
        arg = np.zeros(3)
        result = f(arg)
        assert result is arg
        np.testing.assert_array_equal(arg, np.ones(3))

    def test_readers_of_a_mutable_input_run_before_it_is_overwritten(self, mode):
        x = tn.vector("x")
        # Listed first, the in-place exp could run before the sum; the schedule
        # must put the sum first.
        f = tn.function([In(x, borrow=True, mutable=True)],
                        [Out(inplace(ps.exp, x), borrow=True), x.sum() * 1], mode=mode)
        arg = np.arange(3.0)
        exp_x, total = f(arg)
        np.testing.assert_allclose(exp_x, np.exp(np.arange(3.0)))
        assert total == 3.0

    def test_returning_a_buffer_that_is_overwritten_is_refused(self, mode):
        x = tn.vector("x")
        with pytest.raises(ValueError, match="returns or assigns"):
            tn.function([In(x, borrow=True, mutable=True)], [inplace(ps.exp, x), x], mode=mode)

    def test_overlapping_mutable_inputs_give_correct_results(self, mode):
        x = tn.vector("x")
        y = tn.vector("y")
        f = tn.function([In(x, borrow=True, mutable=True), In(y, borrow=True, mutable=True)],
                        [inplace(ps.add, x, 1.0) * 1, inplace(ps.mul, y, 2.0) * 1], mode=mode)
        same = np.arange(4.0)
        r1, r2 = f(same, same)
        np.testing.assert_array_equal(r1, np.arange(4.0) + 1)
        np.testing.assert_array_equal(r2, np.arange(4.0) * 2)
        # Partially overlapping views too.
        base = np.arange(6.0)
        r1, r2 = f(base[:4], base[2:])
        np.testing.assert_array_equal(r1, np.arange(4.0) + 1)
        np.testing.assert_array_equal(r2, np.arange(2.0, 6.0) * 2)

    def test_mutable_input_overlapping_a_protected_one(self, mode):
        x = tn.vector("x")
        y = tn.vector("y")
        f = tn.function([In(x, borrow=True, mutable=True), y],
                        [inplace(ps.add, x, 1.0) * 1, y * 1], mode=mode)
        same = np.arange(3.0)
        r1, r2 = f(same, same)
        np.testing.assert_array_equal(r2, np.arange(3.0))  # y read before/without the write
        np.testing.assert_array_equal(r1, np.arange(3.0) + 1)


# ---------------------------------------------------------------------------
# Function outputs


class TestOutDefault:
    def test_fresh_array_every_call(self, mode):
        x = tn.vector("x")
        f = tn.function([x], tn.exp(x), mode=mode)
        r1 = f(np.zeros(3))
        r2 = f(np.ones(3))
        assert not np.shares_memory(r1, r2)
        np.testing.assert_array_equal(r1, np.ones(3))  # not overwritten by the later call

    def test_not_aliased_to_shared_storage(self, mode):
        w = tn.shared(np.arange(4.0).reshape(2, 2), name="w")
        for expr in (w, w.T, w[0]):
            result = tn.function([], expr, mode=mode)()
            assert not np.shares_memory(result, w.get_value(borrow=True))

    def test_not_aliased_to_updated_shared_storage(self, mode):
        w = tn.shared(np.zeros(3), name="w")
        new = w + 1
        f = tn.function([], new, updates=[(w, new)], mode=mode)
        result = f()
        assert not np.shares_memory(result, w.get_value(borrow=True))
        result += 100
        np.testing.assert_array_equal(w.get_value(), np.ones(3))

    def test_not_aliased_to_another_output(self, mode):
        x = tn.vector("x")
        y = tn.exp(x)
        f = tn.function([x], [y, y, y[::-1]], mode=mode)
        a, b, c = f(np.zeros(3))
        assert not np.shares_memory(a, b)
        assert not np.shares_memory(a, c) and not np.shares_memory(b, c)

    def test_not_aliased_to_a_constant(self, mode):
        f = tn.function([], tn.constant(np.arange(3.0)), mode=mode)
        result = f()
        result += 1
        np.testing.assert_array_equal(f(), np.arange(3.0))

    def test_not_aliased_to_a_borrowed_output_buffer(self, mode):
        x = tn.vector("x")
        y = tn.exp(x)
        f = tn.function([x], [Out(y, borrow=True), y[::-1]], mode=mode)
        kept, fresh = f(np.zeros(3))
        f(np.ones(3))
        np.testing.assert_array_equal(fresh, np.ones(3))
        assert not np.shares_memory(kept, fresh)

    def test_no_copy_where_none_is_needed(self, mode):
        # A result computed fresh by the graph is returned as is (not copied):
        # it is the very array the last op produced.
        x = tn.vector("x")
        f = tn.function([x], Out(tn.exp(x)), mode=mode)
        assert not f._output_hazards[0]


class TestOutBorrow:
    @pytest.mark.shares_buffers
    def test_next_call_overwrites_the_returned_buffer(self, mode):
        x = tn.vector("x")
        f = tn.function([x], Out(tn.exp(x), borrow=True), mode=mode)
        r1 = f(np.zeros(3))
        r2 = f(np.ones(3))
        assert r1.ctypes.data == r2.ctypes.data
        np.testing.assert_allclose(r1, np.exp(np.ones(3)))

    @pytest.mark.shares_buffers
    def test_no_allocation_per_call_in_steady_state(self, mode):
        x = tn.vector("x")
        n = 200_000
        arg = np.ones(n)

        def allocated_per_call(borrow):
            f = tn.function([In(x, borrow=True)], Out(tn.exp(x) * 2, borrow=borrow), mode=mode)
            results = [f(arg) for _ in range(3)]  # warm up
            del results
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                keep = [f(arg) for _ in range(5)]
                grown = tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()
            del keep
            return grown / 5

        assert allocated_per_call(borrow=False) >= n * 8          # a fresh output each call
        assert allocated_per_call(borrow=True) < n * 8 / 10       # the kept buffer is reused

    def test_shape_change_reallocates(self, mode):
        x = tn.vector("x")
        f = tn.function([x], Out(tn.exp(x), borrow=True), mode=mode)
        f(np.zeros(3))
        np.testing.assert_array_equal(f(np.zeros(5)), np.ones(5))

    def test_passing_the_borrowed_result_back_in(self, mode):
        x = tn.vector("x")
        y = x * 2
        f = tn.function([In(x, borrow=True)], [Out(y, borrow=True), x + 1], mode=mode)
        r, _ = f(np.ones(3))
        r2, plus_one = f(r)  # r is both an input and the kept output buffer
        np.testing.assert_array_equal(r2, np.full(3, 4.0))
        np.testing.assert_array_equal(plus_one, np.full(3, 3.0))

    def test_borrowed_output_that_is_also_an_update(self, mode):
        w = tn.shared(np.zeros(3), name="w")
        new = w + 1
        f = tn.function([], Out(new, borrow=True), updates=[(w, new)], mode=mode)
        for expected in (1.0, 2.0, 3.0):
            f()
            np.testing.assert_array_equal(w.get_value(), np.full(3, expected))

    def test_borrowed_output_after_set_value_borrow(self, mode):
        # The caller made the kept buffer shared storage: it must not be overwritten.
        w = tn.shared(np.zeros(3), name="w")
        f = tn.function([], Out(w * 2 + 1, borrow=True), mode=mode)
        r = f()
        w.set_value(r, borrow=True)
        f()
        np.testing.assert_array_equal(w.get_value(), np.ones(3))

    def test_free_releases_kept_buffers(self, mode):
        x = tn.vector("x")
        f = tn.function([x], Out(tn.exp(x), borrow=True), mode=mode)
        r1 = f(np.zeros(3))
        f.free()
        r2 = f(np.zeros(3))
        assert not np.shares_memory(r1, r2)


def test_a_default_value_is_copied_when_compiling(mode):
    x = tn.vector("x")
    base = np.array([1.0, 2.0])
    f = tn.function([In(x, value=base)], x * 1, mode=mode)
    base[0] = 50  # the caller's array is still the caller's
    np.testing.assert_array_equal(f(), [1.0, 2.0])


# ---------------------------------------------------------------------------
# Arguments overlapping shared storage the call overwrites (issue 41, item 5)


def _storage(var):
    """The shared variable's storage itself (a device array on a device)."""
    return var.get_value(borrow=True, return_internal_type=True)


@pytest.mark.parametrize("borrow", [False, True])
def test_an_argument_that_is_shared_storage_updated_in_place_is_read_before_the_update(
        mode, borrow):
    s = tn.shared(np.arange(4.0), name="s")
    v = tn.vector("v", dtype="float64")
    f = tn.function([In(v, borrow=borrow)], v[::-1] * 1.0, updates=[(s, s * 2 + 1)],
                    mode=mode)
    np.testing.assert_array_equal(f(_storage(s)), [3.0, 2.0, 1.0, 0.0])
    np.testing.assert_array_equal(s.get_value(), [1.0, 3.0, 5.0, 7.0])


def test_an_argument_viewing_shared_storage_updated_in_place_is_read_before_the_update(mode):
    # The output reads the argument after the update wrote s's buffer (it
    # needs the new value too); a scalar output: on the C linker this call
    # takes the compiled path.
    s = tn.shared(np.arange(4.0), name="s")
    v = tn.vector("v", dtype="float64")
    new = s * 2 + 1
    f = tn.function([v], (v * new).sum(), updates=[(s, new)], mode=mode)
    assert f(_storage(s)[:]) == 0 * 1 + 1 * 3 + 2 * 5 + 3 * 7
    np.testing.assert_array_equal(s.get_value(), [1.0, 3.0, 5.0, 7.0])
    assert f(np.ones(4)) == 3 + 7 + 11 + 15   # an argument apart from the storage
    np.testing.assert_array_equal(s.get_value(), [3.0, 7.0, 11.0, 15.0])


def test_an_argument_overlapping_two_updated_shared_variables(mode):
    a = tn.shared(np.arange(3.0), name="a")
    b = tn.shared(np.arange(3.0) + 10, name="b")
    v = tn.vector("v", dtype="float64")
    w = tn.vector("w", dtype="float64")
    f = tn.function([v, w], [], updates=[(a, a + w[::-1]), (b, b - v[::-1])], mode=mode)
    f(_storage(a), _storage(b))
    np.testing.assert_array_equal(a.get_value(), [12.0, 12.0, 12.0])
    np.testing.assert_array_equal(b.get_value(), [8.0, 10.0, 12.0])


# ---------------------------------------------------------------------------
# Shared storage made of a borrowed output (issue 41, item 11)


class TestSharedOfABorrowedOutput:
    @staticmethod
    def _lending(mode):
        x = tn.vector("x", dtype="float64")
        return tn.function([x], Out(x * 2.0, borrow=True), mode=mode)

    @pytest.mark.parametrize("take", [lambda r: r, lambda r: r[1:], lambda r: r[::-1]],
                             ids=["itself", "a view", "a reversed view"])
    def test_shared_borrowing_it_is_not_overwritten_by_the_next_call(self, mode, take):
        f = self._lending(mode)
        s = tn.shared(take(f(np.ones(3))), borrow=True)
        expected = s.get_value()
        f(np.full(3, 5.0))
        np.testing.assert_array_equal(s.get_value(), expected)

    def test_set_value_borrowing_it_is_not_overwritten_by_the_next_call(self, mode):
        f = self._lending(mode)
        s = tn.shared(np.zeros(3))
        s.set_value(f(np.ones(3)), borrow=True)
        f(np.full(3, 5.0))
        np.testing.assert_array_equal(s.get_value(), np.full(3, 2.0))

    def test_other_borrowed_arrays_are_still_adopted(self, mode):
        f = self._lending(mode)
        f(np.ones(3))
        mine = np.zeros(3)
        s = tn.shared(mine, borrow=True)
        if mode.linker != "cuda":   # device storage never is the caller's array
            assert s.get_value(borrow=True) is mine
