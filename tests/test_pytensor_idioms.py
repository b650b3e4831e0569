"""PyTensor code ported unchanged: the function-level idioms it relies on.

``In(x, mutable=True)``, ``default_update`` / ``no_default_updates``,
``Function.copy``, ``trust_input=``, ``f.dprint()``, and the errors PyTensor
raises for unordered inputs or updates, non-string input names and updates
that would make a variable broadcastable.  (Pickling: tests/test_pickle.py.)

The graphs are small and shared between asserts: this file runs on the C
linker in every run (conftest.SUITES["c"]), where each new graph compiles.
"""

import copy
import pickle
import sys
import threading

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out
from tenure.symbolic.device import is_device_array


def to_host(value):
    """A device array's value as NumPy's (the cuda linker keeps values on the device)."""
    return value.get() if is_device_array(value) else value


def counter(name="n", start=0.0):
    """A shared float64 scalar that counts the calls of every function reading it."""
    n = tn.shared(np.float64(start), name=name)
    n.default_update = n + 1
    return n


# -- 1. In(x, mutable=True) ------------------------------------------------------


class TestInMutable:
    def test_mutable_implies_borrow(self, mode):
        x = tn.vector("x")
        spec = In(x, mutable=True)
        assert spec.mutable and spec.borrow
        assert not In(x).borrow and In(x, borrow=True).borrow and not In(x, borrow=True).mutable
        f = tn.function([spec], x * 2 + 1, mode=mode)
        np.testing.assert_array_equal(f(np.arange(3.0)), [1.0, 3.0, 5.0])
        with pytest.raises(ValueError, match="mutable=True requires borrow=True"):
            In(x, mutable=True, borrow=False)  # an explicit contradiction stays an error


# -- 2. default_update and no_default_updates --------------------------------------


class TestDefaultUpdates:
    def test_attribute_defaults_to_none(self, mode):
        assert tn.shared(np.zeros(2)).default_update is None

    def test_applied_to_every_shared_variable_read(self, mode):
        x = tn.scalar("x")
        n = counter()
        f = tn.function([x], x + n, mode=mode)
        assert f(10.0) == 10.0 and f(10.0) == 11.0
        assert n.get_value() == 2.0
        g = tn.function([x], x + n, mode=mode)  # another function: the same rule
        assert g(0.0) == 2.0 and n.get_value() == 3.0

    def test_explicit_update_wins(self, mode):
        x = tn.scalar("x")
        n, m = counter("n"), counter("m")
        f = tn.function([x], x + n + m, updates=[(n, n + 10)], mode=mode)
        f(0.0)
        assert (n.get_value(), m.get_value()) == (10.0, 1.0)

    def test_no_default_updates(self, mode):
        x = tn.scalar("x")
        n, m = counter("n"), counter("m")
        off = tn.function([x], x + n + m, no_default_updates=True, mode=mode)
        assert off(0.0) == 0.0 and off(0.0) == 0.0
        assert n.get_value() == 0.0 and m.get_value() == 0.0
        only_m = tn.function([x], x + n + m, no_default_updates=[n], mode=mode)
        only_m(0.0)
        assert n.get_value() == 0.0 and m.get_value() == 1.0
        with pytest.raises(TypeError, match="no_default_updates: expected a bool or a list"):
            tn.function([x], x + n, no_default_updates="n", mode=mode)

    def test_shared_variables_reached_through_updates(self, mode):
        # PyMC's pattern: a generator's default update reads another state.
        x = tn.scalar("x")
        step = counter("step")
        acc = tn.shared(np.float64(0.0), name="acc")
        acc.default_update = acc + step  # only this default update reads `step`
        explicit = tn.shared(np.float64(0.0), name="explicit")
        f = tn.function([x], x + acc, updates=[(explicit, explicit + step)], mode=mode)
        assert f(0.0) == 0.0
        assert (acc.get_value(), step.get_value(), explicit.get_value()) == (0.0, 1.0, 0.0)
        assert f(0.0) == 0.0
        assert (acc.get_value(), step.get_value(), explicit.get_value()) == (1.0, 2.0, 1.0)

    def test_not_applied_to_variables_not_read(self, mode):
        x = tn.scalar("x")
        n, unread = counter("n"), counter("unread")
        tn.function([x], x + n, mode=mode)(1.0)
        assert (n.get_value(), unread.get_value()) == (1.0, 0.0)

    def test_type_checked_like_an_explicit_update(self, mode):
        x = tn.scalar("x")
        w = tn.shared(np.zeros(3), name="w")
        w.default_update = w.astype("float32")
        with pytest.raises(TypeError, match="the default_update of w has type float32"):
            tn.function([x], x + w.sum(), mode=mode)
        w.default_update = w.sum(keepdims=True)
        with pytest.raises(TypeError, match="the default_update of w .* statically of length 1"):
            tn.function([x], x + w.sum(), mode=mode)


