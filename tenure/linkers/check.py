"""The checking linker: the NumPy executor, verifying every node as it runs.

``tn.Mode(linker="check")`` runs the same plans as the ``py`` linker (the
schedule and the buffer reuse per input-shape signature) and, for each node:

- runs ``perform`` again on private copies of the inputs, with fresh output
  storage, and requires the same values and dtypes (so an op that misuses a
  reused buffer -- last call's, or a dead intermediate's handed to it by the
  plan -- or whose in-place version computes something else, fails);
- requires a dead buffer handed to it to share memory with nothing still held;
- requires every input the op did not declare in ``destroy_map`` to be
  unchanged afterwards;
- requires that an output shares memory with an input only where
  ``view_map``/``destroy_map`` declare it, and that a declared view really is
  a view (unless the op says NumPy may copy: ``view_may_copy``);
- requires outputs of the declared dtype and number of dimensions, matching
  the static shape.

After each call it checks that no protected input (one the caller did not
give away, a shared variable the function does not update) was modified.
Violations raise :class:`CheckError` naming the node.  It is slow: it is for
tests and for hunting bugs.
"""

from __future__ import annotations

import numpy as np

from tenure.linkers.plan import make_plan
from tenure.linkers.python import PythonThunk, take_donor
from tenure.linkers.describe import error_note, user_message
from tenure.rewrites.destroy import DestroyHandler


class CheckError(AssertionError):
    """A node broke its declared behaviour (values, memory, or types)."""


def _snapshot(value):
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def _same(a, b) -> bool:
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        return a is b or a == b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def _close(a, b) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(np.allclose(a, b, rtol=1e-6, atol=1e-12, equal_nan=True))
    return bool(np.array_equal(a, b))


