"""TensorType and the tensor constructors: identity, printing and the input gate (``filter``)."""

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.types import TensorType, ValueOutOfRange

# --------------------------------------------------------------------------
# Constructors


@pytest.mark.parametrize("ctor, ndim", [
    (tn.scalar, 0), (tn.vector, 1), (tn.matrix, 2), (tn.tensor3, 3), (tn.tensor4, 4)])
def test_constructor_ndim_name_and_default_dtype(ctor, ndim):
    x = ctor("x")
    assert x.name == "x"
    assert x.ndim == ndim
    assert x.type.shape == (None,) * ndim
    assert x.dtype == tn.config.floatX
    assert x.owner is None


@pytest.mark.parametrize("ctor", [tn.scalar, tn.vector, tn.matrix, tn.tensor3, tn.tensor4])
def test_constructor_dtype_none_follows_floatX(ctor):
    with tn.config.change_flags(floatX="float32"):
        assert ctor().dtype == "float32"
        assert ctor(dtype=None).dtype == "float32"
        assert ctor(dtype="floatX").dtype == "float32"
        assert tn.tensor(ndim=2).dtype == "float32"
        # an explicit dtype is not overridden by floatX
        assert ctor(dtype="float64").dtype == "float64"
    with tn.config.change_flags(floatX="float64"):
        assert ctor().dtype == "float64"


def test_every_spelling_of_a_dtype_gives_its_name_and_floatX_is_read_each_time():
    """normalize_dtype remembers the spellings it met (it is asked for every
    node); "floatX" is never remembered, and what it refuses it refuses
    every time."""
    from tenure.symbolic.types import normalize_dtype
    for _ in range(2):
        for spelling in ("float32", np.float32, np.dtype("float32"), np.dtype(">f4"), "f4"):
            assert normalize_dtype(spelling) == "float32"
        assert normalize_dtype(float) == "float64"
        for floatX in ("float32", "float64"):
            with tn.config.change_flags(floatX=floatX):
                assert normalize_dtype("floatX") == normalize_dtype(None) == floatX
        with pytest.raises(TypeError, match="dtype object is not supported"):
            normalize_dtype(object)
        with pytest.raises(TypeError, match=r"expected a NumPy dtype, got \[1\]"):
            normalize_dtype([1])


@pytest.mark.parametrize("dtype", ["bool", "int8", "int32", "int64", "uint8", "float32",
                                   "float64", "complex128"])
def test_constructor_explicit_dtype(dtype):
    assert tn.matrix(dtype=dtype).dtype == dtype
    assert tn.vector(dtype=np.dtype(dtype)).dtype == dtype


def test_constructor_accepts_numpy_dtype_objects_and_types():
    assert tn.vector(dtype=np.float32).dtype == "float32"
    assert tn.vector(dtype=np.dtype("int16")).dtype == "int16"


def test_constructor_static_shape():
    x = tn.matrix("x", shape=(3, None))
    assert x.type.shape == (3, None)
    assert x.broadcastable == (False, False)
    y = tn.tensor3(shape=(1, None, 4))
    assert y.type.shape == (1, None, 4)
    assert y.broadcastable == (True, False, False)


def test_tensor_with_shape_and_ndim():
    x = tn.tensor("t", dtype="int32", shape=(2, None, 5))
    assert (x.name, x.dtype, x.type.shape) == ("t", "int32", (2, None, 5))
    y = tn.tensor(ndim=3)
    assert y.type.shape == (None, None, None)
    z = tn.tensor(shape=(None, 2), ndim=2)
    assert z.type.shape == (None, 2)


def test_tensor_without_shape_or_ndim_is_a_type_error():
    with pytest.raises(TypeError, match="shape"):
        tn.tensor("t")


def test_tensor_ndim_contradicting_shape():
    with pytest.raises(ValueError, match="ndim"):
        tn.tensor(shape=(2,), ndim=2)


def test_constructor_shape_of_wrong_length():
    with pytest.raises(ValueError, match=r"matrix.*2"):
        tn.matrix(shape=(3,))
    with pytest.raises(ValueError, match=r"scalar"):
        tn.scalar(shape=(1,))


@pytest.mark.parametrize("bad", [(-1,), (2.0,), ("a",), (True,)])
def test_constructor_bad_shape_entries(bad):
    with pytest.raises(ValueError, match="shape"):
        tn.vector(shape=bad)


@pytest.mark.parametrize("bad", ["foo", "float128", "object", "U3", "datetime64"])
def test_bad_dtype_names_are_type_errors(bad):
    with pytest.raises(TypeError, match="dtype"):
        tn.vector(dtype=bad)
    with pytest.raises(TypeError, match="dtype"):
        TensorType(bad, (None,))