# -- 3. Function.copy ----------------------------------------------------------------


class TestCopy:
    @staticmethod
    def accumulate(mode):
        x = tn.vector("x")
        w = tn.shared(np.zeros(2), name="w")
        f = tn.function([x], Out(w * 2), updates=[(w, w * 2 + x)], mode=mode, name="acc")
        return f, x, w

    def test_copy_uses_the_same_shared_variables(self, mode):
        f, _, w = self.accumulate(mode)
        f.trust_input = True
        g = f.copy()
        assert g is not f and g.name == "acc copy" and g.trust_input
        assert f.copy(name="other").name == "other"
        np.testing.assert_array_equal(g(np.ones(2)), [0.0, 0.0])
        np.testing.assert_array_equal(w.get_value(), [1.0, 1.0])
        np.testing.assert_array_equal(f(np.ones(2)), [2.0, 2.0])
        np.testing.assert_array_equal(w.get_value(), [3.0, 3.0])
        h = copy.copy(f)  # PyTensor: copy.copy(f) is f.copy()
        np.testing.assert_array_equal(h(np.zeros(2)), [6.0, 6.0])
        np.testing.assert_array_equal(w.get_value(), [6.0, 6.0])

    def test_copies_have_their_own_storage(self, mode):
        x = tn.vector("x")
        f = tn.function([In(x, borrow=True)], Out(tn.exp(x) + 1, borrow=True), mode=mode)
        for share_memory in (False, True):
            g = f.copy(share_memory=share_memory)
            a = f(np.zeros(2))
            kept = a.copy()
            g(np.ones(2))
            np.testing.assert_array_equal(a, kept)  # g's call did not write f's result

    def test_swap(self, mode):
        f, _, w = self.accumulate(mode)
        w2 = tn.shared(np.full(2, 5.0), name="w2")
        g = f.copy(swap={w: w2})
        np.testing.assert_array_equal(g(np.ones(2)), [10.0, 10.0])
        np.testing.assert_array_equal(w2.get_value(), [11.0, 11.0])
        np.testing.assert_array_equal(w.get_value(), [0.0, 0.0])
        assert w2 in g.shared_vars and w not in g.shared_vars

    def test_swap_is_checked(self, mode):
        f, _, w = self.accumulate(mode)
        for other in (tn.shared(np.zeros(2, dtype="float32")), tn.shared(np.zeros((2, 2)))):
            with pytest.raises(TypeError, match="replacement must have the same type"):
                f.copy(swap={w: other})
        with pytest.raises(TypeError, match="every value of swap must be a shared variable"):
            f.copy(swap={w: tn.vector("v")})
        with pytest.raises(ValueError, match="does not use"):
            f.copy(swap={tn.shared(np.zeros(2), name="unused"): w})

    def test_delete_updates(self, mode):
        # The output and the update are one node, which the original computes
        # in place in w's buffer; the copy must not write w at all.
        w = tn.shared(np.ones(3), name="w")
        n = counter()
        f = tn.function([], w * 2 + n, updates=[(w, w * 2 + n)], mode=mode)
        g = f.copy(delete_updates=True)
        for _ in range(2):
            np.testing.assert_array_equal(g(), [2.0, 2.0, 2.0])
        np.testing.assert_array_equal(w.get_value(), [1.0, 1.0, 1.0])
        assert n.get_value() == 0.0  # default updates are deleted too
        np.testing.assert_array_equal(f(), [2.0, 2.0, 2.0])
        np.testing.assert_array_equal(w.get_value(), [2.0, 2.0, 2.0])
        assert n.get_value() == 1.0


# -- 5. trust_input= and dprint --------------------------------------------------------


class TestTrustInputAndDprint:
    def test_trust_input_keyword(self, mode):
        x = tn.vector("x")
        assert not tn.function([x], x * 2 + 1, mode=mode).trust_input
        f = tn.function([x], x * 2 + 1, mode=mode, trust_input=True)
        assert f.trust_input
        np.testing.assert_array_equal(f(np.arange(3.0)), [1.0, 3.0, 5.0])

    def test_dprint(self, mode, capsys):
        x = tn.vector("x")
        w = tn.shared(np.zeros(3), name="w")
        f = tn.function([x], x * 2 + 1, updates=[(w, w + x)], mode=mode)
        text = f.dprint(file="str")
        assert text == tn.debugprint(f, file="str") and "update of w" in text
        assert f.dprint() is None
        assert capsys.readouterr().out == text


