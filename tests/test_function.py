"""``tn.function``: calling conventions, defaults, updates, givens and every error."""

import warnings

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out


class TestCalling:
    def test_positional_and_keyword(self, mode):
        x, y = tn.vector("x"), tn.vector("y")
        f = tn.function([x, y], x - y, mode=mode)
        np.testing.assert_array_equal(f([3.0], [1.0]), [2.0])
        np.testing.assert_array_equal(f(y=[1.0], x=[3.0]), [2.0])
        np.testing.assert_array_equal(f([3.0], y=[1.0]), [2.0])

    def test_in_name_overrides_variable_name(self, mode):
        x = tn.scalar("x")
        f = tn.function([In(x, name="value")], x * 2, mode=mode)
        assert f(value=2.0) == 4.0
        with pytest.raises(TypeError, match="unexpected keyword argument 'x'"):
            f(x=2.0)

    def test_defaults(self, mode):
        x, y = tn.scalar("x"), tn.scalar("y")
        f = tn.function([x, In(y, value=10.0)], x + y, mode=mode)
        assert f(1.0) == 11.0
        assert f(1.0, 2.0) == 3.0
        assert f(1.0, y=5.0) == 6.0

    def test_single_list_and_no_outputs(self, mode):
        x = tn.scalar("x")
        assert isinstance(tn.function([x], x * 2, mode=mode)(1.0), np.ndarray)
        assert tn.function([x], [x * 2], mode=mode)(1.0) == [2.0]
        assert tn.function([x], Out(x * 2), mode=mode)(1.0) == 2.0
        w = tn.shared(np.float64(0.0), name="w")
        assert tn.function([x], None, updates=[(w, x)], mode=mode)(3.0) == []
        assert float(w.get_value()) == 3.0

    def test_outputs_are_arrays_of_the_declared_type(self, mode):
        x = tn.vector("x", dtype="float32")
        f = tn.function([x], [x.sum(), x * 2, x > 0], mode=mode)
        for result, var in zip(f([1.0, 2.0]), [x.sum(), x * 2, x > 0]):
            assert isinstance(result, np.ndarray)
            assert result.dtype == var.dtype and result.ndim == var.ndim

    def test_python_values_are_converted(self, mode):
        x = tn.matrix("x")
        f = tn.function([x], x.sum(), mode=mode)
        assert f([[1, 2], [3, 4]]) == 10.0

    def test_allow_input_downcast(self, mode):
        x = tn.vector("x", dtype="float32")
        f = tn.function([x], x * 1, mode=mode)
        with pytest.raises(TypeError, match="input 'x'.*expected dtype float32, got float64"):
            f(np.ones(2))
        g = tn.function([x], x * 1, mode=mode, allow_input_downcast=True)
        assert g(np.ones(2)).dtype == np.float32

    def test_allow_input_downcast_casts_python_numbers_as_arrays(self, mode):
        # The same values give the same result as a Python int, a list or an
        # ndarray: NumPy's C cast (wrap), as PyTensor's np.asarray(...) of an array.
        s = tn.scalar("s", dtype="int8")
        v = tn.vector("v", dtype="uint8")
        h = tn.vector("h", dtype="float32")
        outputs = [s * 1, v * 1, h * 1]
        f = tn.function([s, v, h], outputs, mode=mode, allow_input_downcast=True)
        as_arrays = f(np.array(300), np.array([300, -1, 7]), np.array([0.1, 2.5]))
        as_python = f(300, [300, -1, 7], [0.1, 2.5])
        for a, p, want in zip(as_arrays, as_python, [44, [44, 255, 7], [0.1, 2.5]]):
            assert a.dtype == p.dtype
            np.testing.assert_array_equal(a, p)
            np.testing.assert_array_equal(a, np.asarray(want).astype(a.dtype))
        wrapped, floored, _ = f(-129, [1.9, 3.2], [1])
        assert wrapped == 127
        np.testing.assert_array_equal(floored, [1, 3])
        with pytest.raises(ValueError, match="input 's': .* does not fit in int8"):
            f(2**70, [1], [1.0])  # no NumPy integer holds it: nothing to cast
        # without allow_input_downcast both are refused, as before
        g = tn.function([s, v, h], outputs, mode=mode)
        with pytest.raises(ValueError, match="input 's': 300 does not fit in int8"):
            g(300, [1], [1.0])
        with pytest.raises(ValueError, match="input 'v': .* does not fit in uint8"):
            g(1, [300], [1.0])
        with pytest.raises(TypeError, match="input 's': expected dtype int8, got int64"):
            g(np.array(300), [1], [1.0])

    def test_trust_input_skips_the_gate(self, mode):
        x = tn.vector("x")
        f = tn.function([x], x * 2, mode=mode)
        f.trust_input = True
        np.testing.assert_array_equal(f(np.ones(2)), [2.0, 2.0])

    def test_intermediate_variables_as_inputs(self, mode):
        x = tn.vector("x")
        y = tn.exp(x)
        z = y + 1
        f = tn.function([y], z, mode=mode)  # the graph is cut at y
        np.testing.assert_array_equal(f([1.0, 2.0]), [2.0, 3.0])

    def test_fgraph_exposes_memory_declarations(self, mode):
        x = tn.matrix("x")
        f = tn.function([x], x.T + 1, mode=mode)
        view_nodes = [n for n in f.fgraph.apply_nodes if n.op.view_map]
        assert len(view_nodes) == 1 and view_nodes[0].op.view_map == {0: [0]}
        assert all(n.op.destroy_map == {} for n in f.fgraph.apply_nodes)

    def test_the_user_graph_is_not_modified(self, mode):
        x = tn.vector("x")
        y = tn.exp(x) + 1
        f = tn.function([x], y, mode=mode)
        assert x not in f.fgraph.inputs and y not in f.fgraph.outputs
        assert y.owner.inputs[0].owner.inputs[0] is x

    def test_runtime_errors_name_the_node(self, mode):
        x, y = tn.vector("x"), tn.vector("y")
        f = tn.function([x, y], x + y, mode=mode)
        with pytest.raises(ValueError) as info:
            f(np.ones(2), np.ones(3))
        assert "add" in "".join(getattr(info.value, "__notes__", []))

    def test_failed_call_leaves_function_usable(self, mode):
        x, y = tn.vector("x"), tn.vector("y")
        f = tn.function([x, y], Out(x + y, borrow=True), mode=mode)
        with pytest.raises(ValueError):
            f(np.ones(2), np.ones(3))
        np.testing.assert_array_equal(f(np.ones(2), np.ones(2)), [2.0, 2.0])


