"""Random-graph property tests on the C linker: on graphs hypothesis draws, a
C-compiled function computes what the Python executor (the reference, without
rewrites) computes, and keeps the memory contract: inputs it may not write
stay intact, the same array passed twice is safe, and a result it returned
is never written by a later call.

The graphs come from the rewrite suites' strategies (imported, not copied).
Fewer examples than there: every example is a compile."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tests.rewrites.test_fusion import _assert_same, draw_elementwise_tree
from tests.rewrites.test_inplace import build, random_graphs

C = tn.Mode(linker="c")
REFERENCE = tn.Mode(linker="py", rewrites="none")

PROPERTY = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])


def _as_list(result):
    return result if isinstance(result, list) else [result]


@PROPERTY
@given(data=st.data())
def test_random_elementwise_trees_match_the_executor(cc_or_skip, data):
    leaves, outputs, values = draw_elementwise_tree(data)
    compiled = tn.function(leaves, outputs, mode=C, on_unused_input="ignore")
    reference = tn.function(leaves, outputs, mode=REFERENCE, on_unused_input="ignore")
    with np.errstate(all="ignore"):
        expected = _as_list(reference(*[np.copy(v) for v in values]))
        first = _as_list(compiled(*[np.copy(v) for v in values]))
        kept = [np.copy(r) for r in first]
        # a second call runs on the buffers the first one left behind
        second = _as_list(compiled(*[np.copy(v) for v in values]))
    # float32 leaves and vectorized transcendental functions: a few ulps
    for got in (first, second):
        for a, b in zip(got, expected):
            _assert_same(a, b, rtol=1e-4)
    for result, copy in zip(first, kept):
        np.testing.assert_array_equal(result, copy)


def _arguments(values, alias):
    """Fresh copies of ``values``, the first passed twice when ``alias``."""
    arguments = [v.copy() for v in values]
    if alias and len(arguments) > 1:
        arguments[1] = arguments[0]
    return arguments


@PROPERTY
@given(graph=random_graphs(), seed=st.integers(0, 2**16), alias=st.booleans())
def test_random_graphs_with_random_in_flags_match_the_executor(cc_or_skip, graph, seed, alias):
    flags, ops, n_outputs = graph
    rng = np.random.default_rng(seed)
    values = [rng.uniform(-1, 1, size=4) for _ in flags]
    other_values = [rng.uniform(-1, 1, size=4) for _ in flags]
    specs, outputs = build(flags, ops, n_outputs)
    compiled = tn.function(specs, outputs, mode=C, on_unused_input="ignore")
    reference = tn.function(specs, outputs, mode=REFERENCE, on_unused_input="ignore")

    results = []
    for call_values in (values, other_values):
        expected = _as_list(reference(*_arguments(call_values, alias)))
        arguments = _arguments(call_values, alias)
        originals = [a.copy() for a in arguments]
        got = _as_list(compiled(*arguments))
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-12)
        for argument, original, flag in zip(arguments, originals, flags):
            if flag != "mutable":
                np.testing.assert_array_equal(argument, original)
        results.append((got, [np.copy(g) for g in got]))
    # the first call's results (plain outputs) survive the second call
    for result, copy in zip(*results[0]):
        np.testing.assert_array_equal(result, copy)
