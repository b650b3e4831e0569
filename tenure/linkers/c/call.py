"""The C linker's call path: a compiled function called without Python in between.

A :class:`~tenure.function.Function` called with positional arrays pays most
of its time binding arguments and running the input gate in Python (a few
microseconds; the compiled graph of a small function runs in a fraction of
one).  :func:`fast_caller` builds, for a function compiled by the C linker,
a ``FastCall`` object (a C type of the C runtime, :mod:`.runtime`, compiled
once per machine and kept in the C cache) that does the whole call in C when it can:

- **the input gate**: one positional argument per input, each an exact
  ``numpy.ndarray`` of the input's dtype (native byte order), ndim and static
  lengths.  Anything else -- keyword arguments, defaults, Python lists,
  another dtype, an ndarray subclass, a wrong ndim or length -- goes to the
  ``fallback`` (the Python path, which converts or raises the same clear
  exceptions it always does), so no input, however wrong, reaches the
  compiled graph unchecked;
- ``locks``: taken (without waiting) before the shared variables' values
  are read and released after the updates are assigned, so the call is
  atomic with respect to them; when one is held elsewhere, the call goes to
  the ``fallback``, which waits for it;
- the shared variables' values, read from their containers;
- the shape table of the input-shape signature (``table_for(values) ->
  (table, cacheable)``, kept while the shapes of the values do not change);
- the graph's ``run``, then the updates written to their containers and the
  outputs returned (the one output itself for a single-output function);
- Ctrl-C: ``run`` acts on it until the call first writes shared storage (see
  :mod:`tenure.linkers.c.module`); one that arrived after that, in a call
  with updates, is handed to ``deliver_interrupt`` once the updates are
  assigned (the call completes; :mod:`tenure.linkers.interrupts`).

When ``run`` raises, ``on_error(exception)`` is called first (it clears the
intermediates and adds the note naming the step), then the exception
propagates unchanged.

Only functions whose calls need nothing more are given one: see
:meth:`tenure.function.Function._make_fast_call` for the conditions (no
copies the contract might need, no destroyed inputs to separate, and kept
buffers only where the C code itself checks them against the inputs).

A loop's step is called many times in a row: :class:`StepsRunner` runs a
range of steps through the runtime's ``run_steps`` (``src/loop.c``), with
the same checks done once for the range instead of once per step.
"""

from __future__ import annotations

import numpy as np

from tenure.linkers.c import runtime
from tenure.linkers.interrupts import deliver_interrupt_later

__all__ = ["StepsRunner", "fast_caller"]


def fast_call_type():
    """The ``FastCall`` type: part of the C runtime (``src/fastcall.c``),
    built on first use, then from the C cache (see :mod:`.runtime`)."""
    return runtime.load_runtime().FastCall


def gate_entry(ttype) -> tuple:
    """What the C gate checks for an input of tensor type ``ttype``."""
    return (int(np.dtype(ttype.dtype).num), ttype.ndim,
            tuple(-1 if d is None else int(d) for d in ttype.shape))


def fast_caller(*, run, storage, py_steps, status, table_for, on_error, fallback, types,
                containers, update_containers, locks, n_out: int, single: bool):
    """A ``FastCall`` (see the module doc); ``types``: the explicit inputs' tensor
    types; ``locks``: what each call holds, in the order to take them."""
    return fast_call_type()(run=run, storage=storage, py_steps=py_steps, status=status,
                            table_for=table_for, on_error=on_error, fallback=fallback,
                            gate=tuple(gate_entry(t) for t in types),
                            containers=tuple(containers),
                            update_containers=tuple(update_containers),
                            locks=tuple(locks), deliver_interrupt=deliver_interrupt_later,
                            n_out=n_out, single=single)


class StepsRunner:
    """Steps ``first..stop-1`` of a loop over a thunk the C call path can run,
    in the runtime's ``run_steps`` (``src/loop.c`` says what ``reads``,
    ``writes`` and ``cond`` hold): ``runner(args, reads, writes, cond, first,
    stop) -> (t, fired, bad_write, bad_value)``, or None when these
    arguments cannot take that path (the loop then calls the step itself).

    What the C call path checks per call is checked here once: every
    argument passes the gate (each read's rows have one dtype and shape,
    so its row at ``first`` stands for all), and the shape table of these
    shapes holds for every call (it is not read from argument values)."""

    def __init__(self, parts: dict, types, lock):
        self._run_steps = runtime.load_runtime().run_steps
        self._thunk_parts = (parts["run"], parts["storage"], parts["py_steps"], parts["status"],
                             parts["on_error"])
        self._table_for = parts["table_for"]
        self._types = tuple(types)
        self._lock = lock

    def __call__(self, args: list, reads: tuple, writes: tuple, cond: int, first: int,
                 stop: int):
        values = list(args)
        for pos, base, start, modulus in reads:
            if type(base) is not np.ndarray or base.ndim < 1:
                return None
            row = start + first
            values[pos] = base[row % modulus if modulus else row, ...]
        if not all(map(_accepts, self._types, values)):
            return None
        table, holds_for_every_call = self._table_for(values)
        if not holds_for_every_call:
            return None
        run_steps = self._run_steps
        if self._lock is None:
            return run_steps(*self._thunk_parts, table, args, reads, writes, cond, first, stop)
        with self._lock:   # a step calling Python may let another thread in
            return run_steps(*self._thunk_parts, table, args, reads, writes, cond, first, stop)


def _accepts(ttype, value) -> bool:
    """Whether ``value`` passes the C gate for an input of type ``ttype`` as it is."""
    if type(value) is not np.ndarray or value.ndim != ttype.ndim or not value.dtype.isnative:
        return False
    if value.dtype != ttype.numpy_dtype:
        return False
    return all(want is None or want == got for want, got in zip(ttype.shape, value.shape))
