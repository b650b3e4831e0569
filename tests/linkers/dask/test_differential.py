"""The dask linker against the C linker on random graphs and chunkings
(graphs.py draws them): every graph the dask linker compiles must compute,
on any chunking of its inputs, what the C linker computes (up to float64
round-off); a graph it cannot lower is refused when it is compiled, naming
the op.  The synchronous scheduler here; a smaller sample on a 2-worker
``LocalCluster`` in test_cluster.py."""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings

import tenure as tn

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
from tenure.linkers.dask.lower import LoweringError  # noqa: E402  (needs dask)

from tests.linkers.dask.graphs import FAMILY_OF, examples  # noqa: E402

DASK = tn.Mode(linker="dask", compute=True)
C = tn.Mode(linker="c")

#: how many examples the fast run draws (TENURE_DASK_EXAMPLES overrides)
EXAMPLES = int(os.environ.get("TENURE_DASK_EXAMPLES", "2000"))

#: a fixed sequence of examples in CI; TENURE_DASK_EXPLORE=1 draws new ones
DERANDOMIZE = not os.environ.get("TENURE_DASK_EXPLORE")

#: compiled functions by recipe: one compile serves every example of a recipe
_COMPILED: dict = {}


def compiled(recipe):
    """``(dask function or the LoweringError it raised, C function, shared)``."""
    found = _COMPILED.get(recipe)
    if found is None:
        inputs, shared, outputs = recipe.build()
        reference = tn.function(inputs, outputs, mode=C, on_unused_input="ignore")
        try:
            lazy = tn.function(inputs, outputs, mode=DASK, on_unused_input="ignore")
        except LoweringError as exc:
            lazy = exc
        found = _COMPILED[recipe] = (lazy, reference, shared)
    return found


def tolerance(want) -> float:
    """float64 round-off of sums taken in another order, on values of this size."""
    return 1e-9 * max(1.0, float(np.max(np.abs(want), initial=0.0)))


def run_and_compare(example):
    recipe, values, chunks = example
    lazy, reference, shared = compiled(recipe)
    event(f"steps: {len(recipe.steps)}" + (" + gradients" if recipe.loss else ""))
    for name, _ in recipe.steps:
        event(f"op family {FAMILY_OF[name]}")
    if isinstance(lazy, LoweringError):
        event(f"refused at compile time: {lazy}")
        # refused at compile time: the message names the op
        assert "no lowering for" in str(lazy)
        return
    *arrays, shared_value, scalar = values
    shared.set_value(shared_value)
    want = reference(*arrays, scalar)
    shared.set_value(shared_value)
    args = [da.from_array(a, chunks=c) for a, c in zip(arrays, chunks)]
    got = lazy(*args, scalar)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert isinstance(g, np.ndarray), (k, type(g))
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=tolerance(w), err_msg=f"output {k}")


@settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(examples())
def test_dask_equals_c_on_random_graphs_and_chunkings(example):
    with dask.config.set(scheduler="synchronous"):
        run_and_compare(example)