class TestUpdatesAndGivens:
    def test_counter(self, mode):
        count = tn.shared(np.int64(0), name="count")
        step = tn.function([], count, updates=[(count, count + 1)], mode=mode)
        assert [int(step()) for _ in range(3)] == [0, 1, 2]
        assert int(count.get_value()) == 3

    def test_updates_as_dict(self, mode):
        w = tn.shared(np.zeros(2), name="w")
        tn.function([], [], updates={w: w + 2}, mode=mode)()
        np.testing.assert_array_equal(w.get_value(), [2.0, 2.0])

    def test_update_with_python_scalar(self, mode):
        s = tn.shared(np.float64(1.0), name="s")
        tn.function([], [], updates=[(s, 5.0)], mode=mode)()
        assert float(s.get_value()) == 5.0

    def test_shared_variable_used_by_two_functions(self, mode):
        w = tn.shared(np.zeros(2), name="w")
        inc = tn.function([], [], updates=[(w, w + 1)], mode=mode)
        read = tn.function([], w.sum(), mode=mode)
        inc()
        inc()
        assert read() == 4.0

    def test_givens(self, mode):
        x, y = tn.scalar("x"), tn.scalar("y")
        z = x * 10 + y
        f = tn.function([x], z, givens={y: x + 1}, mode=mode)
        assert f(2.0) == 23.0

    def test_givens_replacing_a_shared_variable(self, mode):
        w = tn.shared(np.float64(5.0), name="w")
        x = tn.scalar("x")
        f = tn.function([x], w * 2, givens=[(w, x)], mode=mode)
        assert f(3.0) == 6.0

    def test_givens_with_constant_values(self, mode):
        x, y = tn.scalar("x"), tn.scalar("y")
        f = tn.function([x], x + y, givens={y: 4.0}, mode=mode)
        assert f(1.0) == 5.0


