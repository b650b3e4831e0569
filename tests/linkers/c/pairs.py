"""The same graph compiled by the Python executor and by the C linker, for the
C tests that compare the two (each graph compiled once per test run)."""

import numpy as np

import tenure as tn
from tenure.linkers.c.linker import CThunk

C = tn.Mode(linker="c")
PY = tn.Mode(linker="py")

_FUNCTIONS: dict = {}


def both(key, inputs, outputs, **kwargs):
    """``(f_py, f_c)`` for this graph, compiled the first time ``key`` is seen."""
    if key not in _FUNCTIONS:
        f_py = tn.function(inputs, outputs, mode=PY, **kwargs)
        f_c = tn.function(inputs, outputs, mode=C, **kwargs)
        assert isinstance(f_c._thunk, CThunk)
        _FUNCTIONS[key] = f_py, f_c
    return _FUNCTIONS[key]


def kinds_by_op(f) -> dict:
    """Per op class of a C function's schedule, the step kinds its nodes ran as."""
    found: dict = {}
    for step, kind in zip(f._thunk.plan.steps, f._thunk.graph.kinds):
        found.setdefault(type(step.node.op), set()).add(kind)
    return found


def assert_identical(got, want):
    """The same dtype, shape and values (NaNs in the same places)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