def test_unsupported_dtype_error_lists_the_supported_ones():
    with pytest.raises(TypeError) as info:
        TensorType("object", ())
    msg = str(info.value)
    assert "object" in msg and "float64" in msg and "int8" in msg


# --------------------------------------------------------------------------
# TensorType identity and printing


def test_type_equality_and_hash():
    a = TensorType("float64", (None, 3))
    b = TensorType(np.float64, [None, 3])
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a != TensorType("float32", (None, 3))
    assert a != TensorType("float64", (None, None))
    assert a != TensorType("float64", (None, 3, 1))
    assert a != "float64(?, 3)"
    assert tn.matrix().type == tn.matrix().type


def test_type_dtype_none_is_floatX_at_creation():
    with tn.config.change_flags(floatX="float32"):
        t = TensorType(None, ())
    assert t.dtype == "float32"
    assert t == TensorType("float32", ())


def test_type_str_and_repr():
    assert str(TensorType("float64", (None, 3))) == "float64(?, 3)"
    assert str(TensorType("int8", (None,))) == "int8(?,)"
    assert str(TensorType("bool", ())) == "bool()"
    r = repr(TensorType("float32", (2, None)))
    assert "float32" in r and "(2, None)" in r


def test_type_properties():
    t = TensorType("int32", (1, None, 4))
    assert t.ndim == 3
    assert t.broadcastable == (True, False, False)
    assert t.numpy_dtype == np.dtype("int32")


def test_calling_a_type_makes_a_root_variable():
    t = TensorType("float32", (None,))
    v = t("v")
    assert v.type is t and v.name == "v" and v.owner is None
    assert t() is not t()


def test_is_compatible_replacement():
    t = TensorType("float64", (None, 3))
    assert t.is_compatible_replacement(TensorType("float64", (5, 3)))
    assert t.is_compatible_replacement(TensorType("float64", (None, None)))
    assert not t.is_compatible_replacement(TensorType("float64", (None, 4)))
    assert not t.is_compatible_replacement(TensorType("float32", (None, 3)))
    assert not t.is_compatible_replacement(TensorType("float64", (None,)))


# --------------------------------------------------------------------------
# filter: the input gate

F64V = TensorType("float64", (None,))
F32V = TensorType("float32", (None,))


def test_filter_converts_lists():
    out = F64V.filter([1, 2, 3])
    assert isinstance(out, np.ndarray) and out.dtype == np.float64
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0])
    nested = TensorType("int32", (None, None)).filter([[1, 2], [3, 4]])
    assert nested.dtype == np.int32 and nested.shape == (2, 2)


def test_filter_converts_python_scalars():
    out = TensorType("float32", ()).filter(3)
    assert out.dtype == np.float32 and out.shape == () and out == 3
    out = TensorType("int64", ()).filter(7)
    assert out.dtype == np.int64 and out == 7
    assert TensorType("float64", ()).filter(True).dtype == np.float64


def test_filter_python_floats_into_float32_only_when_exact():
    # PyTensor's rule (its TensorType.filter): a Python float goes into
    # float32 when nothing is lost, else only with allow_downcast.
    out = TensorType("float32", ()).filter(0.5)
    assert out.dtype == np.float32 and out == 0.5
    out = F32V.filter([0.5, 0.25, float("nan"), float("inf")])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [0.5, 0.25, np.nan, np.inf])
    with pytest.raises(TypeError, match=r"x: 1.1 cannot be stored exactly as float32 "
                                        r"\(1.1 would be 1.100000023841858\); cast it "
                                        r"yourself, or pass allow_input_downcast=True"):
        TensorType("float32", ()).filter(1.1, what="x")
    with pytest.raises(TypeError, match=r"\[0.5, 0.1\] cannot be stored exactly as float32 "
                                        r"\(0.1 would be 0.10000000149011612\)"):
        F32V.filter([0.5, 0.1])
    with pytest.raises(TypeError, match=r"1e\+300 would be inf"):
        TensorType("float32", ()).filter(1e300)
    out = F32V.filter([0.1, 1e300], allow_downcast=True)
    np.testing.assert_array_equal(out, np.array([0.1, np.inf], dtype=np.float32))


