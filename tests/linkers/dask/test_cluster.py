"""The dask linker on a real ``distributed.LocalCluster``: two worker
processes (one thread each) that load tenure's kernels from the test cache,
as a user's cluster would from theirs.  The results must equal the C
linker's; an array larger than each worker's memory limit must go through;
a worker killed in the middle of a call must cost neither the result nor a
shared variable's update."""

import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest

import tenure as tn
from tenure import In

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
from tenure.linkers.dask.linker import SCATTER_BYTES  # noqa: E402  (needs dask)

pytestmark = pytest.mark.xdist_group("dask_cluster")

#: each worker's memory limit; test_larger_than_worker_memory goes past it
WORKER_MEMORY = 400 * 2**20


@pytest.fixture(scope="module")
def client():
    # Starting worker processes leaves distributed's pre-spawn settings
    # (OMP_NUM_THREADS=1, MALLOC_TRIM_THRESHOLD_, ...) in this process's
    # environment; later tests in this process (the C loops' thread count
    # that memory_report predicts from it) must see the environment they had.
    environment = dict(os.environ)
    try:
        yield from _cluster_client()
    finally:
        os.environ.clear()
        os.environ.update(environment)


def _cluster_client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, memory_limit=WORKER_MEMORY,
        dashboard_address=None, env={"TENURE_FLAGS": f"compiledir={tn.config.compiledir}"})
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def logistic_step(lr=0.5):
    """A logistic-regression gradient step on shared ``w``, ``b``: the
    data-parallel step of the issue (the gradient is a sum over rows)."""
    x, y = tn.matrix("x"), tn.vector("y")
    w, b = tn.shared(np.zeros(16), name="w"), tn.shared(0.0, name="b")
    p = tn.sigmoid(x @ w + b)
    loss = -tn.mean(y * tn.log(p) + (1 - y) * tn.log(1 - p))
    gw, gb = tn.grad(loss, [w, b])
    return [x, y], loss, [(w, w - lr * gw), (b, b - lr * gb)], (w, b)


