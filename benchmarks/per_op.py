"""Where a tenure-c call spends its time: each node of the compiled graph alone.

    python benchmarks/per_op.py [--workload NAME ...] [--quick] [--repeat N]

For each workload (``mlp_infer``, ``mlp_train``, ``softmax_grad`` by default:
the ones issue 17 asks about), the function is compiled with the C linker as
``benchmarks/run.py`` compiles it; then every node of its rewritten graph is
compiled on its own with the C linker and timed on the values it sees in a
real call (computed once with each op's ``perform``).  A node that writes an
input in place runs on a fresh copy each time, and the copy's own time is
taken off.  The table gives each node's time (best of ``--repeat``, default
5), its share of the sum over nodes, and for products the GFLOP/s; the
whole call's time is printed beside the sum (the difference is what running
the nodes one by one, with their own output allocations, costs or saves).

Peak: ``cores x clock x FLOP per cycle`` from ``/proc/cpuinfo`` (two FMA
units per core: 32 float32 FLOP per cycle with AVX2, 64 with AVX-512), and
the achievable peak: SciPy's ``sgemm`` on 2048 x 2048 float32, the BLAS
tenure calls.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from measure import best_time  # noqa: E402
from workloads import LR, WORKLOADS, symbolic_mlp  # noqa: E402

PRODUCTS = ("Dot", "MatMul", "Gemm")


def graph_of(workload: str, data: dict):
    """``(function, arguments)``: the workload compiled with the C linker."""
    import tenure as tn
    mode = tn.Mode(linker="c")
    if workload in ("mlp_infer", "mlp_train"):
        params = [tn.shared(p, borrow=True) for p in data["params"]]
        x = tn.matrix("x", dtype="float32")
        out = symbolic_mlp(tn.relu, x, params)
        if workload == "mlp_infer":
            return tn.function([tn.In(x, borrow=True)], tn.Out(out, borrow=True), mode=mode), \
                [data["x"]]
        t = tn.matrix("t", dtype="float32")
        loss = tn.mean((out - t) ** 2)
        grads = tn.grad(loss, params)
        f = tn.function([tn.In(x, borrow=True), tn.In(t, borrow=True)], loss,
                        updates=[(p, p - LR * g) for p, g in zip(params, grads)], mode=mode)
        return f, [data["x"], data["t"]]
    if workload == "softmax_grad":
        x, w = tn.matrix("x", dtype="float32"), tn.matrix("w", dtype="float32")
        g = tn.grad(tn.sum(tn.softmax(x, axis=1) * w), x)
        f = tn.function([tn.In(x, borrow=True), tn.In(w, borrow=True)], tn.Out(g, borrow=True),
                        mode=mode)
        return f, [data["x"], data["w"]]
    raise SystemExit(f"per_op.py: no graph for {workload!r}")


def node_values(f, args) -> dict:
    """Every variable's value in one call (each node's ``perform`` in order;
    an input a node overwrites is copied first, so every value stays as it
    was made)."""
    from tenure.symbolic.graph import Constant
    fg = f.fgraph
    env = dict(zip(fg.inputs, list(args) + [v.get_value(borrow=True) for v in f.shared_vars]))
    for node in fg.toposort():
        destroyed = {i for ins in getattr(node.op, "destroy_map", {}).values() for i in ins}
        inputs = [v.data if isinstance(v, Constant) else env[v] for v in node.inputs]
        inputs = [np.array(v, copy=True) if i in destroyed else v for i, v in enumerate(inputs)]
        cells = [[None] for _ in node.outputs]
        node.op.perform(node, inputs, cells)
        env.update((out, cell[0]) for out, cell in zip(node.outputs, cells))
    return env


def single_node(node):
    """``(thunk, argument variables)``: ``node`` compiled alone by the C linker."""
    from tenure.linkers.c.linker import CLinker
    from tenure.symbolic.fgraph import FunctionGraph
    from tenure.symbolic.graph import Constant
    args = [v.type() for v in node.inputs if not isinstance(v, Constant)]
    it = iter(args)
    alone = node.op.make_node(*[v if isinstance(v, Constant) else next(it)
                                for v in node.inputs])
    fgraph = FunctionGraph(args, list(alone.outputs))
    return CLinker().make_thunk(fgraph, set()), [v for v in node.inputs
                                                 if not isinstance(v, Constant)]


def node_time(node, env, repeat: int) -> float:
    thunk, variables = single_node(node)
    values = [env[v] for v in variables]
    destroyed = {i for ins in getattr(node.op, "destroy_map", {}).values() for i in ins}
    if not destroyed:
        return best_time(lambda: thunk(values), repeat, 1)
    positions = {variables.index(node.inputs[i]) for i in destroyed}

    def fresh():
        return [np.array(v, copy=True) if k in positions else v for k, v in enumerate(values)]
    return max(best_time(lambda: thunk(fresh()), repeat, 1) - best_time(fresh, repeat, 1), 0.0)


def product_flops(node, env) -> float:
    """2 m n k of a product node (batched: times the batch)."""
    name = type(node.op).__name__
    a = env[node.inputs[2]] if name == "Gemm" else env[node.inputs[0]]   # the left factor
    out = env[node.outputs[0]]
    inner = a.shape[-1] if a.ndim else 1
    return 2.0 * out.size * inner


def machine_peak() -> dict:
    """Theoretical float32 peak (GFLOP/s) from /proc/cpuinfo."""
    mhz, flags, model = None, set(), "unknown"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "cpu MHz" and mhz is None:
                mhz = float(value)
            elif key == "flags" and not flags:
                flags = set(value.split())
            elif key == "model name" and model == "unknown":
                model = value.strip()
    cores = os.cpu_count() or 1
    per_cycle = 64 if "avx512f" in flags else 32 if "fma" in flags else 8
    return {"model": model, "cores": cores, "mhz": mhz, "flop_per_cycle": per_cycle,
            "gflops": cores * (mhz or 0) / 1e3 * per_cycle}


def sgemm_gflops(n: int = 2048, repeat: int = 5) -> float:
    from scipy.linalg.blas import sgemm
    rng = np.random.default_rng(0)
    a = np.asfortranarray(rng.standard_normal((n, n), dtype=np.float32))
    b = np.asfortranarray(rng.standard_normal((n, n), dtype=np.float32))
    return 2.0 * n ** 3 / best_time(lambda: sgemm(1.0, a, b), repeat, 1) / 1e9


def analyse(workload: str, quick: bool, repeat: int) -> list[str]:
    w = WORKLOADS[workload]
    data = w.data(**w.sizes["quick" if quick else "full"], rng=np.random.default_rng(0))
    f, args = graph_of(workload, data)
    call = best_time(lambda: f(*args), repeat, 1)
    env = node_values(f, args)
    rows, total = [], 0.0
    for node in f.fgraph.toposort():
        name = type(node.op).__name__
        if name in ("Shape", "DimShuffle", "Reshape", "SpecifyShape", "Subtensor"):
            continue   # views and shapes: nothing to time
        t = node_time(node, env, repeat)
        total += t
        rate = product_flops(node, env) / t / 1e9 if name in PRODUCTS and t > 0 else None
        rows.append((str(node.op)[:60], name, t, rate))
    lines = [f"### {workload} ({'quick' if quick else 'full'} sizes)", "",
             f"whole call {call * 1e3:.2f} ms; sum over nodes {total * 1e3:.2f} ms", "",
             "| node | time | share | GFLOP/s |", "|---|---|---|---|"]
    for label, name, t, rate in rows:
        lines.append(f"| {label} | {t * 1e3:.2f} ms | {100 * t / total:.1f}% | "
                     f"{'' if rate is None else f'{rate:.0f}'} |")
    by_kind: dict = {}
    for _, name, t, _ in rows:
        kind = "products (BLAS)" if name in PRODUCTS else "everything else"
        by_kind[kind] = by_kind.get(kind, 0.0) + t
    lines += [""] + [f"- {kind}: {t * 1e3:.2f} ms ({100 * t / total:.0f}%)"
                     for kind, t in sorted(by_kind.items())]
    flops = sum(product_flops(n, env) for n in f.fgraph.toposort()
                if type(n.op).__name__ in PRODUCTS)
    if flops:
        gemm = by_kind.get("products (BLAS)", 0.0)
        lines.append(f"- products: {flops / 1e9:.2f} GFLOP, {flops / gemm / 1e9:.0f} GFLOP/s "
                     f"over their time; {flops / call / 1e9:.0f} GFLOP/s over the whole call")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", nargs="*", default=["mlp_infer", "mlp_train",
                                                          "softmax_grad"])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    peak = machine_peak()
    print(f"{peak['model']}, {peak['cores']} cores at {peak['mhz']:.0f} MHz, "
          f"{peak['flop_per_cycle']} float32 FLOP/cycle/core: peak {peak['gflops']:.0f} GFLOP/s; "
          f"SciPy sgemm 2048^3: {sgemm_gflops():.0f} GFLOP/s; "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}\n")
    for workload in args.workload:
        print("\n".join(analyse(workload, args.quick, args.repeat)) + "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
