"""The Markdown table and the PNG chart, from the raw results of ``run.py``.

``python benchmarks/report.py benchmarks/results/bench.json`` draws them again
from a saved JSON file (next to it, and prints the table).
"""

from __future__ import annotations

import json
import os
import sys

#: memory ratios treat a peak below this as this much (tiny peaks are noise)
MEM_FLOOR_MB = 1.0
#: a row is marked when other processes used at least this many cores meanwhile
BUSY_CORES = 0.3


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def _ratio(text_value: float) -> str:
    cell = f"{text_value:.2f}"
    return f"**{cell}**" if text_value > 1.1 else cell


def _label(r: dict) -> str:
    return r["workload"] + (f" [{r['variant']}]" if r.get("variant") else "")


def _ok(doc: dict) -> list[dict]:
    return [r for r in doc["results"] if r["status"] == "ok"]


def _tenure_systems(doc: dict) -> list[str]:
    seen = []
    for r in doc["results"]:
        if r["system"].startswith("tenure-") and r["system"] not in seen:
            seen.append(r["system"])
    return seen


def ratios(doc: dict) -> list[dict]:
    """Every (tenure system, peer) pair measured on the same workload: time and memory
    ratios tenure/peer (> 1: tenure is slower / needs more)."""
    ok = _ok(doc)
    by_key = {(_label(r), r["system"]): r for r in ok}
    out = []
    for t in _tenure_systems(doc):
        for r in ok:
            mine = by_key.get((_label(r), t))
            if mine is None or r["system"] == t:
                continue
            out.append({"workload": _label(r), "tenure": t, "peer": r["system"],
                        "time": mine["time_s"] / r["time_s"],
                        "memory": (max(mine["peak_extra_mb"], MEM_FLOOR_MB)
                                   / max(r["peak_extra_mb"], MEM_FLOOR_MB))})
    return out


def furthest_behind(doc: dict, n: int = 3) -> list[dict]:
    """The ``n`` largest ratios (time or memory) where tenure trails a peer."""
    rows = []
    for q in ratios(doc):
        if q["peer"].startswith("tenure-"):
            continue
        for metric in ("time", "memory"):
            if q[metric] > 1:
                rows.append({**q, "metric": metric, "ratio": q[metric]})
    return sorted(rows, key=lambda q: -q["ratio"])[:n]


def markdown(doc: dict) -> str:
    m = doc["machine"]
    tenures = _tenure_systems(doc)
    ok = _ok(doc)
    by_key = {(_label(r), r["system"]): r for r in ok}
    lines = [f"Benchmarks ({doc['scale']}), {doc['date'][:10]}: {m['cores']} cores, {m['cpu']}, "
             f"{m.get('memory_gib')} GiB; tenure {doc.get('tenure_source') or '?'}; "
             f"`{doc['command']}`; total {doc.get('wall_s', 0):.0f} s.", ""]
    found = {}
    for r in ok:
        for name, version in r.get("versions", {}).items():
            if name in ("numpy", "pytensor", "torch", "jax", "python"):
                found.setdefault(name, version)
    if found:
        lines[0] += " Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(found.items())) + "."
    head = ["workload", "system", "time/call", "compile", "peak extra MB", "held MB"]
    for t in tenures:
        head += [f"{t}/sys time", f"{t}/sys mem"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    marked = False
    for r in ok:
        label = _label(r)
        busy = r.get("foreign_load_cores", 0) >= BUSY_CORES
        marked |= busy
        compile_s = f"{r['compile_s']:.2f} s" if r["compile_s"] else "—"
        cells = [label, r["system"] + (" †" if busy else ""), fmt_time(r["time_s"]), compile_s,
                 f"{r['peak_extra_mb']:.1f}",
                 f"{max(r['held_mb'], 0.0):.0f}" if "held_mb" in r else "—"]
        for t in tenures:
            mine = by_key.get((label, t))
            if mine is None or r["system"] == t:
                cells += ["—", "—"]
            else:
                cells += [_ratio(mine["time_s"] / r["time_s"]),
                          _ratio(max(mine["peak_extra_mb"], MEM_FLOOR_MB)
                                 / max(r["peak_extra_mb"], MEM_FLOOR_MB))]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "time/call: median of the measured runs after warm-up. peak extra MB: growth of "
              "the resident high-water mark over the resident size after warm-up "
              f"({_peak_methods(ok)}). Ratios are tenure/system: above 1 (bold above 1.1) tenure "
              f"is slower or needs more; memory ratios count a peak under {MEM_FLOOR_MB:g} MB as "
              f"{MEM_FLOOR_MB:g} MB. compile: graph, gradients and compilation. held MB: resident "
              "growth from just before compiling to after warm-up (compiled code, caches, and "
              "buffers kept between calls, e.g. torch's .grad tensors); not in the ratios."]
    if marked:
        lines.append(f"†: other processes used ≥ {BUSY_CORES} cores while this row ran; its "
                     "time is less trustworthy.")

    borrow = [r for r in ok if r["workload"] == "borrow_steady_state"]
    if borrow:
        lines += ["", "Steady state, `Out(borrow=True)` vs `Out(borrow=False)` "
                  "(the elemwise function, per call):", "",
                  "| system | Out | time/call | traced peak MB | traced kept MB | "
                  "fresh pages MB | peak extra MB |", "|---|---|---|---|---|---|---|"]
        for r in borrow:
            lines.append(f"| {r['system']} | {r['variant']} | {fmt_time(r['time_s'])} | "
                         f"{r['traced_peak_mb_per_call']:.2f} | {r['traced_kept_mb_per_call']:.2f}"
                         f" | {r['fresh_mb_per_call']:.2f} | {r['peak_extra_mb']:.1f} |")
        lines += ["", "traced: tracemalloc; peak: the highest traced memory during a call above "
                  "its level before the call; kept: what the call left allocated (a fresh result). "
                  "fresh pages: minor page faults x page size per call, i.e. newly mapped memory "
                  "touched, whichever allocator asked for it (a cross-check of the traced "
                  "numbers)."]

    lines += budget_table(ok)

    behind = furthest_behind(doc)
    if behind:
        lines += ["", "Furthest behind (largest tenure/peer ratios):", ""]
        for q in behind:
            lines.append(f"- {q['workload']}, {q['tenure']} vs {q['peer']}: {q['metric']} "
                         f"x{q['ratio']:.2f}")
    other = [r for r in doc["results"] if r["status"] != "ok"]
    if other:
        lines += ["", "Not measured:", ""]
        for r in other:
            lines.append(f"- {_label(r)} x {r['system']}: {r['status']}: {r.get('reason', '')}")
    return "\n".join(lines) + "\n"


