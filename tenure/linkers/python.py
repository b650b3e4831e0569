"""The NumPy executor: the reference linker.

It runs the plan's schedule over a flat storage list, calling each op's
``perform``.  Intermediates are dropped right after their last reader (when the
plan was made with ``allow_gc``); without it they stay between calls and each
op writes its next result into last call's buffer.  Output slots listed in
``keep`` (borrowed outputs) keep their array between calls in either case.
"""

from __future__ import annotations

import numpy as np

from tenure.linkers.plan import Plan, make_plan
from tenure.rewrites.destroy import view_root


class PythonThunk:
    """Runs one compiled graph.  ``thunk(input_values) -> output values``."""

    def __init__(self, plan: Plan, keep: set[int] = frozenset()):
        self.plan = plan
        #: output slots whose buffer survives the call (borrowed outputs)
        self.kept_slots = tuple(sorted(keep))
        self.storage: list = [None] * plan.n_slots
        for slot, value in plan.constants.items():
            self.storage[slot] = value
        # The steps as plain tuples: the loop below is the per-call hot path.
        self._steps = [(s.node.op.perform, s.node, s.inputs, s.outputs, s.frees)
                       for s in plan.steps]
        # Dropped after each call: inputs (the caller's), results handed out,
        # and the buffers results are views of -- a result handed out must not
        # be overwritten by the next call, even with allow_gc off.
        slot_of = {var: i for i, var in enumerate(plan.variables)}
        result_roots = {slot_of[view_root(plan.variables[s])] for s in plan.outputs
                        if s not in keep}
        self._clear_after = tuple(
            slot for slot in set(plan.inputs) | set(plan.outputs) | result_roots
            if slot not in plan.constants and slot not in keep)

    def kept_buffers(self) -> list[tuple[int, np.ndarray]]:
        """The buffers held between calls, as (slot, array)."""
        return [(s, self.storage[s]) for s in self.kept_slots if self.storage[s] is not None]

    def drop_kept(self, slot: int) -> None:
        self.storage[slot] = None

    def free(self) -> None:
        """Release every buffer held between calls."""
        for slot in self.kept_slots:
            self.storage[slot] = None

    def __call__(self, input_values: list) -> list:
        storage = self.storage
        for slot, value in zip(self.plan.inputs, input_values):
            storage[slot] = value
        try:
            for perform, node, ins, outs, frees in self._steps:
                cells = [[storage[o]] for o in outs]
                perform(node, [storage[i] for i in ins], cells)
                for o, cell in zip(outs, cells):
                    storage[o] = cell[0]
                for f in frees:
                    storage[f] = None
        except Exception as exc:
            self._clear_intermediates()
            exc.add_note(f"tenure: raised while computing {node} "
                         f"(inputs: {', '.join(f'{v} {v.type}' for v in node.inputs)})")
            raise
        results = [storage[o] for o in self.plan.outputs]
        for slot in self._clear_after:
            storage[slot] = None
        return results

    def _clear_intermediates(self) -> None:
        """After a failed call, hold nothing but constants and kept buffers."""
        keep = set(self.plan.constants) | set(self.kept_slots)
        for slot in range(len(self.storage)):
            if slot not in keep:
                self.storage[slot] = None


class PythonLinker:
    """Compiles a FunctionGraph into a :class:`PythonThunk`."""

    name = "py"

    def make_thunk(self, fgraph, keep_outputs: set[int], allow_gc: bool = True) -> PythonThunk:
        """``keep_outputs``: indices of fgraph outputs whose buffers may be reused."""
        plan = make_plan(fgraph, allow_gc=allow_gc)
        keep = {plan.outputs[i] for i in keep_outputs}
        return PythonThunk(plan, keep)
