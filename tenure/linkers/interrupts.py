"""Ctrl-C and the commit phase of a call.

A call is a transaction (see :mod:`tenure.linkers.commit`): until its first
write into a shared variable's storage (the *commit point*) it may stop at
any moment and nothing the caller sees has changed; from there on it must
run to its end, through the assignment of the updates.  So a KeyboardInterrupt
is welcome before the commit point and must wait after it.

Before the commit point the executors check for a pending SIGINT at every
step boundary (the Python executor simply lets Python's own handler raise;
C code calls ``PyErr_CheckSignals`` between steps and inside long loops).  At
the commit point a linker calls :func:`enter_commit`; the function calls
:func:`leave_commit` once its updates are assigned (or the call failed).  In
between, in the main thread (the only thread Python delivers signals to), a
SIGINT is recorded instead of raised, and delivered again once the call has
returned (:func:`deliver_interrupt_later`): the call completes, returns its
results, and the KeyboardInterrupt arrives in the caller's code a moment
later.  Only Python's default handler is replaced this way; a handler of the
user's own stays in place (it decides what Ctrl-C does).

Code that runs no Python between the commit point and the assignment (the C
linker's compiled call path) needs no handler: no handler runs there.  It
checks for a pending SIGINT once the updates are assigned and hands it to
:func:`deliver_interrupt_later` too.

Why later, from another thread: CPython acts on a pending signal at its next
check, and it checks right after every call of a C function -- a flag set
before returning would raise the KeyboardInterrupt from the call itself.
"""

from __future__ import annotations

import _thread
import signal
import threading
import time

__all__ = ["enter_commit", "leave_commit", "commit_depth", "deliver_interrupt_later"]

#: how long after a call returns a held Ctrl-C is delivered
REDELIVERY_DELAY_S = 0.002

_MAIN_THREAD_ID = threading.main_thread().ident

#: calls of the main thread in their commit phase (nested calls: a perform
#: calling another function)
_depth = 0
#: the handler replaced while ``_depth > 0`` (None: nothing replaced)
_saved = None
#: a SIGINT arrived during a commit phase
_pending = False


def _record_interrupt(signum, frame) -> None:
    global _pending
    _pending = True


def commit_depth() -> int:
    """The current depth, to hand back to :func:`leave_commit` (0 outside the main thread)."""
    return _depth if threading.get_ident() == _MAIN_THREAD_ID else 0


def enter_commit() -> None:
    """From now on this call must complete: hold SIGINT until it has."""
    global _depth, _saved
    if threading.get_ident() != _MAIN_THREAD_ID:
        return
    if _depth == 0 and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _record_interrupt)
        _saved = signal.default_int_handler
    _depth += 1


def leave_commit(depth: int) -> None:
    """Back to ``depth`` (from :func:`commit_depth` before the call): at 0, put
    the default handler back and deliver a SIGINT that arrived meanwhile."""
    global _depth, _saved, _pending
    if threading.get_ident() != _MAIN_THREAD_ID or _depth <= depth:
        return
    _depth = depth
    if depth == 0 and _saved is not None:
        signal.signal(signal.SIGINT, _saved)
        _saved = None
        if _pending:
            _pending = False
            deliver_interrupt_later()


def _interrupt_main_soon() -> None:
    time.sleep(REDELIVERY_DELAY_S)
    _thread.interrupt_main(signal.SIGINT)


def deliver_interrupt_later() -> None:
    """Raise KeyboardInterrupt in the main thread shortly, once the call that
    held it has returned."""
    _thread.start_new_thread(_interrupt_main_soon, ())