# -- 6. refusals ------------------------------------------------------------------------


class TestSharedZeroAndVectorLength:
    def test_zero(self, mode):
        """PyTensor's SharedVariable.zero (its test_shared_variable tests):
        zeros of the same shape; borrow=True in the current storage, so an
        array borrowed from it sees them."""
        s = tn.shared(np.arange(3.0), name="s")
        f = tn.function([], s * 1, mode=mode)
        s.zero()
        np.testing.assert_array_equal(f(), np.zeros(3))
        s.set_value(np.arange(3.0))
        if s.runtime is None:         # host storage: borrowed arrays are the storage
            held = s.get_value(borrow=True)
            s.zero()
            np.testing.assert_array_equal(held, np.arange(3.0))     # a new array
            s.set_value(np.arange(3.0))
            held = s.get_value(borrow=True)
            s.zero(borrow=True)
            np.testing.assert_array_equal(held, np.zeros(3))        # in place
        else:
            s.zero(borrow=True)
        np.testing.assert_array_equal(f(), np.zeros(3))
        assert s.get_value().dtype == np.float64

    def test_get_vector_length(self):
        """PyTensor's test_get_vector_length: a shape vector's length is its
        array's ndim, a stack of scalars' their count, a constant's its own;
        a vector of unknown length and a matrix are refused."""
        x = tn.tensor("x", shape=(None, None, None))
        assert tn.get_vector_length(x.shape) == 3
        assert tn.get_vector_length(tn.stack_scalars([x.shape[0], 3])) == 2
        assert tn.get_vector_length(tn.constant(np.arange(5))) == 5
        assert tn.get_vector_length([1, 2]) == 2
        with pytest.raises(ValueError, match="length of v .* is known only when the function"):
            tn.get_vector_length(tn.vector("v"))
        with pytest.raises(TypeError, match="expected a vector, got m"):
            tn.get_vector_length(tn.matrix("m"))


class TestInStrictAndAllowDowncast:
    def test_strict_refuses_every_conversion(self, mode):
        """PyTensor's In(strict=True) (its test_in_strict): an argument of
        exactly the input's dtype, or nothing -- not a list, not a Python
        number, not even a safe cast; other inputs convert as before."""
        x, y = tn.vector("x", dtype="float32"), tn.vector("y")
        f = tn.function([In(x, strict=True), y], x.sum() + y.sum(), mode=mode)
        assert f(np.ones(2, "float32"), [1.0, 2.0]) == 5.0
        for g in (f, pickle.loads(pickle.dumps(f))):
            for bad in ([1.0, 2.0], np.ones(2, "int8"), np.ones(2)):
                with pytest.raises(TypeError, match=r"input 'x'.*\(strict input\)"):
                    g(bad, [1.0, 2.0])
        with pytest.raises(ValueError, match="strict=True refuses every cast"):
            In(x, strict=True, allow_downcast=True)

    def test_allow_downcast_per_input(self, mode):
        """PyTensor's In(allow_downcast=...) (its test_allow_downcast): the
        input's own answer overrides the function's allow_input_downcast."""
        x, y = tn.vector("x", dtype="float32"), tn.vector("y", dtype="float32")
        f = tn.function([In(x, allow_downcast=True), y], x + y, mode=mode)
        np.testing.assert_array_equal(f(np.ones(2), np.ones(2, "float32")), [2.0, 2.0])
        with pytest.raises(TypeError, match="input 'y': expected dtype float32, got float64.*"
                                            "pass allow_input_downcast=True"):
            f(np.ones(2), np.ones(2))
        g = tn.function([In(x, allow_downcast=False), y], x + y, allow_input_downcast=True,
                        mode=mode)
        np.testing.assert_array_equal(g(np.ones(2, "float32"), np.ones(2)), [2.0, 2.0])
        with pytest.raises(TypeError, match="input 'x': expected dtype float32, got float64.*"
                                            "drop allow_downcast=False from its In"):
            g(np.ones(2), np.ones(2))
        with pytest.raises(TypeError, match="allow_downcast must be None, True or False"):
            In(x, allow_downcast="yes")

    @pytest.mark.parametrize("floatx", ["float64", "float32"])
    def test_python_floats_for_float32_inputs(self, mode, floatx):
        """PyTensor's rule for Python floats (its test_pfunc.py
        test_allow_downcast_floatX): a float that float32 holds exactly is
        taken; one it does not, only with allow_downcast=True -- or, when no
        one said (None), into a floatX input."""
        a, b, c = (tn.scalar(name, dtype="float32") for name in "abc")
        with tn.config.change_flags(floatX=floatx):
            f = tn.function([In(a, allow_downcast=True), In(b, allow_downcast=False),
                             In(c, allow_downcast=None)], a + b + c, mode=mode)
            assert to_host(f(0.5, 0.25, 0)) == 0.75        # exact: taken everywhere
            assert to_host(f(0.1, 0, 0)) == np.float32(0.1)
            with pytest.raises(TypeError, match=r"input 'b': 0.1 cannot be stored exactly as "
                                                r"float32 \(0.1 would be 0.10000000149011612\)"):
                f(0, 0.1, 0)
            if floatx == "float32":
                assert to_host(f(0, 0, 0.1)) == np.float32(0.1)
                v = tn.vector("v", dtype="float32")      # a list is not a lone float
                with pytest.raises(TypeError, match="input 'v': \\[0.1\\] cannot be stored"):
                    tn.function([v], v * 1, mode=mode)([0.1])
            else:
                with pytest.raises(TypeError, match="input 'c': 0.1 cannot be stored exactly.*"
                                                    "pass allow_input_downcast=True"):
                    f(0, 0, 0.1)
            g = tn.function([c], c * 2, allow_input_downcast=True, mode=mode)
            assert to_host(g(0.1)) == np.float32(0.2)

    def test_python_ints_for_small_int_inputs(self, mode):
        """PyTensor's rule for Python ints (its test_pfunc.py
        test_allow_input_downcast_int): in range they are taken; out of
        range they are refused unless allow_input_downcast=True, which wraps
        them as NumPy's cast of an array does.  The error is the TypeError
        PyTensor's test expects, and NumPy 2's OverflowError too."""
        b, c = tn.vector("b", dtype="int8"), tn.scalar("c", dtype="int8")
        f = tn.function([b, c], b + c, mode=mode)
        np.testing.assert_array_equal(to_host(f([6], 1)), [7])
        for args, name in ((([312], 1), "b"), (([6], 806), "c")):
            for error in (TypeError, OverflowError):
                with pytest.raises(error, match=f"input '{name}': .* does not fit in int8"):
                    f(*args)
        assert to_host(f([6], 2.0)) == 8              # a whole float: nothing lost
        with pytest.raises(TypeError, match=r"input 'c': 2.5 cannot be stored exactly"):
            f([6], 2.5)
        g = tn.function([b, c], b + c, allow_input_downcast=True, mode=mode)
        np.testing.assert_array_equal(to_host(g([312], 1)), [57])   # 312 wraps to 56


