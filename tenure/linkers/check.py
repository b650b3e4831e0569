"""The checking linker: the NumPy executor, verifying every node as it runs.

``tn.Mode(linker="check")`` runs the same schedule as the ``py`` linker and,
for each node:

- runs ``perform`` again on private copies of the inputs, with fresh output
  storage, and requires the same values and dtypes (so an op that misuses a
  reused buffer, or whose in-place version computes something else, fails);
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
from tenure.linkers.python import PythonThunk
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
    """A :class:`PythonThunk` that checks each node and the protected inputs."""

    def __init__(self, plan, keep, protected_slots):
        super().__init__(plan, keep)
        self.protected_slots = tuple(protected_slots)

    def __call__(self, input_values: list) -> list:
        storage = self.storage
        for slot, value in zip(self.plan.inputs, input_values):
            storage[slot] = value
        protected = [(slot, _snapshot(storage[slot])) for slot in self.protected_slots]
        try:
            for step in self.plan.steps:
                self._run_checked(step)
                for f in step.frees:
                    storage[f] = None
        except Exception:
            self._clear_intermediates()
            raise
        for slot, before in protected:
            if not _same(storage[slot], before):
                var = self.plan.variables[slot]
                raise CheckError(f"protected input {var} was modified by the call")
        results = [storage[o] for o in self.plan.outputs]
        for slot in self._clear_after:
            storage[slot] = None
        return results

    def _run_checked(self, step) -> None:
        storage, node = self.storage, step.node
        op = node.op
        inputs = [storage[i] for i in step.inputs]
        before = [_snapshot(v) for v in inputs]
        cells = [[storage[o]] for o in step.outputs]
        try:
            op.perform(node, inputs, cells)
        except Exception as exc:
            exc.add_note(f"tenure: raised while computing {node}")
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
        for o, value in zip(step.outputs, outputs):
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
        plan = make_plan(fgraph, allow_gc=allow_gc)
        keep = {plan.outputs[i] for i in keep_outputs}
        handler = next((f for f in fgraph.features if isinstance(f, DestroyHandler)), None)
        given_away = (handler.mutable | handler.updated) if handler else set()
        protected = [slot for slot, var in zip(plan.inputs, fgraph.inputs)
                     if var not in given_away]
        return CheckThunk(plan, keep, protected)