class TestErrors:
    def test_wrong_argument_count_lists_expected_names(self, mode):
        x, y = tn.scalar("x"), tn.scalar("y")
        f = tn.function([x, y], x + y, mode=mode)
        with pytest.raises(TypeError, match=r"takes 2 argument\(s\) \(x, y\), got 3"):
            f(1.0, 2.0, 3.0)
        with pytest.raises(TypeError, match=r"missing a value for input 'y'; expected \(x, y\)"):
            f(1.0)

    def test_unknown_keyword(self, mode):
        x = tn.scalar("x")
        f = tn.function([x], x * 1, mode=mode)
        with pytest.raises(TypeError, match=r"unexpected keyword argument 'z'; expected \(x\)"):
            f(z=1.0)

    def test_value_given_twice(self, mode):
        x = tn.scalar("x")
        f = tn.function([x], x * 1, mode=mode)
        with pytest.raises(TypeError, match="several values for input 'x'"):
            f(1.0, x=2.0)

    def test_ambiguous_keyword(self, mode):
        a, b = tn.scalar("v"), tn.scalar("v")
        f = tn.function([a, b], a - b, mode=mode)
        assert f(3.0, 1.0) == 2.0
        with pytest.raises(TypeError, match="several inputs are named 'v'"):
            f(v=1.0)

    def test_wrong_input_values(self, mode):
        x = tn.matrix("x")
        f = tn.function([x], x * 1, mode=mode)
        with pytest.raises(TypeError, match="input 'x': expected 2 dimension"):
            f(np.ones(3))
        with pytest.raises(TypeError, match="input 'x'"):
            f("not numbers")
        y = tn.matrix("y", shape=(None, 3))
        g = tn.function([y], y * 1, mode=mode)
        with pytest.raises(ValueError, match=r"input 'y': expected static shape \(\?, 3\)"):
            g(np.ones((2, 4)))

    def test_unused_input(self, mode):
        x, y = tn.scalar("x"), tn.scalar("y")
        with pytest.raises(tn.UnusedInputError, match="input y .*not used"):
            tn.function([x, y], x * 2, mode=mode)
        with pytest.warns(UserWarning, match="input y"):
            tn.function([x, y], x * 2, mode=mode, on_unused_input="warn")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            f = tn.function([x, y], x * 2, mode=mode, on_unused_input="ignore")
        assert f(1.0, 5.0) == 2.0
        with pytest.raises(ValueError, match="on_unused_input: expected"):
            tn.function([x], x, mode=mode, on_unused_input="sometimes")

    def test_update_of_a_non_shared_variable(self, mode):
        x = tn.vector("x")
        with pytest.raises(TypeError, match="x is not a shared variable"):
            tn.function([x], [], updates=[(x, x + 1)], mode=mode)

    def test_update_of_the_wrong_type(self, mode):
        w = tn.shared(np.zeros(3, dtype="float32"), name="w")
        with pytest.raises(TypeError, match=r"new value of w has type float64\(3,\), but w "
                                            r"has type float32\(\?,\)"):
            tn.function([], [], updates=[(w, w + np.ones(3))], mode=mode)
        with pytest.raises(TypeError, match="new value of w"):
            tn.function([], [], updates=[(w, w.sum())], mode=mode)

    def test_update_twice(self, mode):
        w = tn.shared(np.zeros(3), name="w")
        with pytest.raises(ValueError, match="w is updated twice"):
            tn.function([], [], updates=[(w, w + 1), (w, w + 2)], mode=mode)

    def test_malformed_updates(self, mode):
        w = tn.shared(np.zeros(3), name="w")
        with pytest.raises(TypeError, match="pairs"):
            tn.function([], [], updates=[w], mode=mode)

    def test_givens_replacing_an_input(self, mode):
        x = tn.scalar("x")
        with pytest.raises(ValueError, match="givens: x is an input of the function"):
            tn.function([x], x * 2, givens={x: tn.constant(1.0)}, mode=mode)

    def test_givens_of_the_wrong_type(self, mode):
        x, y = tn.scalar("x"), tn.vector("y")
        with pytest.raises(TypeError, match="cannot replace"):
            tn.function([y], x * 2, givens={x: y}, mode=mode)
        with pytest.raises(TypeError, match="keys must be symbolic variables"):
            tn.function([x], x * 2, givens={"x": y}, mode=mode)

    def test_missing_input(self, mode):
        x, y = tn.scalar("x"), tn.scalar("y")
        with pytest.raises(ValueError, match="y .* is needed .* not among the function's inputs"):
            tn.function([x], x + y, mode=mode)

    def test_bad_inputs_and_outputs(self, mode):
        x = tn.scalar("x")
        w = tn.shared(np.float64(1.0), name="w")
        with pytest.raises(TypeError, match=r"Cannot use a shared variable \(w\) as explicit"):
            tn.function([w], w * 2, mode=mode)
        with pytest.raises(TypeError, match="is a constant"):
            tn.function([tn.constant(1.0)], x, mode=mode)
        with pytest.raises(ValueError, match="given twice"):
            tn.function([x, x], x, mode=mode)
        with pytest.raises(TypeError, match="inputs must be a list"):
            tn.function(x, x, mode=mode)
        with pytest.raises(TypeError, match=r"inputs\[0\]: expected a symbolic variable"):
            tn.function([np.ones(2)], x, mode=mode)
        with pytest.raises(TypeError, match=r"outputs\[1\]: expected a symbolic variable"):
            tn.function([x], [x, 3], mode=mode)

    def test_bad_mode(self):
        x = tn.scalar("x")
        with pytest.raises(ValueError, match="unknown linker 'fortran'"):
            tn.function([x], x, mode=tn.Mode(linker="fortran"))
        with pytest.raises(TypeError, match="mode: expected a Mode"):
            tn.function([x], x, mode=3)

    def test_in_and_out_reject_non_variables(self):
        with pytest.raises(TypeError, match="In\\(\\): expected a symbolic variable"):
            In(np.ones(2))
        with pytest.raises(TypeError, match="Out\\(\\): expected a symbolic variable"):
            Out([1, 2])

    def test_bad_default_value(self, mode):
        x = tn.vector("x")
        with pytest.raises(TypeError, match="default value of input x"):
            tn.function([In(x, value=np.ones((2, 2)))], x * 1, mode=mode)


class TestEval:
    def test_eval(self):
        x = tn.vector("x")
        np.testing.assert_array_equal((x * 2).eval({x: [1.0, 2.0]}), [2.0, 4.0])
        assert tn.constant(3.0).eval() == 3.0
        w = tn.shared(np.ones(2))
        assert (w.sum() + 1).eval() == 3.0


def test_an_unused_input_is_reported_before_a_missing_one(mode):
    # PyTensor's order (its test_missing_inputs): often the unused input is
    # the one meant in place of the missing one
    x, b = tn.scalar("x"), tn.scalar("b")
    with pytest.raises(tn.UnusedInputError, match="input x .* is not used"):
        tn.function([x], b * 2, mode=mode)
    with pytest.raises(tn.MissingInputError, match="b .* is needed"):
        tn.function([x], b * 2, mode=mode, on_unused_input="ignore")
