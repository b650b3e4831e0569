"""Per-call time of a small 20-node graph on the GPU: where launch overhead is
all there is, and where whole-function CUDA graphs should pay.

    python benchmarks/cuda_graph_overhead.py [--calls 2000]

The graph, on a 1,000-element float32 vector ``x`` already on the device:
five rounds of ``y = tanh(y * 1.1 + 0.1); y = y - mean(y)``, then ``sum(y * y)``
(20 nodes, 5 reductions, so no system can fuse it into one kernel).

Systems: tenure's CUDA linker with ``config.cuda_graphs`` on and off, PyTorch
eager, ``torch.compile(mode="reduce-overhead")`` (PyTorch's CUDA graphs) and
JAX ``jit``.  Each is warmed up, then timed two ways: single calls each
followed by a device synchronization (median), and a burst of calls with one
synchronization at the end (mean per call: the throughput a training loop
sees).  Results agree with NumPy's to float32 tolerance before any timing.

Needs a CUDA device (prints why not and exits 0 where there is none)."""

import argparse
import statistics
import sys
import time

import numpy as np

ROUNDS = 5
N = 1000
FUNCTIONS = {}  # cuda_graphs flag -> tenure's function, for graph_status after the runs


def reference(x):
    y = x.astype(np.float64)
    for _ in range(ROUNDS):
        y = np.tanh(y * 1.1 + 0.1)
        y = y - y.mean()
    return (y * y).sum()


def tenure_system(x_host, graphs: bool):
    import tenure as tn
    from tenure.symbolic.device import cuda_runtime
    rt = cuda_runtime()
    x = tn.vector("x", dtype="float32")
    y = x
    for _ in range(ROUNDS):
        y = tn.tanh(y * np.float32(1.1) + np.float32(0.1))
        y = y - tn.mean(y)
    # read at each call: this system's calls and measurement come next, alone
    tn.config.cuda_graphs = graphs
    f = tn.function([tn.In(x, borrow=True)], tn.Out(tn.sum(y * y), borrow=True),
                    mode=tn.Mode(linker="cuda"))
    FUNCTIONS[graphs] = f
    xd = rt.from_host(x_host)
    return (lambda: f(xd)), rt.synchronize, (lambda r: float(rt.to_host(r)))


def torch_system(x_host, compiled: bool):
    import torch

    def step(x):
        y = x
        for _ in range(ROUNDS):
            y = torch.tanh(y * 1.1 + 0.1)
            y = y - y.mean()
        return (y * y).sum()
    fn = torch.compile(step, mode="reduce-overhead") if compiled else step
    xd = torch.from_numpy(x_host).cuda()

    def call():
        with torch.inference_mode():
            return fn(xd)
    return call, torch.cuda.synchronize, (lambda r: float(r.item()))


def jax_system(x_host):
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(x):
        y = x
        for _ in range(ROUNDS):
            y = jnp.tanh(y * 1.1 + 0.1)
            y = y - y.mean()
        return (y * y).sum()
    xd = jax.device_put(jnp.asarray(x_host))
    last = []

    def call():
        r = step(xd)
        last[:] = [r]
        return r

    def sync():
        for r in last:
            r.block_until_ready()
    return call, sync, (lambda r: float(r))


SYSTEMS = {
    "tenure-cuda [graphs on]": lambda x: tenure_system(x, True),
    "tenure-cuda [graphs off]": lambda x: tenure_system(x, False),
    "torch": lambda x: torch_system(x, False),
    "torch-compile [reduce-overhead]": lambda x: torch_system(x, True),
    "jax": jax_system,
}


def measure(call, sync, calls: int) -> dict:
    for _ in range(20):
        call()
    sync()
    single = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        sync()
        single.append(time.perf_counter() - start)
    start = time.perf_counter()
    for _ in range(calls):
        call()
    sync()
    burst = (time.perf_counter() - start) / calls
    return {"synchronized_us": statistics.median(single) * 1e6, "burst_us": burst * 1e6}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no CuPy, no driver or no device: nothing to measure
        print(f"cuda_graph_overhead: no CUDA device ({exc.__class__.__name__}: {exc})")
        return 0
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    want = reference(x)
    rows = []
    for name, make in SYSTEMS.items():
        try:
            call, sync, value = make(x)
            got = value(call())
            sync()
        except Exception as exc:  # a missing peer is a row that says so, not a failure
            rows.append((name, f"skipped: {exc.__class__.__name__}: {str(exc)[:120]}"))
            continue
        if not np.isclose(got, want, rtol=1e-4, atol=1e-4):
            rows.append((name, f"WRONG RESULT {got} (want {want})"))
            continue
        m = measure(call, sync, args.calls)
        rows.append((name, f"{m['synchronized_us']:8.1f} us synchronized, "
                           f"{m['burst_us']:8.1f} us per call in a burst"))
    print(f"20-node graph on {N} float32 ({ROUNDS} reductions), {args.calls} calls each:")
    for name, text in rows:
        print(f"  {name:34s} {text}")
    if FUNCTIONS:
        from tenure.linkers.cuda.graphs import graph_status
        for flag, f in FUNCTIONS.items():
            print(f"tenure cuda_graphs={flag}: {graph_status(f)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