class CheckThunk(PythonThunk):
    """A :class:`PythonThunk` that checks each node and the protected inputs.

    It runs the same plans, buffer reuse included, and also requires that a
    dead buffer handed to a later step shares memory with nothing still held
    (an input, a shared value, a live intermediate, a kept output).
    """

    def __init__(self, plan, keep, protected_slots, fgraph=None):
        super().__init__(plan, keep, fgraph)
        self.protected_slots = tuple(protected_slots)
        self._protected = frozenset(protected_slots)

    def __call__(self, input_values: list) -> list:
        protected = [(slot, value, _snapshot(value))
                     for slot, value in zip(self._input_slots, input_values)
                     if slot in self._protected]
        results = super().__call__(input_values)
        for slot, value, before in protected:
            if not _same(value, before):
                raise CheckError(f"protected input {self.plan.variables[slot]} was modified "
                                 "by the call")
        return results

    def _run_steps(self, steps, storage, aside) -> None:
        """The executor's loop, with every node checked and every hand-on too."""
        for _, node, ins, outs, frees, takes, stash in steps:
            cells = [[storage[o]] for o in outs]
            for k, donor, shape, dtype, size in takes:
                buf = take_donor(aside, donor, shape, dtype, size)
                if buf is not None:
                    self._check_donation(node, donor, buf, aside)
                    cells[k][0] = buf
                del buf  # no loop variable may keep a buffer alive
            self._run_checked(node, ins, outs, cells)
            for s in stash:
                aside[s] = storage[s]
            for f in frees:
                storage[f] = None

    def _check_donation(self, node, donor, buf, aside) -> None:
        """A dead buffer handed to ``node`` must share memory with nothing held."""
        held = [(i, v) for i, v in enumerate(self.storage) if isinstance(v, np.ndarray)]
        held += [(i, v) for i, v in aside.items() if isinstance(v, np.ndarray)]
        for slot, value in held:
            if value.size and np.may_share_memory(buf, value) and np.shares_memory(buf, value):
                raise CheckError(f"the buffer of {self.plan.variables[donor]} was handed to "
                                 f"{node} while {self.plan.variables[slot]} still uses it")

    def _run_checked(self, node, ins, outs, cells) -> None:
        storage = self.storage
        op = node.op
        inputs = [storage[i] for i in ins]
        before = [_snapshot(v) for v in inputs]
        try:
            op.perform(node, inputs, cells)
        except Exception as exc:
            exc.add_note(error_note(node, types=False, step=user_message(exc, node)))
            raise
        outputs = [cell[0] for cell in cells]
        reference = [[None] for _ in node.outputs]
        op.perform(node, [_snapshot(v) for v in before], reference)

        destroyed = {i for targets in op.destroy_map.values() for i in targets}
        # An input showing the same memory as a destroyed one (the same
        # variable twice, or a view of it) is overwritten along with it.
        destroyed |= {i for i, v in enumerate(inputs) if isinstance(v, np.ndarray) and any(
            isinstance(inputs[d], np.ndarray) and np.shares_memory(inputs[d], v)
            for d in destroyed)}
        for i, (now, was) in enumerate(zip(inputs, before)):
            if i not in destroyed and not _same(now, was):
                raise CheckError(f"{node} wrote to input {i} ({node.inputs[i]}) without "
                                 "declaring it in destroy_map")
        for k, (out, ref, var) in enumerate(zip(outputs, reference, node.outputs)):
            self._check_output(node, k, out, ref[0], var, inputs)
        for o, value in zip(outs, outputs):
            storage[o] = value

    @staticmethod
    def _check_output(node, k, out, ref, var, inputs) -> None:
        op = node.op
        if not isinstance(out, np.ndarray):
            raise CheckError(f"{node} output {k} is a {type(out).__name__}, not an ndarray")
        if out.dtype != var.type.numpy_dtype or out.ndim != var.ndim:
            raise CheckError(f"{node} output {k} has dtype {out.dtype} and {out.ndim} "
                             f"dimension(s); declared {var.type}")
        for axis, (want, got) in enumerate(zip(var.type.shape, out.shape)):
            if want is not None and want != got:
                raise CheckError(f"{node} output {k} has shape {out.shape}; declared "
                                 f"{var.type} (axis {axis})")
        if not _close(out, ref):
            raise CheckError(f"{node} output {k} differs from a fresh run of perform on "
                             "copies of its inputs")
        declared = set(op.view_map.get(k, ())) | set(op.destroy_map.get(k, ()))
        # Inputs that are (views of) a declared input's memory are covered by it.
        declared |= {i for i, inp in enumerate(inputs) if isinstance(inp, np.ndarray) and any(
            isinstance(inputs[j], np.ndarray) and np.shares_memory(inputs[j], inp)
            for j in declared)}
        for i, inp in enumerate(inputs):
            if not isinstance(inp, np.ndarray) or out.size == 0:
                continue
            shares = np.shares_memory(out, inp)
            if shares and i not in declared:
                raise CheckError(f"{node} output {k} shares memory with input {i} "
                                 f"({node.inputs[i]}) without declaring it in view_map or "
                                 "destroy_map")
            if (i in op.view_map.get(k, ()) and not shares
                    and not getattr(op, "view_may_copy", False)):
                raise CheckError(f"{node} output {k} is declared a view of input {i} but "
                                 "is a separate array")


class CheckLinker:
    """Compiles a FunctionGraph into a :class:`CheckThunk`."""

    name = "check"

    def make_thunk(self, fgraph, keep_outputs: set[int], allow_gc: bool = True) -> CheckThunk:
        plan = make_plan(fgraph, allow_gc=allow_gc, keep=keep_outputs)
        keep = {plan.outputs[i] for i in keep_outputs}
        handler = next((f for f in fgraph.features if isinstance(f, DestroyHandler)), None)
        given_away = (handler.mutable | handler.updated) if handler else set()
        protected = [slot for slot, var in zip(plan.inputs, fgraph.inputs)
                     if var not in given_away]
        return CheckThunk(plan, keep, protected, fgraph)
