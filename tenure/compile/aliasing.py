"""What a function's results may alias, decided once at compile time, and the
copies each call makes to keep the memory contract.

:func:`analyse_aliasing` follows every output and update value of the
rewritten graph to the buffer it may be (its *root*: an input, shared
storage, a constant or a fresh buffer) and records, per result, only what it
could clash with (:class:`Hazards`); most functions have none, and their
calls check nothing.  The helpers below are what a call does with them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tenure.compile.io import In, Out
from tenure.rewrites.destroy import buffer_roots, destroyers
from tenure.symbolic.device import runtime_of
from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.graph import Constant, Variable


@dataclass
class Hazards:
    """What one result (output or update value) may alias, decided at compile
    time; each call then checks only these with ``np.may_share_memory``."""
    inputs: list[int] = field(default_factory=list)     # explicit inputs, always checked
    defaults: list[int] = field(default_factory=list)   # explicit inputs, checked when defaulted
    shared: list[int] = field(default_factory=list)     # shared variables
    constant: bool = False                              # a constant's data
    #: a constant's data through a borrowed output: lent as the function's own
    #: writable copy, made once (see :func:`copy_where_needed`)
    lent_constant: bool = False
    outputs: list[int] = field(default_factory=list)    # other outputs
    updates: list[int] = field(default_factory=list)    # other update values

    def __bool__(self):
        return bool(self.inputs or self.defaults or self.shared or self.constant
                    or self.lent_constant or self.outputs or self.updates)


@dataclass
class Aliasing:
    """The result of :func:`analyse_aliasing`."""
    #: mutable inputs the graph overwrites: copied at call time when they
    #: overlap another argument, so writing one never changes another
    destroyed_inputs: list[int]
    #: shared variables whose storage the graph overwrites (an update in
    #: place): an argument overlapping one is copied first
    destroyed_shared: list[int]
    update_hazards: list[Hazards]
    output_hazards: list[Hazards]
    #: borrowed outputs whose buffer must not be reused next call (it may
    #: also become shared storage, or is an input or a constant)
    no_reuse: set[int]
    #: mutable inputs the call may overwrite or make shared storage: a
    #: read-only argument for one is copied first
    writable_inputs: list[int]

    @property
    def any_hazard(self) -> bool:
        """Whether any result may need a copy at all (most functions: none)."""
        return any(self.update_hazards) or any(self.output_hazards)


def analyse_aliasing(fgraph: FunctionGraph, inputs: list[In], outputs: list[Out],
                     update_shared_index: list[int]) -> Aliasing:
    """What each result of ``fgraph`` (``len(outputs)`` outputs, then the
    update values) may alias; ``fgraph``'s inputs are ``inputs``' variables,
    then shared variables."""
    n_in, n_out = len(inputs), len(outputs)
    explicit = {var: i for i, var in enumerate(fgraph.inputs[:n_in])}
    shared = {var: i for i, var in enumerate(fgraph.inputs[n_in:])}
    root_of = buffer_roots(fgraph.toposort(), fgraph.inputs)
    roots = [root_of.get(v, v) for v in fgraph.outputs]
    out_roots, upd_roots = roots[:n_out], roots[n_out:]
    destroyed = {root_of.get(v, v) for v in destroyers(fgraph.apply_nodes)}
    destroyed_inputs = [i for var, i in explicit.items() if var in destroyed]

    def hazards(root: Variable, k: int, is_update: bool) -> Hazards:
        h = Hazards()
        if root in explicit:
            i = explicit[root]
            spec = inputs[i]
            # Outputs may alias borrowed inputs; shared storage may only adopt
            # a buffer the caller gave away (mutable).  A default value is the
            # function's own and is never handed out.
            if not (spec.mutable if is_update else spec.borrow):
                h.inputs.append(i)
            elif spec.value is not None:
                h.defaults.append(i)
        elif root in shared:
            j = shared[root]
            if is_update:
                if update_shared_index[k] != j:
                    h.shared.append(j)
            elif not outputs[k].borrow:
                h.shared.append(j)
        elif isinstance(root, Constant) and not is_update and outputs[k].borrow:
            # The caller may write into what it borrows, and the constant
            # (read-only on the host, the graph's own on a device) is not the
            # function's to lend: it lends its own copy.
            h.lent_constant = True
        elif isinstance(root, Constant):
            h.constant = True
        if is_update:
            h.updates = [u for u in range(k) if upd_roots[u] is root]
        elif not outputs[k].borrow:
            h.outputs = [o for o in range(n_out) if o != k and out_roots[o] is root
                         and (o < k or outputs[o].borrow)]
            h.updates = [u for u, r in enumerate(upd_roots) if r is root]
        return h

    return Aliasing(
        destroyed_inputs=destroyed_inputs,
        destroyed_shared=[j for var, j in shared.items() if var in destroyed],
        update_hazards=[hazards(r, k, True) for k, r in enumerate(upd_roots)],
        output_hazards=[hazards(r, k, False) for k, r in enumerate(out_roots)],
        no_reuse={k for k, r in enumerate(out_roots) if r in upd_roots or r in explicit
                  or r in shared or isinstance(r, Constant)},
        writable_inputs=sorted(set(destroyed_inputs) | {
            explicit[r] for r in upd_roots if r in explicit and inputs[explicit[r]].mutable}))


def copy_where_needed(aliasing: Aliasing, update_shared_index: list[int], outputs, updates,
                      values, shared_values, from_default, lent_constants: dict) -> None:
    """Copy each result that aliases memory the contract keeps it from aliasing.

    A borrowed output of a constant is the function's own writable copy in
    ``lent_constants`` (output index: array), made on the first call and lent
    by every call: as in PyTensor, it is the output's buffer, so what a
    caller writes into it stays there."""
    # What each shared variable holds after this call: an update value whose
    # buffer was another shared variable's is fine if that one moves to a new
    # buffer (a swap), and must be copied if it keeps it.
    final_shared = list(shared_values)
    for k, j in enumerate(update_shared_index):
        final_shared[j] = updates[k]

    def clashes(arr, h: Hazards, shared_arrays) -> bool:
        if h.constant:
            return True
        return (any(np.may_share_memory(arr, values[i]) for i in h.inputs)
                or any(from_default is not None and from_default[i]
                       and np.may_share_memory(arr, values[i]) for i in h.defaults)
                or any(np.may_share_memory(arr, shared_arrays[j]) for j in h.shared)
                or any(np.may_share_memory(arr, updates[u]) for u in h.updates)
                or any(np.may_share_memory(arr, outputs[o]) for o in h.outputs))

    for k, h in enumerate(aliasing.update_hazards):
        if h and clashes(updates[k], h, final_shared):
            updates[k] = final_shared[update_shared_index[k]] = updates[k].copy()
    for k, h in enumerate(aliasing.output_hazards):
        if h.lent_constant:
            if k not in lent_constants:
                lent_constants[k] = outputs[k].copy()
            outputs[k] = lent_constants[k]
        elif h and (clashes(outputs[k], h, shared_values)
                    or any(np.may_share_memory(outputs[k], final_shared[j]) for j in h.shared)):
            # An output must not alias shared storage from before or after the call.
            outputs[k] = outputs[k].copy()


def copy_inputs_over_destroyed_shared(aliasing: Aliasing, values, shared_values) -> None:
    """Copy an argument that overlaps shared storage the graph overwrites
    (an update computed in place): the graph would otherwise read it
    after writing it.  A mutable input the graph overwrites is left to
    :func:`separate_destroyed_inputs`, which copies it instead."""
    destroyed = [shared_values[j] for j in aliasing.destroyed_shared]
    for i, value in enumerate(values):
        if i not in aliasing.destroyed_inputs and any(
                may_overlap(value, storage) for storage in destroyed):
            values[i] = value.copy()


def separate_destroyed_inputs(aliasing: Aliasing, values, shared_values) -> None:
    """Copy a mutable input the graph overwrites when it overlaps another argument."""
    for i in aliasing.destroyed_inputs:
        others = [v for j, v in enumerate(values) if j != i] + shared_values
        if any(np.may_share_memory(values[i], other) for other in others):
            values[i] = values[i].copy()


def may_overlap(value, storage) -> bool:
    """Whether an argument and shared storage may share memory (in the same
    memory: host arrays, or device arrays of one runtime)."""
    runtime = runtime_of(storage)
    if runtime is None:
        return isinstance(value, np.ndarray) and np.may_share_memory(value, storage)
    return runtime_of(value) is runtime and runtime.may_share_memory(value, storage)


def any_overlaps_storage(args, containers) -> bool:
    """Whether a positional NumPy argument overlaps a container's host
    storage (the C path's check: it takes exact ndarrays only)."""
    for arg in args:
        if type(arg) is np.ndarray:
            for container in containers:
                if np.may_share_memory(arg, container.value):
                    return True
    return False
