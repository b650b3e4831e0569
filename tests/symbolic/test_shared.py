"""Shared variables: types inferred from values, and the errors of shared/set_value.

The aliasing clauses of the contract are in tests/test_contract.py.
"""

import pickle

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.shared import GenericSharedVariable
from tenure.symbolic.types import GenericType


class TestTypes:
    @pytest.mark.parametrize("value, dtype, ndim", [
        (np.zeros((2, 3), dtype="float32"), "float32", 2),
        (np.arange(3), "int64", 1),
        (1.5, "float64", 0),
        (3, "int64", 0),
        (True, "bool", 0),
        ([[1.0, 2.0]], "float64", 2),
        (np.float32(2.0), "float32", 0),
    ])
    def test_type_from_value(self, value, dtype, ndim):
        s = tn.shared(value)
        assert s.dtype == dtype and s.ndim == ndim
        assert s.type.shape == (None,) * ndim  # lengths may change with set_value

    def test_python_floats_follow_floatx(self):
        with tn.config.change_flags(floatX="float32"):
            assert tn.shared(1.5).dtype == "float32"
            assert tn.shared([1.0, 2.0]).dtype == "float32"
            assert tn.shared(np.zeros(2)).dtype == "float64"  # arrays keep their dtype

    def test_explicit_dtype_and_static_shape(self):
        s = tn.shared(np.zeros(3, dtype="int32"), dtype="int64", shape=(3,))
        assert s.dtype == "int64" and s.type.shape == (3,)
        with pytest.raises(ValueError, match=r"expected static shape \(3,\)"):
            s.set_value(np.zeros(4, dtype="int64"))

    def test_name_and_str(self):
        assert str(tn.shared(np.zeros(2), name="w")) == "w"
        assert "shared" in str(tn.shared(np.zeros(2)))

    def test_usable_in_expressions(self):
        w = tn.shared(np.arange(3.0), name="w")
        assert (w * 2).sum().eval() == 6.0


class TestErrors:
    def test_symbolic_value(self):
        x = tn.vector("x")
        with pytest.raises(TypeError, match="shared\\(\\): expected a value, got symbolic"):
            tn.shared(x)
        w = tn.shared(np.zeros(2), name="w")
        with pytest.raises(TypeError, match="set_value of w: expected a value.*updates="):
            w.set_value(x)

    def test_non_numeric_data_is_held_as_a_generic_object(self):
        # (PyTensor's shared() falls back to its generic type for these too)
        for value in (np.array(["a", "b"]), [object()], np.array(["2020"], "datetime64[D]")):
            assert isinstance(tn.shared(value), GenericSharedVariable)

    def test_set_value_wrong_dtype(self):
        w = tn.shared(np.zeros(2, dtype="float32"), name="w")
        with pytest.raises(TypeError, match="set_value of w: expected dtype float32, got float64"):
            w.set_value(np.zeros(2))
        w.set_value(np.zeros(2, dtype="int8"))  # a safe cast is fine
        assert w.get_value().dtype == np.float32

    def test_set_value_wrong_ndim(self):
        w = tn.shared(np.zeros(2), name="w")
        with pytest.raises(TypeError, match=r"set_value of w: expected 1 dimension\(s\)"):
            w.set_value(np.zeros((2, 2)))

    def test_clone_is_refused(self):
        with pytest.raises(TypeError, match="cannot be cloned"):
            tn.shared(np.zeros(2), name="w").clone()


