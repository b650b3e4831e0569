"""A child forked while another thread builds host-compiled kernels can build its own
(issue 41, item 4: every module-level lock is reset after fork)."""

import subprocess
import sys
import textwrap

import pytest

CHILD_TAKES_THE_LOCK = """
import os, threading, time
from tenure.linkers.cuda import host_kernels

held, release = threading.Event(), threading.Event()

def build_in_progress():          # a thread holding the lock, as a build does
    with host_kernels._lock:
        held.set()
        release.wait()

thread = threading.Thread(target=build_in_progress)
thread.start()
held.wait()
pid = os.fork()
if pid == 0:
    got = host_kernels._lock.acquire(timeout=20)
    print("CHILD", got, flush=True)
    os._exit(0 if got else 1)
release.set()
thread.join()
_, status = os.waitpid(pid, 0)
print("PARENT", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="fork is POSIX")
def test_a_child_forked_while_a_thread_builds_host_kernels_can_build():
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD_TAKES_THE_LOCK)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["CHILD", "True", "PARENT", "0"], proc.stdout + proc.stderr
