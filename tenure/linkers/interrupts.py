"""Ctrl-C and the commit phase of a call.

A call is a transaction (see :mod:`tenure.linkers.commit`): until its first
write into a shared variable's storage (the *commit point*) it may stop at
any moment and nothing the caller sees has changed; from there on it must
run to its end, through the assignment of the updates.  So a KeyboardInterrupt
is welcome before the commit point and must wait after it.

A call through Python of a function with updates runs between
:func:`begin_call` and :func:`end_call`.  In the main thread (the only thread
Python delivers signals to) they put a handler of ours in place of Python's
default one: until the call reaches its commit point it raises
KeyboardInterrupt just as the default handler does; after it (a linker calls
:func:`mark_committed` there, and the function once more before assigning
the updates), it records the SIGINT instead, and :func:`end_call` delivers it
again once the call has returned (:func:`deliver_interrupt_later`): the call
completes, returns its results, and the KeyboardInterrupt arrives in the
caller's code a moment later.  Any other handler stays in place, during the
call and after it: the user's own (it decides what Ctrl-C does), ``SIG_IGN``
(a process started in the background, under ``nohup`` or by a CI runner
that ignores SIGINT: no Ctrl-C reaches the call) or ``SIG_DFL``.  So after a
call, SIGINT is handled by whatever handled it before.  A thunk called on its own (a memory report's
measured run) marks nothing: :func:`mark_committed` outside a call is a no-op.

Before the commit point the executors let the handler act between steps
(the Python executor runs Python between steps anyway; C code calls
``PyErr_CheckSignals`` between steps and inside long loops).  Code that runs
no Python from the commit point to the assignment (the C linker's compiled
call path) needs no handler at all: it checks for a pending SIGINT once the
updates are assigned and hands it to :func:`deliver_interrupt_later` too.

Why later, from another thread: CPython acts on a pending signal at its next
check, and it checks right after every call of a C function -- a flag set
before returning would raise the KeyboardInterrupt from the call itself.
And the thread needs the GIL, which a long compiled call holds: so the next
call through :func:`begin_call` delivers it first thing, whichever comes
first (a loop of calls stops at the start of the next one, nothing done).
"""

from __future__ import annotations

import _thread
import signal
import threading
import time

__all__ = ["begin_call", "end_call", "mark_committed", "deliver_interrupt_later"]

#: how long after a call returns a held Ctrl-C is delivered
REDELIVERY_DELAY_S = 0.002

_MAIN_THREAD_ID = threading.main_thread().ident

#: calls in progress in the main thread (a perform may call another function)
_depth = 0
#: the depth of the outermost call that passed its commit point (0: none)
_committed_at = 0
#: the default handler, while ours is in place (None: ours is not)
_saved = None
#: a SIGINT arrived after a commit point
_pending = False
#: one entry per held SIGINT handed on to be raised again (a list: its
#: ``pop`` is atomic, so the thread and the next call never both raise it)
_redeliver: list = []


def _on_sigint(signum, frame) -> None:
    global _pending
    if _committed_at:
        _pending = True   # the call must complete first
    else:
        raise KeyboardInterrupt


def begin_call() -> int:
    """A call with updates starts; returns the token for :func:`end_call`."""
    global _depth, _saved
    if threading.get_ident() != _MAIN_THREAD_ID:
        return -1
    if _depth == 0 and _take_redelivery():
        raise KeyboardInterrupt   # held by the last call: this one does not start
    if _depth == 0 and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
        _saved = signal.default_int_handler
    _depth += 1
    return _depth - 1


def mark_committed() -> None:
    """The running call passed its commit point: hold SIGINT until it ends."""
    global _committed_at
    if _depth and not _committed_at and threading.get_ident() == _MAIN_THREAD_ID:
        _committed_at = _depth


def end_call(token: int) -> None:
    """The call that :func:`begin_call` returned ``token`` for has ended (or
    failed): at the outermost one, the default handler is back and a SIGINT
    held meanwhile is delivered."""
    global _depth, _committed_at, _saved, _pending
    if token < 0:
        return
    _depth = token
    if _committed_at > token:
        _committed_at = 0
    if token == 0 and _saved is not None:
        signal.signal(signal.SIGINT, _saved)
        _saved = None
        if _pending:
            _pending = False
            deliver_interrupt_later()


def _take_redelivery() -> bool:
    try:
        _redeliver.pop()
    except IndexError:
        return False
    return True


def _interrupt_main_soon() -> None:
    time.sleep(REDELIVERY_DELAY_S)
    if _take_redelivery():
        _thread.interrupt_main(signal.SIGINT)


def deliver_interrupt_later() -> None:
    """Raise KeyboardInterrupt in the main thread shortly, once the call that
    held it has returned (or at the start of the next call, if sooner)."""
    _redeliver.append(True)
    _thread.start_new_thread(_interrupt_main_soon, ())