class TestStrictAndAllowDowncast:
    """PyTensor's ``shared(..., strict=, allow_downcast=)``: the rules ``set_value`` follows."""

    def test_defaults(self):
        w = tn.shared(np.zeros(3), name="w")
        assert w.strict is False and w.allow_downcast is None

    def test_strict_takes_only_ndarrays_of_the_exact_dtype(self):
        w = tn.shared(np.zeros(3), name="w", strict=True)
        with pytest.raises(TypeError, match="set_value of w: expected dtype float64, got "
                                            "float32 \\(strict input\\)"):
            w.set_value(np.ones(3, dtype="float32"))  # a safe cast, but not exact
        with pytest.raises(TypeError, match="set_value of w: expected an ndarray of dtype "
                                            "float64, got list"):
            w.set_value([1.0, 2.0, 3.0])
        with pytest.raises(TypeError, match="strict"):
            w.set_value(np.arange(3))  # int64: a safe cast, but not exact
        np.testing.assert_array_equal(w.get_value(), np.zeros(3))
        w.set_value(np.ones(4))  # exact dtype: fine (lengths may change)
        np.testing.assert_array_equal(w.get_value(), np.ones(4))
        # the initial value follows shared()'s usual conversion
        assert tn.shared([1.0, 2.0], strict=True).get_value().dtype == np.float64

    def test_not_strict_converts(self):
        w = tn.shared(np.zeros(3), name="w")
        w.set_value(np.ones(3, dtype="float32"))
        assert w.get_value().dtype == np.float64
        w.set_value([1, 2, 3])
        np.testing.assert_array_equal(w.get_value(), [1.0, 2.0, 3.0])

    def test_allow_downcast_true_casts_as_numpy(self):
        w = tn.shared(np.zeros(3, dtype="float32"), name="w", allow_downcast=True)
        w.set_value(np.array([0.1, 2.5, 1e10]))  # float64 into float32: rounds
        assert w.get_value().dtype == np.float32
        np.testing.assert_array_equal(w.get_value(),
                                      np.array([0.1, 2.5, 1e10]).astype("float32"))
        b = tn.shared(np.zeros(2, dtype="int8"), name="b", allow_downcast=True)
        b.set_value(np.array([300, -1]))  # int64 into int8: wraps, as astype
        np.testing.assert_array_equal(b.get_value(), [44, -1])
        b.set_value([300, 1.7])           # Python values: the same cast
        np.testing.assert_array_equal(b.get_value(), [44, 1])
        # and an explicit dtype for the initial value may downcast too
        c = tn.shared(np.array([1.5, 2.5]), dtype="int32", allow_downcast=True)
        np.testing.assert_array_equal(c.get_value(), [1, 2])

    def test_allow_downcast_none_and_false_refuse_lossy_array_casts(self):
        for allow in (None, False):
            w = tn.shared(np.zeros(3, dtype="float32"), name="w", allow_downcast=allow)
            with pytest.raises(TypeError, match="set_value of w: expected dtype float32, got "
                                                "float64"):
                w.set_value(np.ones(3))
            b = tn.shared(np.zeros(2, dtype="int8"), name="b", allow_downcast=allow)
            with pytest.raises(ValueError, match="does not fit in int8"):
                b.set_value([300, 1])
        with pytest.raises(TypeError, match="could lose information"):
            tn.shared(np.array([1.5, 2.5]), dtype="int32")

    def test_allow_downcast_none_takes_a_lone_float_into_floatx(self):
        # PyTensor's SharedVariable.set_value, through TensorType.filter: with
        # allow_downcast None a lone float goes into a floatX variable rounded;
        # a list of floats must convert exactly.
        with tn.config.change_flags(floatX="float32"):
            s = tn.shared(np.zeros((), dtype="float32"), name="s")
            s.set_value(0.1)
            assert s.get_value() == np.float32(0.1)
            w = tn.shared(np.zeros(2, dtype="float32"), name="w")
            with pytest.raises(TypeError, match=r"set_value of w: \[0.1, 0.2\] cannot be "
                                                r"stored exactly as float32 \(0.1 would be"):
                w.set_value([0.1, 0.2])
            w.set_value([0.5, 0.25])
            np.testing.assert_array_equal(w.get_value(), [0.5, 0.25])
        with pytest.raises(TypeError, match="cannot be stored exactly"):
            s.set_value(0.1)     # float32 is not floatX (float64) here

    def test_allow_downcast_false_refuses_inexact_python_floats(self):
        w = tn.shared(np.zeros(2, dtype="float32"), name="w", allow_downcast=False)
        with pytest.raises(TypeError, match=r"set_value of w: \[0.1, 0.25\] cannot be stored "
                                            r"exactly as float32.*allow_downcast=True"):
            w.set_value([0.1, 0.25])
        np.testing.assert_array_equal(w.get_value(), np.zeros(2))
        w.set_value([0.5, 0.25])  # exact in float32: fine
        np.testing.assert_array_equal(w.get_value(), [0.5, 0.25])
        w.set_value(np.array([0.1, 0.2], dtype="float32"))  # arrays: the usual rules
        s = tn.shared(np.zeros((), dtype="float32"), name="s", allow_downcast=False)
        with tn.config.change_flags(floatX="float32"):
            with pytest.raises(TypeError, match="cannot be stored exactly"):
                s.set_value(0.1)   # False: not even floatX's exception


