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


#: the environment variable that hands the test session's compiledir to
#: pytest-xdist's workers (they start after the controller's
#: pytest_configure, with its environment) and to the tenures tests start in
#: fresh interpreters (:func:`default_flags_env`), so they share one cache:
#: what one process compiled, another loads (the cache is safe for several
#: processes).
COMPILEDIR_VARIABLE = "TENURE_TEST_COMPILEDIR"


def default_flags_env(env=None) -> dict[str, str]:
    """The environment for a tenure that a test starts in a fresh interpreter
    (the demo, a command of the docs, the docs' doctests): ``env`` (default
    this process's) with the default flags, as a reader of the docs has
    them, but for the compiledir: the test session's cache, never the
    user's own, where the C runtime and the loops the tests built are found
    rather than built again."""
    env = dict(os.environ if env is None else env)
    env.pop("TENURE_FLAGS", None)
    compiledir = os.environ.get(COMPILEDIR_VARIABLE)
    if compiledir:
        env["TENURE_FLAGS"] = f"compiledir={compiledir}"
    return env


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


def assert_same_normal(got, expected, loc=0.0):
    """Normal draws ``loc + scale * z``: the same to a few ulps of their terms
    (the platforms' log, sin and cos differ by an ulp or two:
    NumPy's SIMD ones are not libm's).  The bound is 4 ulps of the larger of
    ``|scale * z|`` and the draw itself, not of the draw alone: where ``loc``
    nearly cancels ``scale * z`` (1 + 2 * -0.515 = -0.031), the ulp or two
    by which NumPy's SIMD sine differs from libm's is 64 ulps of the sum."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    term = np.abs(expected - np.asarray(loc, expected.dtype))    # |scale * z|, rounded
    bound = 4 * np.spacing(np.maximum(term, np.abs(expected)))
    excess = np.abs(got - expected) > bound
    assert not excess.any(), (f"{excess.sum()} draws differ by more than 4 ulps of their "
                              f"terms; first at {np.argwhere(excess)[0]}: got "
                              f"{got[excess][0]!r}, expected {expected[excess][0]!r}")


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