class TestStatefulInputs:
    """``In(x, value=, update=, implicit=)``: Theano's stateful inputs, and
    ``f[name]`` / ``f.value[name]`` (PyTensor's test_function_module
    test_state_access, test_shared_state0 and test_copy_share_memory's
    state, test_pickle's values)."""

    def accumulator(self, mode, **in_kwargs):
        """``f(a) = 2 x``, then ``x += a``: x starts at 1."""
        x, a = tn.scalar("x"), tn.scalar("a")
        return tn.function([a, In(x, value=1.0, update=x + a, **in_kwargs)], x * 2, mode=mode)

    def test_the_value_is_kept_and_updated_after_each_call(self, mode):
        f = self.accumulator(mode)
        assert f(1.0) == 2.0 and f["x"] == 2.0     # read before, updated after
        assert f(2.0) == 4.0 and f.value["x"] == 4.0
        assert f(0.5, 10.0) == 20.0                # a value passed sets it first ...
        assert f["x"] == 10.5                      # ... and the update follows

    def test_setting_the_value(self, mode):
        f = self.accumulator(mode)
        f["x"] = 7                                 # through the gate: a float64 0-d array
        assert f["x"].dtype == np.float64
        assert f(1.0) == 14.0 and f["x"] == 8.0
        f.value["x"] = 0.0
        assert f(3.0) == 0.0 and f["x"] == 3.0
        with pytest.raises(TypeError):
            f["x"] = np.zeros(3)                   # the input's type holds
        with pytest.raises(TypeError):
            f["x"] = None                          # not "back to In(value=)"
        assert f["x"] == 3.0 and "'x'" in repr(f.value)

    def test_an_update_of_a_vector_reading_another_input(self, mode):
        v, step = tn.vector("v"), tn.vector("step")
        f = tn.function([step, In(v, value=np.zeros(3), update=v + step)], v.sum(), mode=mode)
        for k in range(1, 4):
            f(np.arange(3.0))
            # (on the cuda linker the value stays on the device)
            np.testing.assert_array_equal(to_host(f["v"]), k * np.arange(3.0))

    def test_with_shared_updates_in_the_same_call(self, mode):
        n = tn.shared(np.float64(0.0), name="n")
        x = tn.scalar("x")
        f = tn.function([In(x, value=1.0, update=x * 2)], x + n, updates=[(n, n + x)],
                        mode=mode)
        assert [f(), f(), f()] == [1.0, 3.0, 7.0]  # both read the values before the call
        assert f["x"] == 8.0 and n.get_value() == 7.0

    def test_implicit_inputs_take_no_argument(self, mode):
        s, a = tn.scalar("s"), tn.scalar("a")
        f = tn.function([In(s, value=0.0, update=s + 1, implicit=True), a], s + a, mode=mode)
        assert [f(10.0), f(a=10.0), f(10.0)] == [10.0, 11.0, 12.0]
        with pytest.raises(TypeError, match=r"takes 1 argument\(s\) \(a\), got 2"):
            f(1.0, 2.0)
        with pytest.raises(TypeError, match="'s' is implicit"):
            f(a=1.0, s=2.0)
        f["s"] = 100.0
        assert f(1.0) == 101.0

    def test_plain_values_are_settable_too(self, mode):
        x, y = tn.scalar("x"), tn.scalar("y")
        f = tn.function([x, In(y, value=2.0)], x * y, mode=mode)
        f["y"] = 5.0
        assert f(3.0) == 15.0 and f(3.0, 1.0) == 3.0 and f["y"] == 5.0
        with pytest.raises(KeyError, match="'x' has no value of its own"):
            f["x"]
        with pytest.raises(KeyError, match="no input 'z'"):
            f["z"] = 1.0

    def test_copies_and_pickles_keep_the_values_now(self, mode):
        f = self.accumulator(mode)
        f(3.0)
        g, h = f.copy(), pickle.loads(pickle.dumps(f))
        assert g["x"] == h["x"] == 4.0
        g(1.0)
        assert g["x"] == 5.0 and f["x"] == 4.0 and h["x"] == 4.0   # their own values

    def test_refusals(self):
        x = tn.scalar("x")
        # PyTensor's test_in_update_wrong_dtype: a wrong update type at In()
        with pytest.raises(TypeError, match=r"In\(x, update=\): the new value of x has type "
                                            r"float64\(\?,\)"):
            In(x, value=1.0, update=tn.vector("v"))
        # a missing value= at function(), after the shared-input refusal (its
        # test_in_shared_variable: In(shared, update=...) builds, function() refuses)
        spec = In(x, update=x + 1)
        with pytest.raises(ValueError, match=r"inputs\[0\]: In\(x, update=\) makes a stateful "
                                             r"input, which needs value= to start from"):
            tn.function([spec], x)
        # ... and after a missing input (its test_missing_inputs)
        with pytest.raises(tn.MissingInputError, match="s .* is needed"):
            tn.function([In(x, update=tn.scalar("s") + x)], x)
        w = tn.shared(1.0, name="w")
        with pytest.raises(TypeError, match=r"^Cannot use a shared variable \(w\) as explicit "
                                            r"input \(inputs\[0\]\)"):
            tn.function([In(w, update=w + 1)])
        with pytest.raises(ValueError, match="implicit=True .* needs value="):
            In(x, implicit=True)
        assert "update=" in repr(In(x, value=1.0, update=x + 1, implicit=True))


