"""Helpers shared by the test files."""

import importlib
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

#: dtypes the op suites run over
DTYPES = ["bool", "int8", "int32", "int64", "uint8", "float32", "float64", "complex128"]

# Compiled-function tests take the function-scoped `mode` fixture; it holds no
# state between examples, so hypothesis may reuse it.
COMPILED = settings(max_examples=50, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           # a test method runs once per `mode`, each on
                                           # a fresh (stateless) instance of its class
                                           HealthCheck.differing_executors])


def random_values(seed: int, shape: tuple, dtype: str, scale: float = 1.5) -> np.ndarray:
    """Small values in [-scale, scale] (so products stay finite), with ties, for any dtype."""
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.random(shape) < 0.5
    if kind == "u":
        return rng.integers(0, 4, size=shape).astype(dtype)
    if kind == "i":
        return rng.integers(-3, 4, size=shape).astype(dtype)
    if kind == "c":
        return (rng.uniform(-scale, scale, shape)
                + 1j * rng.uniform(-scale, scale, shape)).astype(dtype)
    return rng.uniform(-scale, scale, size=shape).astype(dtype)


def assert_matches(got, expected):
    """``got`` is an ndarray equal to NumPy's ``expected`` in dtype, shape and value."""
    expected = np.asarray(expected)
    assert isinstance(got, np.ndarray)
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    if got.dtype.kind in "fc":
        rtol = 1e-5 if got.dtype in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(got, expected)


def eval_dims(dims, inputs, values, mode):
    """The values of a ``shape_tuple``'s dims: ints pass through, symbolic dims
    (which must be 0-d int64) are computed by one compiled function."""
    import tenure as tn
    symbolic = [d for d in dims if not isinstance(d, int)]
    for d in symbolic:
        assert d.ndim == 0 and d.dtype == "int64", d.type
    fn = tn.function(inputs, symbolic, mode=mode, on_unused_input="ignore")
    results = iter(fn(*values) if symbolic else [])
    return tuple(d if isinstance(d, int) else int(next(results)) for d in dims)


#: Set by ``.ci/run``, which installs every optional tool (Chromium, Graphviz,
#: matplotlib, PyTorch, JAX): there a test that needs one fails when it is
#: missing instead of skipping, so CI cannot pass by skipping them.
REQUIRE_OPTIONAL = os.environ.get("TENURE_REQUIRE_OPTIONAL", "") not in ("", "0")


def need(available: bool, what: str) -> None:
    """Skip the calling test, with ``what`` as the reason, unless ``available``;
    under ``TENURE_REQUIRE_OPTIONAL=1`` (CI) fail instead."""
    if available:
        return
    if REQUIRE_OPTIONAL:
        pytest.fail(f"{what} (TENURE_REQUIRE_OPTIONAL is set: CI installs it)")
    pytest.skip(what)


def need_module(name: str, how: str):
    """``import name``, or :func:`need`'s skip/failure naming ``how`` to install it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        need(False, f"{name} is not installed ({how})")
