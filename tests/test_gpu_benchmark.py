"""The GPU benchmark's worker (benchmarks/gpu.py) runs tenure's rows on the
emulated device: its first-call check against NumPy passes, and a borrowed
output allocates nothing per call while an unborrowed one allocates its
result (counts, not times: timings never go in the test suite)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import default_flags_env

GPU_BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def _worker(workload: str, variant: str) -> dict:
    proc = subprocess.run([sys.executable, str(GPU_BENCHMARK), "--worker", "--system",
                           "tenure-cuda", "--workload", workload, "--variant", variant,
                           "--quick", "--emulated"],
                          env=default_flags_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("variant, allocations", [("borrow=True", 0.0), ("borrow=False", 1.0)])
def test_borrowed_output_rows(cc_or_skip, variant, allocations):
    row = _worker("borrow_steady_state", variant)
    assert row["status"] == "ok", row
    assert row["check"]["max_rel_error"] < 1e-6
    assert row["allocations_per_call"] == allocations
