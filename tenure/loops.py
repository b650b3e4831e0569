"""``tn.scan`` and ``tn.until``: loops over symbolic tensors, with PyTensor's interface.

``scan(fn, sequences, outputs_info, non_sequences, n_steps, ...)`` calls
``fn`` once, on symbolic values standing for one step, and builds a
:class:`~tenure.symbolic.ops.scan.Scan` node from what it returns.  ``fn``
receives, in this order: one slice per sequence tap, one value per state tap
(the states are the ``outputs_info`` entries that are not None), then the
``non_sequences``; it returns the step's outputs and, optionally, a dict (or a
list of pairs) of shared-variable updates and a :func:`until` condition, in
any order (``return y``, ``return [h, y]``, ``return y, {w: w - 1}``,
``return y, until(y > 10)``).

``scan`` returns ``(outputs, updates)``: every output stacked along a new
first axis (one entry per step run), a single variable when there is one
output (unless ``return_list=True``), and the updates to pass on to
:func:`tenure.function` -- the shared variables ``fn`` updated, with their
values after the last step, random streams drawn inside the loop included
(their generator state advances once per step).  A stream drawn inside the
loop also gets the loop's final state as its ``default_update``, so a
function computing the loop advances it by the steps run even when the
updates are not passed on.

What the loop reads but is given neither as a sequence nor as a state --
weights, shared variables, values computed outside ``fn`` -- is a
non-sequence whether listed or not (``strict=True`` requires it listed);
whatever part of the step does not change from step to step (depends on no
sequence, no state, no random draw) is computed once, outside the loop.
"""

from __future__ import annotations

import numbers
from collections import OrderedDict
from collections.abc import Mapping

import numpy as np

from tenure.symbolic.graph import Constant, Variable, clone_get_equiv, io_toposort
from tenure.symbolic.ops.scan import scan_node
from tenure.symbolic.ops.shape import expand_dims, shape_tuple
from tenure.symbolic.shared import SharedVariable
from tenure.symbolic.variable import as_tensor_variable

__all__ = ["Until", "scan", "until"]


class Until:
    """A loop's stop condition (see :func:`until`)."""

    def __init__(self, condition):
        condition = as_tensor_variable(condition)
        if condition.ndim != 0:
            raise TypeError(f"until: the condition must be a 0-d (scalar) value, got "
                            f"{condition} ({condition.type})")
        self.condition = condition


def until(condition) -> Until:
    """Stop the loop after the step where ``condition`` (a 0-d value) is true:
    ``fn`` returns it with its outputs (``return y, until(y > 10)``); the
    outputs then hold the steps run, that step included."""
    return Until(condition)


# -- the loop's arguments, normalized -----------------------------------------

class _Sequence:
    def __init__(self, index: int, value, taps):
        self.label = f"sequences[{index}]"
        self.value = as_tensor_variable(value)
        if self.value.ndim == 0:
            raise TypeError(f"scan: {self.label} is 0-d ({self.value.type}); a sequence is "
                            "iterated over its first axis")
        self.taps = _int_list(taps, f"{self.label}'s taps")


class _State:
    def __init__(self, index: int, initial, taps):
        self.label = f"outputs_info[{index}]"
        self.taps = _int_list(taps, f"{self.label}'s taps")
        if any(t >= 0 for t in self.taps):
            raise ValueError(f"scan: {self.label}'s taps must be negative (earlier steps), got "
                             f"{self.taps}")
        self.taps = sorted(set(self.taps))
        initial = as_tensor_variable(initial)
        depth = -self.taps[0]
        if self.taps == [-1]:
            self.buffer = expand_dims(initial, 0)
        else:
            if initial.ndim == 0:
                raise TypeError(f"scan: {self.label} has taps {self.taps}: its initial value "
                                f"holds {depth} earlier steps along a first axis, got 0-d "
                                f"{initial}")
            known = initial.type.shape[0]
            if known is not None and known < depth:
                raise ValueError(f"scan: {self.label} has taps {self.taps}: its initial value "
                                 f"needs {depth} entries, it has {known}")
            self.buffer = initial[:depth]
        self.type = self.buffer.type.clone(shape=self.buffer.type.shape[1:])


def _int_list(taps, what: str) -> list[int]:
    items = [taps] if isinstance(taps, (numbers.Integral, np.integer)) else taps
    try:
        values = [int(t) for t in items]
    except (TypeError, ValueError):
        raise TypeError(f"scan: {what} must be ints, got {taps!r}") from None
    if not values:
        raise ValueError(f"scan: {what} are empty")
    return values