class TestSharedContainers:
    """``f.container[x]`` and ``In(y, value=cell)``: two functions sharing a
    value (PyTensor's test_types.py test_shared_state0/1/2,
    test_shared_state_not_implicit and test_deepcopy_shared_container)."""

    def pair(self, mode, g_update=True, **g_kwargs):
        """f: s += a x after each call; g: s -= a x (or no update), on f's s."""
        a, x, s = tn.scalar("a"), tn.scalar("x"), tn.scalar("s")
        f = tn.function([x, In(a, value=1.0), In(s, value=0.0, update=s + a * x)],
                        s + a * x, mode=mode)
        g = tn.function([x, In(a, value=1.0),
                         In(s, value=f.container[s], update=s - a * x if g_update else None,
                            **g_kwargs)], s + a * x, mode=mode)
        return f, g, s

    def test_an_update_in_one_is_the_value_in_the_other(self, mode):
        f, g, s = self.pair(mode)
        assert to_host(f(1, 2)) == 2.0 and f[s] == 2.0 and g[s] == 2.0
        assert to_host(g(1, 2)) == 4.0 and f[s] == 0.0 and g[s] == 0.0
        f, g, s = self.pair(mode, g_update=False)
        f(1, 2)
        f(1, 2)
        assert to_host(g(1, 2)) == 6.0          # reads f's value, has no update
        assert f[s] == 4.0 and g[s] == 4.0

    def test_a_taken_cell_is_implicit_unless_said(self, mode):
        x, s = tn.scalar("x"), tn.scalar("s")
        inc = tn.function([x, In(s, update=s + x, value=10.0)], [], mode=mode)
        dec = tn.function([x, In(s, update=s - x, value=inc.container[s], implicit=False)],
                          [], mode=mode)
        assert dec[s] is inc[s] and dec.container["s"] is inc.container[s]
        inc[s] = 2
        assert dec[s] == 2
        dec(1)
        assert inc[s] == 1
        dec(1, 0)                                # passing s sets it first, then the update
        assert inc[s] == -1 and dec[s] == -1
        g = tn.function([x, In(s, value=inc.container[s])], x + s, mode=mode)
        with pytest.raises(TypeError, match="got 2"):
            g(1.0, 5.0)                          # implicit by default: one argument
        assert to_host(g(1.0)) == 0.0

    def test_a_call_holds_the_cells_it_shares(self, mode):
        """Either function's call holds the shared cell's lock for the whole
        call, as a call holds a shared variable's: while another thread holds
        it, a call waits (an update read before and written after another
        function's would be lost)."""
        x, s = tn.scalar("x"), tn.scalar("s")
        inc = tn.function([x, In(s, update=s + x, value=0.0)], [], mode=mode)
        dec = tn.function([x, In(s, update=s - x, value=inc.container[s])], [], mode=mode)
        for f, step in ((dec, -1.0), (inc, 1.0)):
            before = float(to_host(inc[s]))
            done = threading.Event()
            worker = threading.Thread(target=lambda: (f(1.0), done.set()))
            with inc.container[s].lock:
                worker.start()
                assert not done.wait(0.3)      # the call waits for the cell
            worker.join(10)
            assert done.is_set() and float(to_host(inc[s])) == before + step

    def test_deep_copies_and_pickles_keep_the_sharing(self, mode):
        a, x = tn.scalar("a"), tn.scalar("x")
        h = tn.function([In(a, value=0.0)], a, mode=mode)
        f = tn.function([x, In(a, value=h.container[a], implicit=True)], x + a, mode=mode)
        memo = {}
        ac = copy.deepcopy(a, memo)
        hc = copy.deepcopy(h, memo)
        fc = copy.deepcopy(f, memo)
        h[a] = 1
        hc[ac] = 2
        assert f[a] == 1 and fc[ac] == 2
        h2, f2 = pickle.loads(pickle.dumps((h, f)))
        h2["a"] = 5.0
        assert to_host(f2(1.0)) == 6.0 and to_host(f(1.0)) == 2.0

    def test_the_keys_and_refusals(self, mode):
        x, y = tn.scalar("x"), tn.scalar("y")
        w = tn.shared(np.float64(3.0), name="w")
        spec = In(y, value=2.0)
        f = tn.function([x, spec], x * y + w, mode=mode)
        cell = f.container[y]
        assert f.container["y"] is cell and f.container[spec] is cell
        assert f.container[w] is w.container
        with pytest.raises(KeyError, match="'x' has no value of its own"):
            f.container[x]
        v = tn.vector("v")
        with pytest.raises(TypeError, match=r"value of input v \(In\(value=\) a container\): "
                                            r"expected 1 dimension"):
            tn.function([In(v, value=cell)], v * 2, mode=mode)
        h = tn.scalar("h", dtype="float32")
        cell32 = tn.function([In(h, value=1.0)], h, mode=mode).container[h]
        with pytest.raises(TypeError, match=r"value of input x \(In\(value=\) a container\): "
                                            r"expected dtype float64, got float32.*the "
                                            r"functions sharing a container need one type"):
            tn.function([In(x, value=cell32)], x * 2, mode=mode)   # even a safe cast


