"""What a function computes, checked and built before anything is compiled.

Givens are substituted, updates (explicit and default) checked against their
shared variables, inputs checked for being needed (unused) and sufficient
(missing), and :func:`build_graph` clones the result into the
:class:`~tenure.symbolic.fgraph.FunctionGraph` a function compiles.
:func:`check_storage` refuses shared storage that is not where the linker
computes; :func:`check_swap` and :func:`apply_swap` are ``Function.copy(swap=...)``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from tenure.compile.io import In, Out
from tenure.compile.updates import check_update
from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.graph import Constant, Variable, ancestors, clone_get_equiv, clone_replace
from tenure.symbolic.shared import GenericSharedVariable, SharedVariable
from tenure.symbolic.variable import as_tensor_variable


class UnusedInputError(ValueError):
    """An input of ``function`` is not needed by any output or update."""


class MissingInputError(ValueError):
    """A variable the outputs or updates need is neither an input of
    ``function``, nor a shared variable or constant, nor given a value by
    ``givens`` (PyTensor's name; a ``ValueError``, as tenure raised before)."""


class ReplacedInputError(RuntimeError, ValueError):
    """``givens`` replaces an input of ``function``, which would have no
    effect.  PyTensor raises ``RuntimeError`` here, and tenure raised
    ``ValueError``: it is both, so either ``except`` catches it."""


def check_storage(shared_vars, runtime, linker: str) -> None:
    """A TypeError naming each shared variable whose storage is not where the
    linker computes (``runtime``: None for host memory, else the device's
    runtime): values never move between host and device behind the caller's
    back."""
    misplaced = [var for var in shared_vars if var.runtime is not runtime]
    if not misplaced:
        return
    names = ", ".join(f"{var} ({var.device})" for var in misplaced)
    if runtime is None:
        raise TypeError(f"shared variable(s) {names} are stored on a device, and the "
                        f"{linker!r} linker computes on the host: compile with "
                        "Mode(linker='cuda'), or make them with device='cpu'")
    raise TypeError(f"shared variable(s) {names} are not stored on the device the "
                    f"{linker!r} linker computes on ({runtime.name}): make them with "
                    "tn.shared(..., device='cuda') or from device arrays")


class LooseGivens(tuple):
    """``givens`` compiled with ``rebuild_strict=False``: ``(key, value)``
    pairs whose values may have other types than their keys (the graph is
    rebuilt through them, its ops' ``make_node`` deciding the types after).
    A tuple, so that it travels where ``givens`` does (copies, pickles)."""

    def __new__(cls, givens):
        return super().__new__(cls, tuple(givens.items() if isinstance(givens, dict) else givens))


def with_rebuild_strict(givens, rebuild_strict: bool):
    """``function``'s ``givens`` as :func:`apply_givens` takes them."""
    if not isinstance(rebuild_strict, (bool, np.bool_)):
        raise TypeError(f"function(): rebuild_strict must be True or False, got "
                        f"{type(rebuild_strict).__name__} {rebuild_strict!r}")
    return LooseGivens(givens) if givens and not rebuild_strict else givens


def apply_givens(targets, givens, in_vars):
    """``targets`` with each key of ``givens`` (a dict or pairs, or
    :class:`LooseGivens`) replaced by its value."""
    strict = not isinstance(givens, LooseGivens)
    items = givens.items() if isinstance(givens, dict) else givens
    replace = {}
    for key, value in items:
        if not isinstance(key, Variable):
            raise TypeError(f"givens: keys must be symbolic variables, got "
                            f"{type(key).__name__}")
        if key in in_vars:
            raise ReplacedInputError(
                f"givens: {key} is an input of the function; givens may replace only other "
                "variables (drop it from the inputs, or from givens)")
        value = as_tensor_variable(value)
        if strict and isinstance(value, Constant) and value.type != key.type:
            value = key.type.make_constant(value.data)
        if strict and not key.type.is_compatible_replacement(value.type):
            raise TypeError(
                f"givens: {value} ({value.type}) cannot replace {key} ({key.type}): with "
                "rebuild_strict=True (the default) a replacement has the type of what it "
                "replaces; pass rebuild_strict=False to rebuild the graph through it (the "
                "types of what is computed from it may change)")
        replace[key] = value
    return clone_replace(list(targets), replace, strict=strict)


def check_unused(inputs: list[In], targets, on_unused_input: str) -> None:
    """Raise or warn (as ``on_unused_input`` says) for an input no target needs."""
    if on_unused_input not in ("raise", "warn", "ignore"):
        raise ValueError(f"on_unused_input: expected 'raise', 'warn' or 'ignore', got "
                         f"{on_unused_input!r}")
    if on_unused_input == "ignore":
        return
    used = set(ancestors(targets, blockers=[spec.variable for spec in inputs]))
    for i, spec in enumerate(inputs):
        if spec.variable not in used:
            others = "'ignore' (or 'warn')" if on_unused_input == "raise" else "'ignore'"
            msg = (f"input {spec.name or spec.variable} (#{i}) is not used to compute any "
                   f"output or update; pass on_unused_input={others} if that is intended")
            if on_unused_input == "raise":
                raise UnusedInputError(msg)
            warnings.warn(msg, stacklevel=4)


def check_missing(targets, in_vars) -> None:
    """A ValueError for a root the targets need that is neither an input nor a value."""
    for var in ancestors(targets, blockers=in_vars):
        if (var.owner is None and var not in in_vars
                and not isinstance(var, (Constant, SharedVariable))):
            raise MissingInputError(
                f"{var} ({var.type}) is needed to compute the outputs but is not among the "
                "function's inputs (add it to the inputs, or give it a value with givens)")


def check_updates(updates) -> list[tuple[SharedVariable, Variable]]:
    """``updates`` (a list of pairs or a dict) as checked ``(shared variable, new value)`` pairs."""
    if updates is None:
        return []
    if isinstance(updates, (set, frozenset)):
        raise TypeError("updates: expected a list of (shared variable, expression) pairs or "
                        f"a dict, got a {type(updates).__name__}, which has no order (the "
                        "compiled function would depend on it: write a list)")
    items = list(updates.items()) if isinstance(updates, dict) else list(updates)
    checked = []
    seen = set()
    for pair in items:
        if isinstance(pair, (set, frozenset, Mapping)):
            raise TypeError(f"updates: expected (shared variable, expression) pairs, got a "
                            f"{type(pair).__name__} ({pair!r}), which has no order")
        try:
            var, expr = pair
        except (TypeError, ValueError):
            raise TypeError(f"updates: expected (shared variable, expression) pairs, got "
                            f"{pair!r}") from None
        if not isinstance(var, SharedVariable):
            raise TypeError(f"updates: {var} is not a shared variable; only shared variables "
                            "can be updated")
        if isinstance(var, GenericSharedVariable):
            raise var._refused_in_functions()
        if var in seen:
            raise ValueError(f"updates: {var} is updated twice")
        seen.add(var)
        checked.append((var, check_update(var, expr, "updates: the new value of")))
    return checked


def stateful_update(spec) -> Variable:
    """The new value of a stateful input (``In(variable, update=)``), checked
    as an update of it is (:func:`check_update`)."""
    return check_update(spec.variable, spec.update,
                        f"In({spec.variable}, update=): the new value of")


def with_default_updates(updates, out_specs, in_specs, givens, no_default_updates):
    """``updates`` and the default updates: ``(s, s.default_update)`` for every
    shared variable ``s`` the outputs or the updates (these included) read
    that has one, is not updated explicitly and not excluded by
    ``no_default_updates`` (True: none; a list: not those)."""
    if isinstance(no_default_updates, (bool, np.bool_)):
        if no_default_updates:
            return updates
        excluded = set()
    elif isinstance(no_default_updates, (list, tuple, set, frozenset)):
        for var in no_default_updates:
            if not isinstance(var, SharedVariable):
                raise TypeError(f"no_default_updates: expected shared variables, got "
                                f"{type(var).__name__} {var}")
        excluded = set(no_default_updates)
    else:
        raise TypeError(f"no_default_updates: expected a bool or a list of shared variables, "
                        f"got {type(no_default_updates).__name__}")
    in_vars = [spec.variable for spec in in_specs]
    updated = {var for var, _ in updates}
    updates = list(updates)
    frontier = [spec.variable for spec in out_specs] + [expr for _, expr in updates]
    while frontier:  # default updates may read more shared variables with default updates
        if givens:
            frontier = apply_givens(frontier, givens, in_vars)
        found = []
        for var in ancestors(frontier, blockers=in_vars):
            if (isinstance(var, SharedVariable) and var not in updated and var not in excluded
                    and getattr(var, "default_update", None) is not None):
                updated.add(var)
                found.append((var, check_update(var, var.default_update,
                                                "the default_update of")))
        updates += found
        frontier = [expr for _, expr in found]
    return updates


class Prepared(NamedTuple):
    """What :func:`build_graph` makes of a function's specs."""
    #: the graph to compile: explicit inputs, then the shared variables it
    #: reads; outputs, then the update values
    fgraph: FunctionGraph
    #: the shared variables, in the order of ``fgraph``'s inputs after the explicit ones
    shared_vars: list
    #: for each update, the position of its variable in ``shared_vars``
    update_shared_index: list[int]


def build_graph(inputs: list[In], outputs: list[Out], updates, givens,
                on_unused_input: str) -> Prepared:
    """A private copy of the graph from ``inputs`` to the outputs and update
    values (``givens`` substituted), checked for missing and unused inputs."""
    in_vars = [spec.variable for spec in inputs]
    targets = [spec.variable for spec in outputs] + [expr for _, expr in updates]
    if givens:
        targets = apply_givens(targets, givens, in_vars)
    if isinstance(givens, LooseGivens):   # an update's type may have changed
        n_out = len(outputs)
        targets[n_out:] = [check_update(var, expr, "updates: after givens, the new value of")
                           for (var, _), expr in zip(updates, targets[n_out:])]
    # Every shared variable the outputs read becomes an implicit input.
    shared_vars = [v for v in ancestors(targets, blockers=in_vars)
                   if isinstance(v, SharedVariable) and v not in in_vars]
    for var in shared_vars:
        if isinstance(var, GenericSharedVariable):
            raise var._refused_in_functions()
    for var, _ in updates:
        if var not in shared_vars:
            shared_vars.append(var)
    # An unused input first, as PyTensor checks: often the missing one is
    # what was meant in its place.
    check_unused(inputs, targets, on_unused_input)
    check_missing(targets, in_vars)
    equiv = clone_get_equiv(in_vars, targets, replace={v: v for v in shared_vars},
                            copy_inputs=True)
    fgraph = FunctionGraph([equiv[v] for v in in_vars] + shared_vars,
                           [equiv.get(v, v) for v in targets])
    return Prepared(fgraph, shared_vars, [shared_vars.index(var) for var, _ in updates])


def check_swap(swap, shared_vars, label: str) -> dict:
    """``Function.copy(swap=...)`` checked: ``{old: new}`` shared variables
    of one type each, every ``old`` one the function (``label``) uses."""
    if not isinstance(swap, Mapping):
        raise TypeError(f"{label}.copy(): swap must be a dict {{old shared "
                        f"variable: new shared variable}}, got {type(swap).__name__}")
    for old, new in swap.items():
        for what, var in (("key", old), ("value", new)):
            if not isinstance(var, SharedVariable):
                raise TypeError(f"{label}.copy(): every {what} of swap must be a "
                                f"shared variable, got {type(var).__name__} {var}")
        if new.type != old.type:
            raise TypeError(f"{label}.copy(): swap replaces {old} (type "
                            f"{old.type}) with {new} of another type, {new.type}; the "
                            "replacement must have the same type")
        if old not in shared_vars:
            raise ValueError(f"{label}.copy(): swap names {old}, which this "
                             "function does not use (its shared variables: "
                             f"{', '.join(map(str, shared_vars)) or 'none'})")
    return dict(swap)


def apply_swap(out_vars: list, updates: list, givens, in_vars: list, swap: dict):
    """``(out_vars, updates)`` reading and updating ``swap``'s values where
    they read and update its keys, ``givens`` applied first (as when the
    function was compiled): the givens are then part of the result."""
    targets = out_vars + [expr for _, expr in updates]
    if givens:
        targets = apply_givens(targets, givens, in_vars)
    targets = clone_replace(targets, swap)
    out_vars, exprs = targets[:len(out_vars)], targets[len(out_vars):]
    return out_vars, [(swap.get(var, var), expr) for (var, _), expr in zip(updates, exprs)]
