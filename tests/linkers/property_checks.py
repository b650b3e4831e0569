"""The random-graph properties a compiled function must keep, checked against
a reference mode on graphs hypothesis draws (the rewrite suites' strategies):
the same results, inputs it may not write left intact, the same array passed
twice is safe, a result it returned never written by a later call.  Used by
tests/linkers/c/test_properties_c.py (the C linker against the Python
executor) and tests/linkers/cuda/test_properties_cuda.py (the emulated CUDA
kernels against the C linker)."""

import numpy as np

import tenure as tn
from tests.rewrites.test_fusion import _assert_same, draw_elementwise_tree
from tests.rewrites.test_inplace import build


def _as_list(result):
    return result if isinstance(result, list) else [result]


def _same(value):
    return value


def check_elementwise_tree(data, mode, reference_mode, place=_same, fetch=_same) -> None:
    """An elementwise tree ``data`` draws, on ``mode`` and ``reference_mode``.
    ``place``: how arguments of ``mode`` are made from host arrays (device
    arrays for the cuda linker), ``fetch``: how its results are read back."""
    leaves, outputs, values = draw_elementwise_tree(data)
    compiled = tn.function(leaves, outputs, mode=mode, on_unused_input="ignore")
    reference = tn.function(leaves, outputs, mode=reference_mode, on_unused_input="ignore")
    with np.errstate(all="ignore"):
        expected = _as_list(reference(*[np.copy(v) for v in values]))
        first = _as_list(compiled(*[place(np.copy(v)) for v in values]))
        kept = [fetch(r.copy()) for r in first]
        # a second call runs on the buffers the first one left behind
        second = _as_list(compiled(*[place(np.copy(v)) for v in values]))
    # float32 leaves and transcendental functions (libm, libmvec): a few ulps
    for got in (first, second):
        for a, b in zip(got, expected):
            _assert_same(fetch(a), b, rtol=1e-4)
    for result, copy in zip(first, kept):
        np.testing.assert_array_equal(fetch(result), copy)


def _arguments(values, alias, place=_same):
    """Fresh copies of ``values``, the first passed twice when ``alias``."""
    arguments = [place(v.copy()) for v in values]
    if alias and len(arguments) > 1:
        arguments[1] = arguments[0]
    return arguments


def check_graph_with_in_flags(graph, seed: int, alias: bool, mode, reference_mode,
                              place=_same, fetch=_same) -> None:
    """A graph of ``random_graphs`` (random ``In`` flags) called twice
    (``place``, ``fetch``: as for :func:`check_elementwise_tree`)."""
    flags, ops, n_outputs = graph
    rng = np.random.default_rng(seed)
    values = [rng.uniform(-1, 1, size=4) for _ in flags]
    other_values = [rng.uniform(-1, 1, size=4) for _ in flags]
    specs, outputs = build(flags, ops, n_outputs)
    compiled = tn.function(specs, outputs, mode=mode, on_unused_input="ignore")
    reference = tn.function(specs, outputs, mode=reference_mode, on_unused_input="ignore")
    results = []
    for call_values in (values, other_values):
        expected = _as_list(reference(*_arguments(call_values, alias)))
        arguments = _arguments(call_values, alias, place)
        originals = [fetch(a) for a in arguments]
        got = _as_list(compiled(*arguments))
        for g, e in zip(got, expected):
            # atol: the transcendental ops may differ by an ulp between
            # linkers (libm, libmvec), and a difference of two terms of
            # order 1 can cancel to a result far smaller than either, where
            # that ulp (1e-16 of the terms) is no longer 1e-12 of the result
            np.testing.assert_allclose(fetch(g), e, rtol=1e-12, atol=1e-14)
        for argument, original, flag in zip(arguments, originals, flags):
            if flag != "mutable":
                np.testing.assert_array_equal(fetch(argument), original)
        results.append((got, [fetch(g.copy()) for g in got]))
    # the first call's results (plain outputs) survive the second call
    for result, copy in zip(*results[0]):
        np.testing.assert_array_equal(fetch(result), copy)
