"""The thunk interface: what every linker returns and what a function calls.

A linker (:class:`Linker`) turns a rewritten
:class:`~tenure.symbolic.fgraph.FunctionGraph` into a :class:`Thunk`;
:class:`~tenure.function.Function` drives every linker's thunk through this
interface alone.  The contract:

- ``thunk(values) -> results``: ``values`` are the graph's inputs in order
  (the function's arguments, filtered, then the shared variables' storage);
  ``results`` its outputs in order (the function's outputs, then the new
  values of its updates).  A thunk never assigns shared storage itself.
- the input gate: :meth:`Thunk.filter_input` checks and converts an argument
  (default: the input type's own ``filter``); :meth:`Thunk.place_inputs`
  moves trusted arguments where the thunk computes (default: nowhere).
- buffers held between calls: ``kept_slots`` names the output slots whose
  buffers survive a call (borrowed outputs); :meth:`Thunk.kept_buffers`,
  :meth:`Thunk.drop_kept` and :meth:`Thunk.free` read and release them.
- ``fresh_results``: the thunk itself returns results that alias nothing the
  memory contract forbids, so the function copies none after a call.
- ``runtime``: the device runtime whose memory the thunk computes in, or
  None for host memory (shared storage must be there too).
- :meth:`Thunk.fast_call_parts`: what the C call path needs to run the
  thunk without Python, or None (every call goes through Python).
- :meth:`Thunk.steps_runner`: what runs a loop's steps over this thunk
  without Python between them, or None.
- :meth:`Thunk.set_call_layout`: told once, after compiling, how the values
  and results split into arguments / shared storage and outputs / updates.
- reports: :meth:`Thunk.private_copy` and :meth:`Thunk.plan_for`
  (:mod:`tenure.linkers.report`).

:class:`Thunk` gives every optional part the default that means "nothing
special"; a linker's thunk subclasses it and overrides what it does.
"""

from __future__ import annotations

import abc
import copy
from typing import Any, Protocol

from tenure.symbolic.types import DOWNCAST_HINT


class Thunk(abc.ABC):
    """The base of every linker's thunk (see the module notes)."""

    #: output slots whose buffers survive the call (borrowed outputs)
    kept_slots: tuple = ()
    #: whether results already keep the memory contract (nothing to copy)
    fresh_results: bool = False
    #: the device runtime the thunk computes on; None: host memory
    runtime = None

    @abc.abstractmethod
    def __call__(self, values: list) -> list:
        """The graph's results for these input values."""

    # -- the input gate -----------------------------------------------------------
    @staticmethod
    def filter_input(type_, value, allow_downcast: bool | None, what: str, strict: bool = False,
                     downcast_hint: str = DOWNCAST_HINT):
        """``value`` checked and converted for an input of ``type_`` (``what``
        names it in errors; ``strict``: no conversion at all;
        ``downcast_hint``: how a refused lossy cast may be allowed).
        Default: ``type_.filter``."""
        return type_.filter(value, strict=strict, allow_downcast=allow_downcast, what=what,
                            downcast_hint=downcast_hint)

    def place_inputs(self, values: list) -> list:
        """Trusted arguments (``trust_input`` skips the gate) moved to where
        the thunk computes.  Default: where they are."""
        return values

    # -- buffers held between calls --------------------------------------------------
    def kept_buffers(self) -> list[tuple[Any, Any]]:
        """The buffers held between calls, as ``(slot, array)``."""
        return []

    def drop_kept(self, slot) -> None:
        """Stop reusing the kept buffer of ``slot`` (the caller holds it)."""

    def free(self) -> None:
        """Release every buffer held between calls."""

    # -- the call path ---------------------------------------------------------------------
    def fast_call_parts(self) -> dict | None:
        """What :func:`tenure.linkers.c.call.fast_caller` needs to run this
        thunk, or None: calls go through Python."""
        return None

    def steps_runner(self, types, lock):
        """A runner of many calls of this thunk as a loop's step (see
        :meth:`tenure.compile.compiled.Function.run_steps`), or None: the
        loop calls the function once per step.  ``types``: the inputs'
        tensor types; ``lock``: the function's."""
        return None

    def set_call_layout(self, n_args: int, n_out: int, update_inputs) -> None:
        """``n_args`` arguments come first in a call's values, then shared
        storage; results are ``n_out`` outputs, then updates, the ``k``-th
        of the storage at values position ``update_inputs[k]``.  Default:
        not needed."""

    # -- reports ------------------------------------------------------------------------------
    def private_copy(self) -> Thunk:
        """A copy a memory report may run beside the function's own calls
        (see :func:`tenure.linkers.report.private_thunk`)."""
        return copy.copy(self)

    def plan_for(self, input_values: list):
        """The memory plan a call with these values runs."""
        raise NotImplementedError(f"{type(self).__name__} has no memory plan to report")


class Linker(Protocol):
    """What a linker is: a ``name`` and ``make_thunk``.  ``keep_outputs``:
    the indices of the outputs whose buffers may be kept between calls
    (borrowed outputs); ``allow_gc``: free intermediates as soon as they
    are dead.  A linker that reads the ``In`` specs says so in
    :data:`tenure.linkers.table.LINKERS` and also gets ``input_specs`` and
    ``n_outputs``."""

    name: str

    def make_thunk(self, fgraph, keep_outputs: set[int], allow_gc: bool = True,
                   **options) -> Thunk:
        ...


def mark_update_steps(fgraph, n_outputs: int, updated: list) -> None:
    """Mark the nodes of ``fgraph`` that compute only new values of shared
    variables (outputs ``n_outputs`` on: the updates of ``updated``, in
    order), so that an error raised by one of them can say which update
    failed (:func:`step_note`).  A node that also feeds an output of the
    function is not marked.  ``fgraph.update_names`` keeps the names, for a
    linker that lowers graphs of its own with the same outputs (Dask) to
    mark them too."""
    fgraph.update_names = tuple(str(var) for var in updated)
    feeds: dict = {}     # variable -> (feeds a function output, names of the updates it feeds)
    order = {str(var): k for k, var in reversed(list(enumerate(updated)))}
    for k, out in enumerate(fgraph.outputs):
        to_output, names = feeds.get(out, (False, ()))
        if k < n_outputs:
            to_output = True
        else:
            var = updated[k - n_outputs]
            names = names + (str(var),)
        feeds[out] = (to_output, names)
    for node in reversed(fgraph.toposort()):
        to_output, names = False, ()
        for out in node.outputs:
            o, n = feeds.get(out, (False, ()))
            to_output |= o
            names += tuple(name for name in n if name not in names)
        node.update_of = () if to_output else tuple(sorted(names, key=order.get))
        for inp in node.inputs:
            o, n = feeds.get(inp, (False, ()))
            feeds[inp] = (o or to_output, n + tuple(name for name in names if name not in n))


def step_note(node) -> str:
    """``", in the update of shared variable 's'"`` for a node that computes
    only the new value of ``s`` (see :func:`mark_update_steps`), else ``""``."""
    names = getattr(node, "update_of", ())
    if not names:
        return ""
    if len(names) == 1:
        return f", in the update of shared variable {names[0]!r}"
    return (", in the updates of shared variables "
            + ", ".join(repr(name) for name in names))