#: issue 7's targets at budget 0.5, relative to the same function at budget 1.0
BUDGET_TARGETS = {"budget 0.5": {"peak": 0.6, "time": 1.35}}


def budget_table(ok: list[dict]) -> list[str]:
    """Lines comparing each tenure run under a budget with its run at 1.0 (and
    with the peers, which keep every activation)."""
    rows = [r for r in ok if r["workload"].startswith("mlp_train_budget")]
    if not rows:
        return []
    base = {(r["workload"], r["system"]): r for r in rows if r["variant"] == "budget 1.0"}
    peers = sorted({r["system"] for r in rows if not r["system"].startswith("tenure-")})
    head = ["workload", "system", "budget", "time/call", "peak extra MB", "time vs 1.0",
            "peak vs 1.0"] + [f"peak vs {p}" for p in peers]
    lines = ["", "Activation-memory budgets: each tenure run against the same function at "
             "budget 1.0 and against peers (which keep every activation). Target at 0.5: "
             "peak ≤ 0.6x and time ≤ 1.35x of 1.0 (✓ met, ✗ missed).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if not r["system"].startswith("tenure-"):
            continue
        ref = base.get((r["workload"], r["system"]))
        cells = [r["workload"], r["system"], r["variant"].split()[-1], fmt_time(r["time_s"]),
                 f"{r['peak_extra_mb']:.1f}"]
        target = BUDGET_TARGETS.get(r["variant"], {})
        for metric, key in (("time", "time_s"), ("peak", "peak_extra_mb")):
            if ref is None:
                cells.append("—")
                continue
            value = r[key] / max(ref[key], 1e-12)
            mark = ("" if metric not in target else
                    " ✓" if value <= target[metric] else " ✗")
            cells.append(f"{value:.2f}{mark}")
        for p in peers:
            peer = base.get((r["workload"], p))
            cells.append("—" if peer is None else
                         f"{max(r['peak_extra_mb'], MEM_FLOOR_MB) / max(peer['peak_extra_mb'], MEM_FLOOR_MB):.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _peak_methods(ok: list[dict]) -> str:
    methods = sorted({r.get("peak_method", "?") for r in ok})
    names = {"vmhwm": "VmHWM reset through /proc/self/clear_refs",
             "vmrss-sampler": "VmHWM could not be reset here: VmRSS sampled every 1 ms, "
                              "which can miss short peaks"}
    return "; ".join(names.get(m, m) for m in methods)


def chart(doc: dict, path: str) -> bool:
    """Time and peak memory per workload, one bar per system; False without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = _ok(doc)
    labels = list(dict.fromkeys(_label(r) for r in ok))
    systems = list(dict.fromkeys(r["system"] for r in doc["results"]))
    colors = {s: plt.cm.tab10(i % 10) for i, s in enumerate(systems)}
    fig, axes = plt.subplots(len(labels), 2, figsize=(11, 1.0 + 1.5 * len(labels)),
                             squeeze=False)
    for row, label in enumerate(labels):
        rs = [r for r in ok if _label(r) == label]
        names = [r["system"] for r in rs]
        tiny = max(r["time_s"] for r in rs) < 1e-3
        for col, (key, unit, scale) in enumerate((
                ("time_s", "µs / call" if tiny else "ms / call", 1e6 if tiny else 1e3),
                ("peak_extra_mb", "peak extra MB", 1))):
            ax = axes[row][col]
            values = [r[key] * scale for r in rs]
            ax.barh(range(len(rs)), values, color=[colors[n] for n in names])
            ax.set_yticks(range(len(rs)), names, fontsize=8)
            ax.invert_yaxis()
            ax.tick_params(axis="x", labelsize=7)
            for i, v in enumerate(values):
                ax.text(v, i, f" {v:.3g}", va="center", fontsize=7)
            ax.set_xlim(0, max(values + [1e-9]) * 1.25)
            ax.set_title(unit, fontsize=8, loc="left")
            if col == 0:
                ax.set_ylabel(label, fontsize=8, rotation=0, ha="right", va="center")
    m = doc["machine"]
    fig.suptitle(f"tenure vs peers ({doc['scale']}), {doc['date'][:10]}, {m['cores']} cores "
                 f"{m['cpu']}", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if len(paths) != 1:
        print("usage: python benchmarks/report.py RESULTS.json", file=sys.stderr)
        return 2
    with open(paths[0]) as f:
        doc = json.load(f)
    stem = os.path.splitext(paths[0])[0]
    table = markdown(doc)
    with open(stem + ".md", "w") as f:
        f.write(table)
    chart(doc, stem + ".png")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
