"""Random-graph property tests on the CUDA linker's kernels (host emulation,
``Mode(linker="cuda_emulated")``): on graphs hypothesis draws, the function
computes what the C linker computes, and keeps the memory contract: inputs
it may not write stay intact, the same array passed twice is safe, and a
result it returned is never written by a later call.

The graphs come from the rewrite suites' strategies, as for the C linker's
property tests (tests/linkers/c/test_properties_c.py).  Fewer examples:
every example compiles its kernels."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tests.rewrites.test_fusion import _assert_same, draw_elementwise_tree
from tests.rewrites.test_inplace import build, random_graphs

EMULATED = tn.Mode(linker="cuda_emulated")
C = tn.Mode(linker="c")

PROPERTY = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])


def _as_list(result):
    return result if isinstance(result, list) else [result]


@PROPERTY
@given(data=st.data())
def test_random_elementwise_trees_match_the_c_linker(cc_or_skip, data):
    leaves, outputs, values = draw_elementwise_tree(data)
    emulated = tn.function(leaves, outputs, mode=EMULATED, on_unused_input="ignore")
    compiled = tn.function(leaves, outputs, mode=C, on_unused_input="ignore")
    with np.errstate(all="ignore"):
        expected = _as_list(compiled(*[np.copy(v) for v in values]))
        first = _as_list(emulated(*[np.copy(v) for v in values]))
        kept = [np.copy(r) for r in first]
        second = _as_list(emulated(*[np.copy(v) for v in values]))   # last call's buffers
    # float32 leaves and transcendental functions (libm here, libmvec there): ulps
    for got in (first, second):
        for a, b in zip(got, expected):
            _assert_same(a, b, rtol=1e-4)
    for result, copy in zip(first, kept):
        np.testing.assert_array_equal(result, copy)


@PROPERTY
@given(graph=random_graphs(), seed=st.integers(0, 2**16), alias=st.booleans())
def test_random_graphs_with_random_in_flags_match_the_c_linker(cc_or_skip, graph, seed, alias):
    flags, ops, n_outputs = graph
    rng = np.random.default_rng(seed)
    specs, outputs = build(flags, ops, n_outputs)
    emulated = tn.function(specs, outputs, mode=EMULATED, on_unused_input="ignore")
    compiled = tn.function(specs, outputs, mode=C, on_unused_input="ignore")
    results = []
    for _ in range(2):
        values = [rng.uniform(-1, 1, size=4) for _ in flags]
        arguments = [v.copy() for v in values]
        if alias and len(arguments) > 1:
            arguments[1] = arguments[0]
        expected = _as_list(compiled(*[a.copy() for a in arguments]))
        originals = [a.copy() for a in arguments]
        got = _as_list(emulated(*arguments))
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-12)
        for argument, original, flag in zip(arguments, originals, flags):
            if flag != "mutable":
                np.testing.assert_array_equal(argument, original)
        results.append((got, [np.copy(g) for g in got]))
    for result, copy in zip(*results[0]):       # the first call's results survive the second
        np.testing.assert_array_equal(result, copy)
