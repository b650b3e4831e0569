"""The C call path of a function (:mod:`tenure.linkers.c.call`).

A function whose every call can skip the Python path's extra work (see
:meth:`tenure.compile.compiled.Function._make_fast_call` for when) is called
through a compiled caller that binds, gates, runs the thunk's C module and
assigns updates holding the same locks a Python call holds.  What the C
caller cannot check itself is done by a thin Python wrapper
(:func:`guard_fast_call`); any call it cannot take goes to ``fallback``.
"""

from __future__ import annotations

from collections.abc import Callable

from tenure.compile.aliasing import any_overlaps_storage
from tenure.linkers.c.call import fast_caller
from tenure.linkers.c.compiler import CompileError
from tenure.linkers.thunk import Thunk


def make_fast_call(thunk: Thunk, *, fallback: Callable, lock, shared_locks: tuple, types,
                   containers, update_containers, n_out: int, single: bool,
                   destroyed_containers: tuple, reentered: Callable):
    """The C caller for ``thunk``, or None (its calls go through Python).

    ``lock``: the function's lock; ``shared_locks``: its shared variables',
    in their global order; ``destroyed_containers``: those whose storage the
    graph overwrites; ``reentered(what)``: the error for a call made inside
    a running one.
    """
    parts = thunk.fast_call_parts()
    if parts is None:
        return None
    # Compiled code runs holding the GIL, so no other call can come in
    # between -- unless a step calls Python (a perform), which may let
    # another thread run: then the call also holds the function's lock.
    runs_python = parts.pop("runs_python")
    locks = ((lock,) if runs_python else ()) + shared_locks
    try:
        fast = fast_caller(**parts, locks=locks, fallback=fallback, types=types,
                           containers=containers, update_containers=update_containers,
                           n_out=n_out, single=single)
    except CompileError:  # the graph compiled, the call path did not: call through Python
        return None
    if not runs_python and not destroyed_containers:
        return fast
    return guard_fast_call(fast, fallback, lock if runs_python else None,
                           destroyed_containers, reentered)


def guard_fast_call(fast, fallback, lock, destroyed_containers: tuple, reentered: Callable):
    """A Python wrapper around ``fast`` doing the two checks the C path
    cannot: a call from inside a running one (only a step calling Python can
    make it: then ``lock`` is the function's lock, else None) is refused,
    and positional arrays overlapping shared storage the graph overwrites go
    to ``fallback`` (the Python path, which copies them under the locks)."""
    is_running_here = lock._is_owned if lock is not None else None

    def guarded(*args, **kwargs):
        if is_running_here is not None and is_running_here():
            raise reentered("call")
        # Read without the locks: the Python path checks again holding them.
        if destroyed_containers and any_overlaps_storage(args, destroyed_containers):
            return fallback(*args, **kwargs)
        return fast(*args, **kwargs)
    return guarded
