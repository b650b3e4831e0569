"""Running one benchmark worker in a fresh process and reading its result:
shared by the CPU suite (``run.py``) and the GPU suite (``gpu.py``).

A worker prints its result as one JSON line; a worker that times out or
dies (out of memory, a driver fault) is reported by its last words instead.
"""

from __future__ import annotations

import json
import subprocess


def worker_result(cmd: list[str], timeout: float, env: dict | None = None) -> dict:
    """The JSON result of the worker ``cmd``, or an error naming why there is none."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "error", "reason": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"status": "error", "reason": f"worker exited with {proc.returncode}: {tail[0][:300]}"}