@pytest.mark.parametrize("allow", [None, False])
def test_filter_a_lone_float_into_floatx_is_rounded_unless_downcast_is_refused(allow):
    # PyTensor's one exception: with allow_downcast None, a lone float (not
    # a list) into a floatX input is taken rounded, so f(0.1) works under
    # floatX=float32; allow_downcast=False refuses it as any lossy value.
    t = TensorType("float32", ())
    with tn.config.change_flags(floatX="float32"):
        for value in (0.1, np.float64(0.1)):
            if allow is None:
                out = t.filter(value, allow_downcast=allow)
                assert out.dtype == np.float32 and out == np.float32(0.1)
            else:
                with pytest.raises(TypeError, match="cannot be stored exactly"):
                    t.filter(value, allow_downcast=allow)
        with pytest.raises(TypeError, match="cannot be stored exactly"):
            F32V.filter([0.1], allow_downcast=allow)
    with pytest.raises(TypeError, match="cannot be stored exactly"):
        t.filter(0.1, allow_downcast=allow)   # float32 is not floatX (float64) here


def test_filter_returns_matching_array_itself():
    a = np.zeros(4)
    assert F64V.filter(a) is a
    assert F64V.filter(a, strict=True) is a


@pytest.mark.parametrize("src, dst", [
    ("int32", "float64"), ("int8", "int64"), ("uint8", "int16"), ("bool", "float32"),
    ("float32", "float64"), ("int16", "float32"), ("bool", "uint8")])
def test_filter_safe_array_casts_accepted(src, dst):
    a = np.arange(3).astype(src)
    out = TensorType(dst, (None,)).filter(a)
    assert out.dtype == np.dtype(dst)
    np.testing.assert_array_equal(out, a.astype(dst))
    # converting leaves the caller's array as it was
    assert a.dtype == np.dtype(src)


@pytest.mark.parametrize("src, dst", [
    ("float64", "float32"), ("float64", "int64"), ("float32", "int32"), ("int64", "int32"),
    ("int64", "float32"), ("int8", "uint8"), ("int32", "bool"), ("complex128", "float64")])
def test_filter_unsafe_array_casts_rejected(src, dst):
    a = np.arange(3).astype(src)
    with pytest.raises(TypeError) as info:
        TensorType(dst, (None,)).filter(a)
    msg = str(info.value)
    assert dst in msg and src in msg  # names what was expected and what came


@pytest.mark.parametrize("src, dst", [("float64", "float32"), ("float64", "int64"),
                                      ("int64", "int8")])
def test_filter_allow_downcast_accepts_unsafe_casts(src, dst):
    a = np.array([1.75, 2.0, -3.0]).astype(src)
    out = TensorType(dst, (None,)).filter(a, allow_downcast=True)
    assert out.dtype == np.dtype(dst)
    np.testing.assert_array_equal(out, a.astype(dst))


def test_filter_python_float_into_int_only_when_whole():
    t = TensorType("int32", ())
    with pytest.raises(TypeError, match="int32"):
        t.filter(1.5)
    with pytest.raises(TypeError, match="2.5 would be 2"):
        TensorType("int32", (None,)).filter([1.0, 2.5])
    with pytest.raises(TypeError, match="int32, got float.*cannot convert float NaN"):
        t.filter(float("nan"))
    out = t.filter(2.0)          # whole: nothing lost, as PyTensor takes it
    assert out.dtype == np.int32 and out == 2
    out = t.filter(1.5, allow_downcast=True)
    assert out.dtype == np.int32 and out == 1


def test_filter_numpy_scalars_convert_as_python_values():
    # As in PyTensor: a NumPy scalar is not an array; it converts when
    # nothing is lost (np.int64 loop counters into int32 inputs, say).
    out = TensorType("float32", ()).filter(np.float64(1.5))
    assert out.dtype == np.float32 and out == 1.5
    with pytest.raises(TypeError, match=r"np.float64\(0.1\) cannot be stored exactly"):
        TensorType("float32", ()).filter(np.float64(0.1))
    out = TensorType("int8", ()).filter(np.int64(3))
    assert out.dtype == np.int8 and out == 3
    with pytest.raises(TypeError, match="300 would be 44"):
        TensorType("int8", ()).filter(np.int64(300))
    assert TensorType("int8", ()).filter(np.int64(300), allow_downcast=True) == 44
    out = TensorType("float64", ()).filter(np.float32(1.5))
    assert out.dtype == np.float64 and out == 1.5


@pytest.mark.parametrize("dtype, value", [
    ("int8", 128), ("int8", -129), ("uint8", -1), ("uint8", 256), ("int32", 2**31),
    ("int64", 2**63), ("uint64", -1)])
def test_filter_python_ints_out_of_range_are_value_errors(dtype, value):
    # OverflowError as NumPy 2 raises, TypeError as PyTensor, ValueError as tenure did
    for error in (ValueError, OverflowError, TypeError, ValueOutOfRange):
        with pytest.raises(error, match=dtype):
            TensorType(dtype, ()).filter(value)