def _as_list(value, what: str) -> list:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _sequences(sequences) -> list[_Sequence]:
    items = []
    for i, item in enumerate(_as_list(sequences, "sequences")):
        if isinstance(item, Mapping):
            unknown = set(item) - {"input", "taps"}
            if unknown or "input" not in item:
                raise TypeError(f"scan: sequences[{i}] as a dict takes 'input' and 'taps', got "
                                f"{sorted(item)}")
            items.append(_Sequence(i, item["input"], item.get("taps", [0])))
        else:
            items.append(_Sequence(i, item, [0]))
    return items


def _outputs_info(outputs_info) -> list[_State | None]:
    entries = []
    for i, item in enumerate(_as_list(outputs_info, "outputs_info")):
        if isinstance(item, Mapping):
            unknown = set(item) - {"initial", "taps"}
            if unknown:
                raise TypeError(f"scan: outputs_info[{i}] as a dict takes 'initial' and "
                                f"'taps', got {sorted(item)}")
            initial = item.get("initial")
            entries.append(None if initial is None else
                           _State(i, initial, item.get("taps", [-1])))
        else:
            entries.append(None if item is None else _State(i, item, [-1]))
    return entries


# -- what fn returns ------------------------------------------------------------

def _parse_step_result(result, fn_name: str):
    """``(outputs, updates, condition)`` from what ``fn`` returned."""
    parts = list(result) if isinstance(result, tuple) else [result]
    outputs, updates, condition = [], [], None
    for part in parts:
        if isinstance(part, Until):
            if condition is not None:
                raise ValueError(f"scan: {fn_name} returned two until conditions")
            condition = part.condition
        elif isinstance(part, Mapping) or _is_update_list(part):
            updates.extend(part.items() if isinstance(part, Mapping) else part)
        elif isinstance(part, (list, tuple)) and len(parts) > 1:
            outputs.extend(part)
        else:
            outputs.append(part)
    if len(parts) == 1 and isinstance(result, list):
        outputs = list(result)
    return outputs, updates, condition


def _is_update_list(part) -> bool:
    return (isinstance(part, list) and part != [] and all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], SharedVariable)
        for p in part))


def _checked_output(value, fn_name: str, i: int) -> Variable:
    try:
        return as_tensor_variable(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"scan: output {i} of {fn_name} is not a tensor: {exc}") from None


def _check_state_output(state: _State, out: Variable, fn_name: str, i: int) -> None:
    if out.type.dtype != state.type.dtype:
        raise TypeError(f"scan: {fn_name} returns output {i} as {out.type.dtype} but its "
                        f"initial value {state.label} is {state.type.dtype}: a state keeps "
                        f"its dtype (cast one of them, e.g. .astype({state.type.dtype!r}))")
    if out.ndim != state.type.ndim or not state.type.is_compatible_replacement(out.type):
        raise TypeError(f"scan: {fn_name} returns output {i} with type {out.type} but its "
                        f"initial value {state.label} has type {state.type}: a state keeps "
                        f"its shape")


def _check_update(shared: SharedVariable, value, fn_name: str) -> Variable:
    if not isinstance(shared, SharedVariable):
        raise TypeError(f"scan: {fn_name} returned an update of {shared!r}, which is not a "
                        "shared variable")
    value = as_tensor_variable(value)
    if value.type.dtype != shared.type.dtype or value.ndim != shared.ndim:
        raise TypeError(f"scan: {fn_name}'s update of the shared variable {shared} is "
                        f"{value.type}; {shared} is {shared.type}")
    return value


# -- the inner graph --------------------------------------------------------------

def _variant(outputs: list, placeholders: set) -> set:
    """The variables of the step that change from step to step: those that
    depend on a placeholder."""
    changing = set(placeholders)
    for node in io_toposort(list(placeholders), outputs):
        if any(v in changing for v in node.inputs):
            changing.update(node.outputs)
    return changing


def _loop_invariants(outputs: list, changing: set) -> list:
    """The values the step reads that do not change from step to step (the
    highest such values, so that they are computed once, outside the loop):
    each becomes a non-sequence.  Constants stay inside."""
    found, seen = [], set()
    # depth first, inputs in order, with a stack of its own: a step of
    # thousands of chained ops must not reach Python's recursion limit
    stack = list(reversed(outputs))
    while stack:
        var = stack.pop()
        if var in seen:
            continue
        seen.add(var)
        if var not in changing:
            if not isinstance(var, Constant):
                found.append(var)
        elif var.owner is not None:
            stack.extend(reversed(var.owner.inputs))
    return found


def _random_states(outputs: list, explicit: set) -> list[SharedVariable]:
    """Shared variables with a ``default_update`` (random generator states)
    that the step reads and that ``fn`` does not update itself: each advances
    once per step, as a state of the loop."""
    found, seen = [], set()
    for node in io_toposort([], outputs):
        for var in node.inputs:
            if (isinstance(var, SharedVariable) and var.default_update is not None
                    and var not in explicit and var not in seen):
                seen.add(var)
                found.append(var)
    return found