class TestDictOutputs:
    """``function(outputs={key: variable})`` returns a dict (PyTensor's
    test_types.py test_output_dictionary, test_input_named_variables,
    test_output_order_sorted, test_composing_function,
    test_key_string_requirement and test_output_keys)."""

    def test_a_dict_in_a_dict_out(self, mode):
        x, y = tn.scalar("x"), tn.scalar("y")
        f = tn.function([x, y], outputs={"b": x * y, "a": x + y, "1": x - y}, mode=mode)
        assert f(2, 4) == {"1": -2.0, "a": 6.0, "b": 8.0}
        assert f(2, y=4) == f(x=2, y=4) == f(2, 4)
        assert [str(o.variable) for o in f.outputs] == [str(x - y), str(x + y), str(x * y)]
        a, b = tn.scalar("a"), tn.scalar("b")
        f = tn.function([x, y], outputs={"a": x + y, "b": x * y}, mode=mode)
        g = tn.function([a, b], [a + b, a * b], mode=mode)
        assert [float(r) for r in g(**f(5, 7))] == [47.0, 420.0]   # composes by the names

    def test_copies_and_pickles_return_dicts(self, mode):
        v = tn.vector("v")
        f = tn.function([v], {"vec": v ** 2, "sum": Out(v.sum(), borrow=True)}, mode=mode)
        for g in (f, copy.deepcopy(f), pickle.loads(pickle.dumps(f)), f.copy()):
            out = g([2.0, 3.0, 4.0])
            assert sorted(out) == ["sum", "vec"]
            np.testing.assert_array_equal(to_host(out["vec"]), [4.0, 9.0, 16.0])
            assert to_host(out["sum"]) == 9.0

    def test_keys_must_be_strings(self, mode):
        x = tn.scalar("x")
        for outputs in ({1.0: x}, {1.0: x, "a": x ** 2}, {(1, "b"): x, 1.0: x ** 2}):
            for error in (TypeError, AssertionError, tn.OutputKeyError):
                with pytest.raises(error, match="the keys of a dict of outputs must be "
                                                "strings"):
                    tn.function([x], outputs=outputs, mode=mode)