class TestGeneric:
    """Generic shared variables: any Python object, held opaque (PyTensor's
    test_sharedvar generic cases: test_ctors' fallback, strict, set_value)."""

    @pytest.mark.parametrize("value", [[], "text", {"a": [1]}, None, ("a", 1), [[1], [2, 3]],
                                       object()])
    def test_what_is_generic(self, value):
        s = tn.shared(value, name="s")
        assert isinstance(s, GenericSharedVariable) and isinstance(s, tn.SharedVariable)
        assert str(s.type) == "generic" and s.type == GenericType()
        got = s.get_value()
        assert type(got) is type(value)
        if isinstance(value, (list, dict)):           # a copy, unless borrowed
            assert got == value and got is not value

    def test_numeric_data_is_not(self):
        for value in ([1.0, 2.0], [[1, 2]], 3, 2.5, True, np.float32(2), np.zeros(2)):
            assert not isinstance(tn.shared(value), GenericSharedVariable)

    def test_copies_unless_borrowed(self):
        held = {"a": [1]}
        s = tn.shared(held, name="s")
        held["a"].append(2)                            # the caller's object changes ...
        assert s.get_value() == {"a": [1]}             # ... not the value held
        s.get_value()["a"].append(3)
        assert s.get_value() == {"a": [1]}
        s.set_value(held, borrow=True)
        assert s.get_value(borrow=True) is held
        s.set_value(held)
        assert s.get_value(borrow=True) == held and s.get_value(borrow=True) is not held
        assert tn.shared(held, borrow=True).get_value(borrow=True) is held

    def test_any_object_is_accepted_strict_or_not(self):
        s = tn.shared([], name="s", strict=True)
        s.set_value("now a string")
        assert s.get_value() == "now a string"
        s.set_value(np.zeros(2))                       # even an array: the type is generic
        np.testing.assert_array_equal(s.get_value(), np.zeros(2))

    def test_pickles(self):
        s = tn.shared({"k": (1, "v")}, name="s")
        again = pickle.loads(pickle.dumps(s))
        assert again.get_value() == {"k": (1, "v")} and again.name == "s"

    def test_refusals(self):
        s = tn.shared("text", name="s")
        with pytest.raises(TypeError, match="expected a tensor variable, got s of type generic"):
            s + 1
        with pytest.raises(TypeError, match=r"s.zero\(\): it holds a str, not an array"):
            s.zero()
        with pytest.raises(TypeError, match="expected a value, got symbolic variable"):
            s.set_value(tn.vector("v"))
        with pytest.raises(TypeError, match="dtype= applies to numeric data; a str is held as "
                                            "a generic object"):
            tn.shared("text", dtype="float32")
        with pytest.raises(TypeError, match="a list cannot be stored on a device"):
            tn.shared([], device="cuda")
