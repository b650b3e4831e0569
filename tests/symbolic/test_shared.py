"""Shared variables: types inferred from values, and the errors of shared/set_value.

The aliasing clauses of the contract are in tests/test_contract.py.
"""

import numpy as np
import pytest

import tenure as tn


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

    def test_non_numeric_value(self):
        with pytest.raises(TypeError, match="expected numeric data, got dtype <U"):
            tn.shared(np.array(["a", "b"]))
        with pytest.raises(TypeError, match="expected numeric data"):
            tn.shared([object()])

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
