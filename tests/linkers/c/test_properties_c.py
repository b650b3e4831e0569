"""Random-graph property tests on the C linker: on graphs hypothesis draws, a
C-compiled function computes what the Python executor (the reference, without
rewrites) computes, and keeps the memory contract: inputs it may not write
stay intact, the same array passed twice is safe, and a result it returned
is never written by a later call (tests/linkers/property_checks.py).

The graphs come from the rewrite suites' strategies (imported, not copied).
Fewer examples than there: every example is a compile."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tenure as tn
from tests.linkers.property_checks import check_elementwise_tree, check_graph_with_in_flags
from tests.rewrites.test_inplace import random_graphs

C = tn.Mode(linker="c")
REFERENCE = tn.Mode(linker="py", rewrites="none")

PROPERTY = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])


@PROPERTY
@given(data=st.data())
def test_random_elementwise_trees_match_the_executor(cc_or_skip, data):
    check_elementwise_tree(data, C, REFERENCE)


@PROPERTY
@given(graph=random_graphs(), seed=st.integers(0, 2**16), alias=st.booleans())
def test_random_graphs_with_random_in_flags_match_the_executor(cc_or_skip, graph, seed, alias):
    check_graph_with_in_flags(graph, seed, alias, C, REFERENCE)