@pytest.mark.parametrize("dtype, value", [
    ("int8", 128), ("int8", -129), ("uint8", -1), ("uint8", 256), ("int32", 2**31),
    ("int64", 2**63),
    ("uint64", -1)])
def test_filter_list_of_python_ints_out_of_range_are_value_errors(dtype, value):
    with pytest.raises(ValueError, match=dtype):
        TensorType(dtype, (None,)).filter([0, value])


@pytest.mark.parametrize("dtype, value", [("int8", 127), ("int8", -128), ("uint8", 255),
                                          ("uint64", 2**64 - 1), ("int64", -2**63)])
def test_filter_python_ints_at_the_edge_of_range_accepted(dtype, value):
    out = TensorType(dtype, ()).filter(value)
    assert out.dtype == np.dtype(dtype) and int(out) == value


def test_filter_python_int_into_bool_only_when_0_or_1():
    # PyTensor takes 0 and 1 for a bool input (nothing lost), not 2
    assert TensorType("bool", ()).filter(1) == np.True_
    with pytest.raises(TypeError, match="2 would be True"):
        TensorType("bool", ()).filter(2)


@pytest.mark.parametrize("value", ["abc", None, object(), {"a": 1}])
def test_filter_non_numeric_values_are_type_errors(value):
    # (and ValueErrors, as NumPy's conversion of a string raises: PyTensor's
    # test_shared.py test_use_numpy_strict_false catches that)
    for error in (TypeError, ValueError):
        with pytest.raises(error, match="expected numbers convertible to float64"):
            TensorType("float64", ()).filter(value)


def test_filter_ragged_list_is_a_type_error():
    with pytest.raises(TypeError):
        TensorType("float64", (None, None)).filter([[1.0], [1.0, 2.0]])


def test_filter_wrong_ndim_is_a_type_error():
    with pytest.raises(TypeError) as info:
        F64V.filter(np.zeros((2, 2)))
    msg = str(info.value)
    assert "1" in msg and "2" in msg
    with pytest.raises(TypeError):
        F64V.filter(3.0)
    with pytest.raises(TypeError):
        TensorType("float64", ()).filter([1.0])
    with pytest.raises(TypeError):
        TensorType("float64", (None, None)).filter([1.0, 2.0])


def test_filter_static_shape_mismatch_is_a_value_error():
    t = TensorType("float64", (None, 3))
    assert t.filter(np.zeros((5, 3))).shape == (5, 3)
    with pytest.raises(ValueError) as info:
        t.filter(np.zeros((5, 4)))
    msg = str(info.value)
    assert "(5, 4)" in msg and "3" in msg
    with pytest.raises(ValueError):
        TensorType("float64", (2,)).filter([1.0, 2.0, 3.0])


def test_filter_error_names_the_input():
    with pytest.raises(TypeError, match="input 'x'"):
        F32V.filter(np.zeros(3), what="input 'x'")
    with pytest.raises(ValueError, match="input 'x'"):
        TensorType("float64", (2,)).filter(np.zeros(3), what="input 'x'")


def test_filter_strict():
    a = np.zeros(3)
    assert F64V.filter(a, strict=True) is a
    with pytest.raises(TypeError, match="float64"):
        F64V.filter(np.zeros(3, dtype=np.int32), strict=True)  # a safe cast, but strict
    with pytest.raises(TypeError):
        F64V.filter([0.0, 1.0], strict=True)
    with pytest.raises(TypeError):
        TensorType("float64", ()).filter(1.0, strict=True)
    # strict still checks ndim and static lengths
    with pytest.raises(TypeError):
        F64V.filter(np.zeros((1, 1)), strict=True)
    with pytest.raises(ValueError):
        TensorType("float64", (2,)).filter(np.zeros(3), strict=True)


def test_is_valid_value():
    assert F64V.is_valid_value(np.zeros(2))
    assert not F64V.is_valid_value(np.zeros(2, dtype=np.float32))
    assert not F64V.is_valid_value(np.zeros((2, 2)))
    assert not F64V.is_valid_value([1.0])


def test_filter_is_the_function_input_gate(mode):
    x = tn.vector("x", dtype="float32")
    f = tn.function([x], x * 2, mode=mode)
    np.testing.assert_array_equal(f([1.5, 2.0]), np.array([3.0, 4.0], dtype=np.float32))
    with pytest.raises(TypeError, match="float32"):
        f(np.ones(2))  # float64 array into float32: unsafe
    g = tn.function([x], x * 2, mode=mode, allow_input_downcast=True)
    assert g(np.ones(2)).dtype == np.float32