def test_gradient_step_equals_one_machine(client):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20_000, 16))
    Y = (X @ rng.standard_normal(16) + rng.standard_normal(20_000) > 0).astype(np.float64)
    (x, y), loss, updates, (w, b) = logistic_step()
    dask_step = tn.function([In(x, chunks=(2_500, 16)), In(y, chunks=2_500)], loss,
                            updates=updates, mode=tn.Mode(linker="dask", compute=True))
    w1, b1 = tn.shared(np.zeros(16)), tn.shared(0.0)
    one_machine = tn.function([x, y], loss, updates=updates, mode="c").copy(
        swap={w: w1, b: b1})
    for _ in range(3):
        np.testing.assert_allclose(dask_step(X, Y), one_machine(X, Y), rtol=1e-13)
        np.testing.assert_allclose(w.get_value(), w1.get_value(), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(b.get_value(), b1.get_value(), rtol=1e-12, atol=1e-15)
    assert np.abs(w.get_value()).max() > 0.1   # it learned something


def _arrays_in(graph) -> list:
    """Every NumPy array a task graph holds (a task's value or its arguments)."""
    found = []

    def walk(item):
        if isinstance(item, np.ndarray):
            found.append(item)
        elif isinstance(item, (tuple, list)):
            for part in item:
                walk(part)
        elif hasattr(item, "args"):   # a dask Task
            walk(tuple(item.args))
            if hasattr(item, "value"):
                walk(item.value)
    for task in dict(graph).values():
        walk(task)
    return found


def test_shared_values_travel_once_per_call(client):
    x = tn.matrix("x")
    big = tn.shared(np.random.default_rng(1).standard_normal((400, 400)), name="big")
    small = tn.shared(np.arange(400.0), name="small")
    assert big.get_value(borrow=True).nbytes >= SCATTER_BYTES > small.get_value().nbytes
    f = tn.function([In(x, chunks=(100, 400))], (x @ big) * small,
                    mode=tn.Mode(linker="dask"))
    value = np.random.default_rng(2).standard_normal((1_000, 400))
    lazy = f(value)
    graph = lazy.__dask_graph__()
    # The big value is on the workers (a future in one task), not in the graph;
    # the small one is in exactly one task, which every chunk's task reads.
    assert not [a for a in _arrays_in(graph) if a.shape == (400, 400)]
    scattered = [k for k in dict(graph) if "tenure-shared" in str(k)]
    assert len(scattered) == 1
    assert len([a for a in _arrays_in(graph) if a.shape == (400,)]) == 1
    # Within the rounding error of a 400-term dot product in any summation
    # order (the chunks' BLAS and NumPy's need not add in the same order, and
    # an element near zero has no relative accuracy): |error| <= n eps |x| @ |big|.
    got, want = lazy.compute(), (value @ big.get_value()) * small.get_value()
    bound = ((value.shape[1] + 2) * np.finfo(np.float64).eps
             * (np.abs(value) @ np.abs(big.get_value())) * np.abs(small.get_value()))
    off = np.abs(got - want) > 2 * bound
    assert not off.any(), f"{np.count_nonzero(off)} elements beyond the rounding error"


def geometric_sum(n: int) -> float:
    """``sum(exp(k / n) for k in range(n))`` in closed form."""
    return float(np.expm1(1.0) / np.expm1(1.0 / n))   # (r**n - 1) / (r - 1), r = e**(1/n)


def test_larger_than_worker_memory(client):
    n = 128 * 2**20                 # 1 GiB of float64: over twice each worker's limit
    x = tn.vector("x")
    f = tn.function([x], tn.sum(tn.exp(x)), mode=tn.Mode(linker="dask", compute=True))
    data = da.arange(n, chunks=4 * 2**20, dtype=np.float64) / n
    assert data.nbytes > 2 * WORKER_MEMORY
    np.testing.assert_allclose(f(data), geometric_sum(n), rtol=1e-10)


def test_killed_worker_loses_no_result_and_no_update(client):
    n, chunks = 96 * 2**20, 2**20     # 96 tasks of about 20 ms each
    x = tn.vector("x")
    total = tn.shared(np.float64(1.0), name="total")
    f = tn.function([x], tn.sum(tn.exp(x)), updates=[(total, total + tn.sum(tn.exp(x)))],
                    mode=tn.Mode(linker="dask", compute=True))
    data = da.arange(n, chunks=chunks, dtype=np.float64) / n
    victim = sorted(client.scheduler_info()["workers"])[0]
    pid = client.run(os.getpid, workers=[victim])[victim]
    result = {}
    call = threading.Thread(target=lambda: result.setdefault("value", f(data)))
    call.start()
    time.sleep(0.3)
    assert call.is_alive(), "the call ended before the worker was killed: make it longer"
    os.kill(pid, signal.SIGKILL)   # its nanny starts another
    call.join(timeout=120)
    assert not call.is_alive()
    np.testing.assert_allclose(result["value"], geometric_sum(n), rtol=1e-10)
    np.testing.assert_allclose(total.get_value(), 1.0 + geometric_sum(n), rtol=1e-10)
    client.wait_for_workers(2, timeout=60)


def _call_on_worker(pickled: bytes, value):
    """Load a pickled tenure function in a worker process and call it there."""
    return pickle.loads(pickled)(value)


def test_compiled_function_travels_to_workers(client):
    x = tn.matrix("x")
    scale = tn.shared(np.float64(3.0), name="scale")
    f = tn.function([x], tn.exp(x).sum(axis=1) * scale, mode="c")
    value = np.arange(12.0).reshape(3, 4) / 12
    futures = [client.submit(_call_on_worker, pickle.dumps(f), value, pure=False,
                             workers=[w]) for w in client.scheduler_info()["workers"]]
    for got in client.gather(futures):
        np.testing.assert_allclose(got, f(value), rtol=1e-15)
