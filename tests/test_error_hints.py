"""Error messages whose advice must be right (issue 32, item 3): every hint
names something that works, and an error in an update names its shared
variable."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.c import compiler

LINKERS = ["py", "check", pytest.param("c", marks=pytest.mark.skipif(
    compiler.find_compiler() is None, reason="no working C compiler"))]


def _notes(exc_info) -> str:
    return "\n".join(getattr(exc_info.value, "__notes__", ()))


# -- set_value's downcast hint --------------------------------------------------

def test_set_value_downcast_hint_names_what_works():
    s = tn.shared(np.zeros(3, dtype="float32"), name="s")
    with pytest.raises(TypeError, match="set_value of s: expected dtype float32, got "
                                        "float64") as info:
        s.set_value(np.ones(3))
    message = str(info.value)
    assert "allow_input_downcast" not in message   # set_value takes no such argument
    assert "tn.shared(..., dtype='float32', allow_downcast=True)" in message
    # ... and what it names works
    t = tn.shared(np.zeros(3, dtype="float32"), name="t", allow_downcast=True)
    t.set_value(np.ones(3))
    assert t.get_value().dtype == np.float32


def test_set_value_downcast_hint_for_python_values():
    s = tn.shared(np.zeros(2, dtype="int32"), name="s")
    with pytest.raises(TypeError, match="cannot be stored exactly as int32") as info:
        s.set_value([1.5, 2.5])
    assert "allow_input_downcast" not in str(info.value)
    assert "allow_downcast=True" in str(info.value)


def test_a_function_argument_still_gets_the_functions_hint():
    x = tn.vector("x", dtype="float32")
    f = tn.function([x], x * 2)
    with pytest.raises(TypeError, match="pass allow_input_downcast=True"):
        f(np.ones(3))


# -- updates: the compile-time hint ---------------------------------------------

def test_an_update_of_other_dimensions_suggests_no_cast():
    s = tn.shared(np.zeros(3, dtype="float32"), name="s")
    m = tn.matrix("m", dtype="float32")
    with pytest.raises(TypeError, match=r"updates: the new value of s has type "
                                        r"float32\(\?, \?\), but s has type float32") as info:
        tn.function([m], [], updates=[(s, m)])
    assert ".astype" not in str(info.value)
    assert "reshape it to 1 dimension(s)" in str(info.value)


def test_an_update_of_another_static_length_suggests_no_cast():
    s = tn.shared(np.zeros(3, dtype="float32"), name="s", shape=(3,))
    v = tn.vector("v", dtype="float32", shape=(4,))
    with pytest.raises(TypeError, match="the new value of s") as info:
        tn.function([v], [], updates=[(s, v)])
    assert ".astype" not in str(info.value)
    assert "static shape (3,)" in str(info.value)


def test_an_update_of_another_dtype_suggests_only_the_cast():
    s = tn.shared(np.zeros(3, dtype="float32"), name="s")
    v = tn.vector("v", dtype="float64")
    with pytest.raises(TypeError, match="the new value of s") as info:
        tn.function([v], [], updates=[(s, v)])
    assert "cast it with .astype('float32')" in str(info.value)
    assert "reshape" not in str(info.value)


# -- updates: run-time errors name the update -----------------------------------

@pytest.mark.parametrize("linker", LINKERS)
def test_an_in_place_update_of_the_wrong_length_names_the_shared_variable(linker):
    s = tn.shared(np.zeros(3, dtype="float32"), name="s")
    v = tn.vector("v", dtype="float32")
    f = tn.function([v], [], updates=[(s, s + v)], mode=tn.Mode(linker=linker))
    with pytest.raises(ValueError) as info:
        f(np.zeros(4, dtype="float32"))
    assert "in the update of shared variable 's'" in _notes(info)
    np.testing.assert_array_equal(s.get_value(), np.zeros(3))


@pytest.mark.parametrize("linker", LINKERS)
def test_a_failing_step_of_an_update_names_the_shared_variable(linker):
    s = tn.shared(np.zeros(2), name="s")
    m, v = tn.matrix("m"), tn.vector("v")
    f = tn.function([m, v], [], updates=[(s, tn.exp(tn.dot(m, v)))],
                    mode=tn.Mode(linker=linker))
    with pytest.raises(ValueError) as info:
        f(np.ones((2, 3)), np.ones(4))
    notes = _notes(info)
    assert "raised while computing" in notes or "refused before" in notes, notes
    assert "in the update of shared variable 's'" in notes


@pytest.mark.parametrize("linker", LINKERS)
def test_a_step_that_also_feeds_an_output_names_no_update(linker):
    s = tn.shared(np.zeros(2), name="s")
    m, v = tn.matrix("m"), tn.vector("v")
    y = tn.dot(m, v)
    f = tn.function([m, v], y.sum(), updates=[(s, tn.exp(y))], mode=tn.Mode(linker=linker))
    with pytest.raises(ValueError) as info:
        f(np.ones((2, 3)), np.ones(4))
    assert "update" not in _notes(info)


@pytest.mark.parametrize("linker", LINKERS)
def test_a_step_feeding_two_updates_names_both(linker):
    s = tn.shared(np.zeros(2), name="s")
    t = tn.shared(np.zeros(2), name="t")
    m, v = tn.matrix("m"), tn.vector("v")
    y = tn.dot(m, v)
    f = tn.function([m, v], [], updates=[(s, tn.exp(y)), (t, tn.sin(y))],
                    mode=tn.Mode(linker=linker))
    with pytest.raises(ValueError) as info:
        f(np.ones((2, 3)), np.ones(4))
    assert "in the updates of shared variables 's', 't'" in _notes(info)


# -- on_unused_input ------------------------------------------------------------

def test_on_unused_input_warn_suggests_only_ignore():
    x, w = tn.vector("x"), tn.vector("w")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tn.function([x, w], x * 2, on_unused_input="warn")
    (warning,) = [c for c in caught if "not used" in str(c.message)]
    message = str(warning.message)
    assert "input w (#1) is not used" in message
    assert "on_unused_input='ignore' if" in message
    assert "'warn'" not in message


def test_on_unused_input_raise_suggests_ignore_or_warn():
    x, w = tn.vector("x"), tn.vector("w")
    with pytest.raises(Exception, match=r"on_unused_input='ignore' \(or 'warn'\)"):
        tn.function([x, w], x * 2)
