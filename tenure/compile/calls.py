"""A call as a transaction: the locks it holds, re-entry, Ctrl-C.

A function's call holds the function's own lock (one call at a time uses
its storage) and then its shared variables' locks, in their one global
order (see :class:`~tenure.symbolic.shared.Container`), so calls are atomic
with respect to the shared variables they read and update, from any thread.
Ctrl-C is held from the commit point to the assignment of the updates (see
:mod:`tenure.linkers.interrupts`).  A call made from inside a running call of
the same function, in the same thread, is refused before it changes anything.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence

from tenure.linkers.interrupts import begin_call, end_call


class ReentrantCallError(RuntimeError):
    """A function was called (or reported on) from inside one of its own
    calls, in the same thread: the running call owns its buffers, so the
    inner one is refused before it changes anything."""


def reentered_error(label: str, what: str) -> ReentrantCallError:
    """The error for a call (or report) made inside a running call of the
    function ``label`` names, in the same thread (from one of its steps)."""
    return ReentrantCallError(
        f"{label}: a {what} was made while a call of "
        f"the same function is running in this thread (from inside one of its "
        f"steps, such as an op's perform); a function cannot be re-entered, since "
        f"the running call owns its buffers and its shared variables' transaction.  "
        f"Nothing was changed by this {what}.  Compute the value another way, or "
        f"call a copy that updates nothing (f.copy(delete_updates=True))")


def call_locks(containers) -> tuple[threading.RLock, tuple]:
    """A new function lock, and the locks of these shared variables'
    containers, each once, in the global order."""
    unique = {id(c): c for c in containers}.values()
    return threading.RLock(), tuple(c.lock for c in sorted(unique, key=lambda c: c.serial))


def run_transaction(locks: Sequence, holds_interrupts: bool, run: Callable):
    """``run()`` holding ``locks`` (in order); with ``holds_interrupts`` (the
    call assigns updates), a Ctrl-C from the commit point on is delivered
    only when this has returned."""
    token = begin_call() if holds_interrupts else -1
    held = 0
    try:
        for lock in locks:
            lock.acquire()
            held += 1
        return run()
    finally:
        for k in range(held - 1, -1, -1):
            locks[k].release()
        # Last: a Ctrl-C held meanwhile is delivered when this call has returned.
        end_call(token)


@contextlib.contextmanager
def holding(locks: Sequence):
    """Hold ``locks`` (in order), as a call does."""
    held = 0
    try:
        for lock in locks:
            lock.acquire()
            held += 1
        yield
    finally:
        for k in range(held - 1, -1, -1):
            locks[k].release()