def scan(fn, sequences=None, outputs_info=None, non_sequences=None, n_steps=None,
         truncate_gradient: int = -1, go_backwards: bool = False, name: str | None = None,
         strict: bool = False, return_list: bool = False, checkpoint_every: int | None = None):
    """A loop (see the module doc): returns ``(outputs, updates)``.

    ``sequences``: tensors iterated over their first axis (each a tensor, or
    ``dict(input=x, taps=[-1, 0])``: ``x[t - 1]`` and ``x[t]``).
    ``outputs_info``: one entry per output of ``fn``: None (an output no
    step reads), an initial value (the output is read back as the next
    step's argument), or ``dict(initial=x0, taps=[-2, -1])`` (``x0`` holds the
    two values before step 0, oldest first).  ``non_sequences``: passed to
    every step as they are.  ``n_steps``: the number of steps (an int or a
    0-d integer tensor); by default the sequences' length, which must then be
    the same for all.  ``go_backwards``: iterate the sequences from the end.
    ``truncate_gradient``: the gradient runs back at most that many steps
    (-1: all).  ``checkpoint_every=k``: the gradient keeps only the states
    before every ``k``-th step and recomputes the others, a segment at a time
    (for ``n`` steps, ``n / k + k`` states instead of ``n``; ``k`` near
    ``sqrt(n)`` keeps fewest), at the cost of one more forward pass; not for
    a ``until`` loop.
    """
    fn_name = name or getattr(fn, "__name__", "fn")
    seqs = _sequences(sequences)
    states_info = _outputs_info(outputs_info)
    explicit_nonseqs = [as_tensor_variable(v) for v in _as_list(non_sequences, "non_sequences")]
    truncate_gradient = int(truncate_gradient)
    every = _checkpoint_every(checkpoint_every)
    if truncate_gradient == 0 or truncate_gradient < -1:
        raise ValueError(f"scan: truncate_gradient must be -1 (no truncation) or a positive "
                         f"number of steps, got {truncate_gradient}")

    slices, slice_values, slice_labels = _sequence_slices(seqs, go_backwards)
    n_steps, exact = _steps(n_steps, slice_values)
    tap_holders = [[state.type(name=f"{state.label}[t{tap}]") for tap in state.taps]
                   for state in states_info if state is not None]
    args = list(slices) + [v for holders in tap_holders for v in holders] + explicit_nonseqs
    outputs, updates, condition = _parse_step_result(fn(*args), fn_name)
    outputs = [_checked_output(v, fn_name, i) for i, v in enumerate(outputs)]
    if outputs_info is not None and len(outputs) != len(states_info):
        raise ValueError(f"scan: {fn_name} returns {len(outputs)} outputs but outputs_info has "
                         f"{len(states_info)} entries (one per output: None for an output "
                         f"no step reads back)")
    if outputs_info is None:
        states_info = [None] * len(outputs)
    state_outputs, nitsot_outputs = [], []
    for i, (state, out) in enumerate(zip(states_info, outputs)):
        if state is None:
            nitsot_outputs.append(out)
        else:
            _check_state_output(state, out, fn_name, i)
            state_outputs.append(out)

    updates = [(shared, _check_update(shared, value, fn_name)) for shared, value in updates]
    explicit = {shared for shared, _ in updates}
    if len(explicit) != len(updates):
        raise ValueError(f"scan: {fn_name} updates a shared variable twice")
    reads = state_outputs + nitsot_outputs + [v for _, v in updates] + \
        ([condition] if condition is not None else [])
    random_states = _random_states(reads, explicit)
    updates += [(s, s.default_update) for s in random_states]
    reads += [v for _, v in updates[len(explicit):]]
    shared_holders = {shared: shared.type(name=f"{shared.name or 'shared'}[t-1]")
                      for shared, _ in updates}
    step_outputs = state_outputs + [v for _, v in updates] + nitsot_outputs + \
        ([condition] if condition is not None else [])
    step_outputs = _replace(step_outputs, shared_holders)
    placeholders = set(slices) | {v for h in tap_holders for v in h} | set(shared_holders.values())
    invariants = _loop_invariants(step_outputs, _variant(step_outputs, placeholders))
    _check_strict(strict, invariants, explicit_nonseqs, fn_name)
    nonseq_holders = {var: var.type(name=var.name) for var in invariants}
    step_outputs = _replace(step_outputs, nonseq_holders)

    user_states = [s for s in states_info if s is not None]
    state_taps = [tuple(s.taps) for s in user_states] + [(-1,)] * len(updates)
    inner_inputs = (list(slices) + [v for h in tap_holders for v in h]
                    + list(shared_holders.values()) + list(nonseq_holders.values()))
    labels = {"sequences": slice_labels,
              "states": [s.label for s in user_states]
              + [f"the update of {shared}" for shared, _ in updates],
              "outputs": [f"output {i}" for i, s in enumerate(states_info) if s is None],
              "non_sequences": [str(v) for v in invariants]}
    outer_buffers = [s.buffer for s in user_states] + [expand_dims(shared, 0)
                                                       for shared, _ in updates]
    results = scan_node(inner_inputs, step_outputs, n_steps, slice_values, outer_buffers,
                        invariants, state_taps=state_taps, n_nitsot=len(nitsot_outputs),
                        as_while=condition is not None, exact_length=exact,
                        truncate_gradient=truncate_gradient, labels=labels,
                        checkpoint_every=_no_checkpoints_in_until(every, condition, fn_name))
    outputs, new_values = _user_results(results, states_info, updates, return_list)
    # A stream drawn in the loop advances once per step: its default update
    # (the draw made in fn, which would run once, outside) becomes the loop's.
    for state in random_states:
        state.default_update = new_values[state]
    return outputs, new_values


