"""The differential test of test_differential.py, a smaller sample, on a
real 2-worker ``distributed.LocalCluster``: the graphs, the chunk kernels
and the shared values travel to worker processes, and the results must
still equal the C linker's."""

import os

import pytest
from hypothesis import HealthCheck, given, settings

import tenure as tn

distributed = pytest.importorskip("distributed")
from tests.linkers.dask.graphs import examples  # noqa: E402
from tests.linkers.dask.test_differential import DERANDOMIZE, run_and_compare  # noqa: E402

pytestmark = pytest.mark.xdist_group("dask_cluster")

#: how many examples run on the cluster (TENURE_DASK_CLUSTER_EXAMPLES overrides)
EXAMPLES = int(os.environ.get("TENURE_DASK_CLUSTER_EXAMPLES", "60"))


@pytest.fixture(scope="module")
def client():
    environment = dict(os.environ)   # see test_cluster.py: workers' settings leak here
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
        env={"TENURE_FLAGS": f"compiledir={tn.config.compiledir}"})
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
        os.environ.clear()
        os.environ.update(environment)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(example=examples(max_steps=4))
def test_dask_equals_c_on_the_cluster(client, example):
    assert distributed.default_client() is client
    run_and_compare(example)