class TestGenericShared:
    def test_functions_refuse_them(self, mode):
        """A generic shared variable holds an object no op computes on: a
        function reading or updating one is refused when it is compiled,
        naming it (PyTensor's test_pfunc generic-shared cases compute
        nothing on them either).  (Its own behaviour: tests/symbolic/test_shared.py.)"""
        held = tn.shared(["a"], name="held")
        with pytest.raises(TypeError, match="held is a generic shared variable .* functions "
                                            "compute on tensors only"):
            tn.function([], held, mode=mode)
        with pytest.raises(TypeError, match="held is a generic shared variable"):
            tn.function([], [], updates=[(held, held)], mode=mode)
        assert held.get_value() == ["a"]


class TestRebuildStrict:
    def test_givens_of_another_type(self, mode):
        """PyTensor's test_rebuild_strict: with rebuild_strict=True a value of
        givens has the type of what it replaces; with False the graph is
        rebuilt through it (here float32 throughout), in copies and pickles
        too, and an update must still have its variable's type."""
        x, y = tn.vector("x"), tn.vector("y", dtype="float32")
        with pytest.raises(TypeError, match="pass rebuild_strict=False"):
            tn.function([y], x * 2, givens={x: y}, mode=mode)
        f = tn.function([y], x * 2, givens={x: y}, rebuild_strict=False, mode=mode)
        for g in (f, f.copy(), pickle.loads(pickle.dumps(f))):
            got = g(np.ones(2, "float32"))
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, [2.0, 2.0])
        s = tn.shared(np.zeros(2), name="s")
        step = tn.function([y], [], updates=[(s, s + x)], givens={x: y}, rebuild_strict=False,
                           mode=mode)
        step(np.ones(2, "float32"))
        np.testing.assert_array_equal(s.get_value(), [1.0, 1.0])
        i = tn.vector("i", dtype="int64")
        with pytest.raises(TypeError, match="after givens, the new value of s has type int64"):
            tn.function([i], [], updates=[(s, x)], givens={x: i}, rebuild_strict=False,
                        mode=mode)
        with pytest.raises(TypeError, match="rebuild_strict must be True or False"):
            tn.function([y], x * 2, givens={x: y}, rebuild_strict="no", mode=mode)


class TestFunctionName:
    def test_a_function_is_named_where_it_was_compiled(self, mode):
        """PyTensor's test_function_name: without name=, ``f.name`` is the
        file and line that compiled it; reports and errors still name a
        function only by a name given (its given_name)."""
        x = tn.vector("x")
        line = sys._getframe().f_lineno + 1
        f = tn.function([x], x + 1.0, mode=mode)
        assert f.name == f"{__file__}:{line}" and f.given_name is None
        assert repr(f).startswith("<Function (x)")
        with pytest.raises(TypeError, match=r"^function takes 1 argument"):
            f(1, 2)
        g = tn.function([x], x + 1.0, mode=mode, name="step")
        assert g.name == g.given_name == "step" and g.copy().name == "step copy"
        for h in (f.copy(), pickle.loads(pickle.dumps(f))):
            assert h.name == f.name and h.given_name is None
        assert x.sum().eval({x: np.ones(2)}) == 2.0   # eval compiles too (named here)


