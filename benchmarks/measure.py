"""Timing and memory measurement inside one worker process (Linux).

Peak memory is the growth of the process's resident high-water mark (VmHWM in
``/proc/self/status``) over its resident size after warm-up.  The mark is
reset by writing ``5`` to ``/proc/self/clear_refs`` just before the measured
runs.  Where that reset does not work, a thread samples VmRSS every
millisecond instead; the result says which method it used
(``peak_method``), since sampling can miss a short peak.
"""

from __future__ import annotations

import gc
import math
import os
import resource
import statistics
import threading
import time
import tracemalloc

import numpy as np

PAGE = os.sysconf("SC_PAGE_SIZE")
MB = 1024 * 1024


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def rss() -> int:
    """Resident set size now, in bytes."""
    return _status_kb("VmRSS") * 1024


def hwm() -> int:
    """Resident high-water mark, in bytes."""
    return _status_kb("VmHWM") * 1024


def reset_hwm() -> bool:
    """Reset VmHWM to the current RSS; False when the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def hwm_reset_works() -> bool:
    """Check on this machine that resetting VmHWM really lowers it."""
    block = np.ones(64 * MB // 8)  # touched: raises the mark by 64 MB
    del block
    if not reset_hwm():
        return False
    return hwm() - rss() < 16 * MB


class PeakMeter:
    """``start()`` after warm-up, ``stop()`` after the measured runs -> peak extra bytes."""

    def __init__(self):
        self.method = "vmhwm" if hwm_reset_works() else "vmrss-sampler"
        self._thread = None

    def start(self) -> None:
        self.baseline = rss()
        if self.method == "vmhwm":
            reset_hwm()
        else:
            self._peak = self.baseline
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, rss())
            time.sleep(0.001)

    def stop(self) -> int:
        if self.method == "vmhwm":
            peak = hwm()
        else:
            self._stop.set()
            self._thread.join()
            peak = max(self._peak, rss())
        return max(peak - self.baseline, 0)


def best_time(action, repeat: int, warmup: int = 0) -> float:
    """The shortest of ``repeat`` timed runs of ``action()``, after ``warmup``
    untimed ones (the scripts that compare a few configurations by hand)."""
    for _ in range(warmup):
        action()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def calibrate(step, warmup: int, min_run_s: float) -> tuple[int, float]:
    """Warm up, then pick how many calls one timed run makes (``inner``) so that a
    run lasts at least ``min_run_s``.  Returns (inner, seconds per call)."""
    t = math.inf
    for _ in range(max(warmup, 1)):
        start = time.perf_counter()
        step()
        t = min(t, time.perf_counter() - start)
    inner = max(1, math.ceil(min_run_s / max(t, 1e-9)))
    if inner > 1:  # warm the loop itself too, and re-estimate
        start = time.perf_counter()
        for _ in range(inner):
            step()
        t = (time.perf_counter() - start) / inner
        inner = max(1, math.ceil(min_run_s / max(t, 1e-9)))
    return inner, t


def timed_runs(step, inner: int, per_call_s: float, target_s: float, min_repeats: int,
               max_repeats: int, meter: PeakMeter) -> dict:
    """The measured runs: median seconds per call, peak extra memory, page faults."""
    repeats = min(max(round(target_s / (per_call_s * inner)), min_repeats), max_repeats)
    times = []
    gc.collect()
    gc.disable()
    try:
        meter.start()
        faults = minor_faults()
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(inner):
                step()
            times.append((time.perf_counter() - start) / inner)
        faults = minor_faults() - faults
        peak = meter.stop()
    finally:
        gc.enable()
    return {"time_s": statistics.median(times), "times_s": times, "repeats": repeats,
            "inner": inner, "baseline_rss_mb": meter.baseline / MB, "peak_extra_mb": peak / MB,
            "peak_method": meter.method,
            "fresh_mb_per_call": faults * PAGE / MB / (repeats * inner)}


def traced_per_call(step, calls: int) -> dict:
    """tracemalloc, steady state: per call, the peak of traced memory above its level
    before the call, and what the call left allocated (the result, held by the caller
    until the next call)."""
    peaks, kept = [], []
    result = step()
    tracemalloc.start()
    try:
        for _ in range(calls):
            del result
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            result = step()
            current, peak = tracemalloc.get_traced_memory()
            peaks.append(peak - before)
            kept.append(current - before)
    finally:
        tracemalloc.stop()
    del result
    return {"traced_peak_mb_per_call": statistics.median(peaks) / MB,
            "traced_kept_mb_per_call": statistics.median(kept) / MB}