def _checkpoint_every(value) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)) \
            or value < 1:
        raise ValueError(f"scan: checkpoint_every must be a positive number of steps (or None), "
                         f"got {value!r}")
    return int(value)


def _no_checkpoints_in_until(every: int, condition, fn_name: str) -> int:
    if every and condition is not None:
        raise ValueError(f"scan: checkpoint_every is not available for a until loop "
                         f"({fn_name} returns tn.until(...)): its length is known once it ran")
    return every


def _replace(outputs: list, mapping: dict) -> list:
    if not mapping:
        return outputs
    equiv = clone_get_equiv([], outputs, replace=dict(mapping), copy_inputs=False)
    return [equiv.get(v, v) for v in outputs]


def _sequence_slices(seqs: list[_Sequence], go_backwards: bool):
    """One step placeholder per sequence tap, the sliced sequences the loop
    iterates, and their labels."""
    holders, values, labels = [], [], []
    for seq in seqs:
        x = seq.value[::-1] if go_backwards else seq.value
        low, high = min(seq.taps), max(seq.taps)
        for tap in seq.taps:
            end = tap - high
            piece = x[tap - low:end if end else None]
            holders.append(x.type.clone(shape=x.type.shape[1:])(
                name=f"{seq.label}[t{tap:+d}]" if tap else f"{seq.label}[t]"))
            values.append(piece)
            labels.append(seq.label if len(seq.taps) == 1 else f"{seq.label} at tap {tap}")
    return holders, values, labels


def _steps(n_steps, slice_values) -> tuple:
    """``(n_steps as a 0-d int64, whether the sequences must have exactly
    that length)``."""
    if n_steps is None:
        if not slice_values:
            raise ValueError("scan: give n_steps, or at least one sequence to take the number "
                             "of steps from")
        return shape_tuple(slice_values[0])[0], True
    if isinstance(n_steps, (numbers.Integral, np.integer)) and not isinstance(n_steps, bool):
        if n_steps < 0:
            raise ValueError(f"scan: n_steps must be >= 0, got {n_steps}")
        return as_tensor_variable(np.int64(n_steps)), False
    n_steps = as_tensor_variable(n_steps)
    if n_steps.ndim != 0 or n_steps.type.numpy_dtype.kind not in "iu":
        raise TypeError(f"scan: n_steps must be an int or a 0-d integer tensor, got {n_steps} "
                        f"({n_steps.type})")
    return n_steps, False


def _check_strict(strict: bool, invariants: list, explicit: list, fn_name: str) -> None:
    if not strict:
        return
    listed = set(explicit)
    missing = [v for v in invariants if v not in listed and v.owner is None]
    if missing:
        raise ValueError(f"scan(strict=True): {fn_name} reads "
                         f"{', '.join(str(v) for v in missing)}, not given in non_sequences")


def _user_results(results: list, states_info: list, updates: list, return_list: bool):
    n_user = sum(s is not None for s in states_info)
    trajectories, nitsots, finals, _ = results[0].owner.op.output_groups(results)
    outputs, state_i, nitsot_i = [], 0, 0
    for state in states_info:
        if state is None:
            outputs.append(nitsots[nitsot_i])
            nitsot_i += 1
        else:
            outputs.append(trajectories[state_i])
            state_i += 1
    new_values = OrderedDict((shared, final) for (shared, _), final
                             in zip(updates, finals[n_user:]))
    if len(outputs) == 1 and not return_list:
        return outputs[0], new_values
    return outputs, new_values