class TestFunctionDump:
    def test_the_arguments_compile_again_from_the_file(self, mode, tmp_path):
        """PyTensor's test_function_dump: function_dump pickles a call's
        arguments; function(**loaded) compiles the same function, with the
        shared variables' values and the updates."""
        v = tn.vector("v")
        w = tn.shared(np.arange(3.0), name="w")
        path = tmp_path / "dump.pkl"
        tn.function_dump(path, [v], v + w, updates=[(w, w * 2)], mode=mode, name="step")
        with open(path, "rb") as file:
            loaded = pickle.load(file)
        assert loaded["name"] == "step" and loaded["mode"].linker == mode.linker
        f = tn.function(**loaded)
        np.testing.assert_array_equal(to_host(f([1.0, 1.0, 1.0])), [1.0, 2.0, 3.0])
        np.testing.assert_array_equal(to_host(f([1.0, 1.0, 1.0])), [1.0, 3.0, 5.0])
        assert f.name == "step"
        np.testing.assert_array_equal(w.get_value(), np.arange(3.0))   # the original's own


class TestRefusals:
    def test_the_error_classes_pytensor_users_catch(self, mode):
        """PyTensor's test_missing_inputs, test_givens_input_var and
        test_duplicate_inputs: MissingInputError, RuntimeError for givens
        on an input, UnusedInputError; each is also the ValueError tenure
        raised before."""
        x, y = tn.vector("x"), tn.vector("y")
        with pytest.raises(tn.MissingInputError, match="y .* is needed") as missing:
            tn.function([x], x + y, mode=mode)
        assert isinstance(missing.value, ValueError)
        for caught in (RuntimeError, ValueError, tn.ReplacedInputError):
            with pytest.raises(caught, match="givens: x is an input of the function"):
                tn.function([x], x * 2, givens={x: y}, mode=mode)
        with pytest.raises(tn.UnusedInputError) as unused:
            tn.function([x, x], x * 2, mode=mode)
        assert isinstance(unused.value, ValueError)
        # an unused input is named before a missing one (its test_missing_inputs)
        with pytest.raises(tn.UnusedInputError, match="input x .* is not used"):
            tn.function([x], [y * 2], mode=mode)
        with pytest.raises(tn.MissingInputError, match="y .* is needed"):
            tn.function([x], [y * 2], mode=mode, on_unused_input="ignore")

    def test_unordered_inputs(self, mode):
        x, y = tn.scalar("x"), tn.scalar("y")
        for inputs in ({x, y}, frozenset([x]), {x: 1}, (v for v in [x])):
            with pytest.raises(TypeError, match="inputs must be a list or a tuple .* got a"):
                tn.function(inputs, x + y, mode=mode)

    def test_input_name_must_be_a_string(self, mode):
        x = tn.scalar("x")
        for name in (3, b"x", x):
            with pytest.raises(TypeError, match=r"In\(x\): name must be a string"):
                In(x, name=name)

    def test_updates_as_a_set(self, mode):
        w = tn.shared(np.zeros(2), name="w")
        with pytest.raises(TypeError, match="updates: expected a list .* got a set"):
            tn.function([], [], updates={(w, w + 1)}, mode=mode)

    def test_an_update_pair_as_a_set(self, mode):
        """PyTensor's test_pfunc.py test_errors: a pair written as a set
        ({w, x}) has no order, so it is refused whatever order it iterates in."""
        a = tn.scalar("a", dtype="int64")
        w = tn.shared(1, name="w")
        for pair in ({w, a}, frozenset([w, a]), {w: a}):
            with pytest.raises(TypeError, match=r"updates: expected \(shared variable, "
                                                r"expression\) pairs, got a .*no order"):
                tn.function([a], a + w, updates=[pair], mode=mode)

    def test_update_of_static_length_one_for_a_variable_of_any_length(self, mode):
        w = tn.shared(np.zeros((2, 2)), name="w")
        x1 = tn.matrix("x1", shape=(1, 1))
        for expr in (x1, w.sum(keepdims=True), w.sum(axis=0, keepdims=True)):
            with pytest.raises(TypeError, match=r"new value of w has type float64\(1, .*"
                                                r"statically of length 1 in axis 0.*"
                                                r"shared\(value, shape=...\).*broadcast_to"):
                tn.function([x1], [], updates=[(w, expr)], mode=mode,
                            on_unused_input="ignore")
        # What the message suggests works, and other static lengths are accepted.
        one = tn.shared(np.zeros((1, 1)), shape=(1, 1), name="one")
        x3 = tn.matrix("x3", shape=(3, 3))
        f = tn.function([x1, x3], [], mode=mode,
                        updates=[(one, x1), (w, x3), (tn.shared(np.zeros((2, 2))),
                                                      tn.broadcast_to(x1, w.shape))])
        f(np.ones((1, 1)), np.ones((3, 3)))
        assert one.get_value().shape == (1, 1) and w.get_value().shape == (3, 3)
