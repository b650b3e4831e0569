"""``function``: compile a graph into a callable that keeps the memory contract.

The pieces: :class:`In` and :class:`Out` say how each input and output may be
aliased, :class:`Mode` chooses the rewrites and the linker, and
:class:`Function` is what the user calls.  They live in :mod:`tenure.compile`
(one module per responsibility); this module is the entry point: it holds
:func:`function` and re-exports the public names.  Importing it also makes
``Variable.eval`` compile with :func:`function` (the symbolic layer below
never imports this one).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tenure.compile.calls import ReentrantCallError
from tenure.compile.compiled import Function, FunctionSpec, restore_function
from tenure.compile.io import In, Out, as_in, as_out
from tenure.compile.mode import Mode, as_mode
from tenure.linkers.table import LINKERS
from tenure.compile.prepare import (
    MissingInputError, ReplacedInputError, UnusedInputError, check_updates, with_default_updates,
    with_rebuild_strict)
from tenure.linkers.profile import check_profiled_linker
from tenure.symbolic.graph import Variable
from tenure.symbolic.inner_graph import register_inner_compiler
from tenure.symbolic.variable import register_eval_compiler

__all__ = ["Function", "In", "LINKERS", "MissingInputError", "Mode", "Out", "ReentrantCallError",
           "ReplacedInputError", "UnusedInputError", "function"]

# Pickles made before the split name these here.
_Spec = FunctionSpec
_restore_function = restore_function


def function(inputs: Sequence = (), outputs=None, updates=None, givens=None, mode=None,
             allow_input_downcast: bool = False, on_unused_input: str = "raise",
             name: str | None = None, no_default_updates=False,
             trust_input: bool = False, profile: bool = False,
             rebuild_strict: bool = True) -> Function:
    """Compile a function from ``inputs`` to ``outputs``.

    ``inputs``: variables or :class:`In` specs.  ``outputs``: a variable or
    :class:`Out` (the call returns one value), a list of them (returns a
    list), or ``None``.  ``updates``: ``(shared, expression)`` pairs, all
    computed from the values before the call and assigned together after it.
    ``givens``: ``{variable: replacement}`` substituted into the graph.
    ``allow_input_downcast``: accept arguments that need a lossy cast.
    ``on_unused_input``: ``"raise"``, ``"warn"`` or ``"ignore"``.
    ``no_default_updates``: the shared variables the graph reads that have a
    ``default_update`` (and no explicit update) are updated with it, unless
    this is True (none are) or a list of those that are not.
    ``trust_input``: sets :attr:`Function.trust_input`.
    ``rebuild_strict``: True (PyTensor's default), a value of ``givens``
    must have the type of what it replaces; False, any type, the graph
    rebuilt through it (what is computed from it may change type; an
    update must still have its shared variable's).
    ``profile``: time every node over the function's calls, beside its
    planned memory, into ``f.profile`` (a
    :class:`~tenure.linkers.profile.Profile`; see
    :mod:`tenure.linkers.profile`): the ``py`` and ``c`` linkers only.
    Without it ``f.profile`` is None and calls pay nothing for it.
    """
    if not isinstance(profile, (bool, np.bool_)):
        raise TypeError(f"function(): profile must be True or False, got "
                        f"{type(profile).__name__} {profile!r}")
    if isinstance(inputs, (Variable, In)):
        raise TypeError("function(): inputs must be a list (e.g. [x]), got a single "
                        f"{type(inputs).__name__}")
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"function(): inputs must be a list or a tuple (their order is the "
                        f"order of the arguments), got a {type(inputs).__name__}")
    in_specs = [as_in(item, i) for i, item in enumerate(inputs)]
    seen = set()
    for spec in in_specs:
        if spec.variable in seen:
            # (PyTensor's class for it; a ValueError, as tenure raised before)
            raise UnusedInputError(f"function(): input {spec.variable} is given twice")
        seen.add(spec.variable)
    single = isinstance(outputs, (Variable, Out))
    if outputs is None:
        out_items = []
    elif single:
        out_items = [outputs]
    elif isinstance(outputs, (list, tuple)):
        out_items = list(outputs)
    else:
        raise TypeError(f"function(): outputs must be a variable, Out, a list or None, got "
                        f"{type(outputs).__name__}")
    out_specs = [as_out(item, i) for i, item in enumerate(out_items)]
    givens = with_rebuild_strict(givens, rebuild_strict)
    all_updates = with_default_updates(check_updates(updates), out_specs, in_specs, givens,
                                       no_default_updates)
    mode = as_mode(mode)
    if profile:
        check_profiled_linker(mode.linker)   # before compiling anything
    f = Function(in_specs, out_specs, single, all_updates, givens, mode,
                 allow_input_downcast, on_unused_input, name, profile=bool(profile))
    f.trust_input = bool(trust_input)
    return f


def _compile_for_eval(inputs: list, output: Variable) -> Function:
    """What ``Variable.eval`` runs: a function of the given roots, any of
    which the output may not need."""
    return function(inputs, output, on_unused_input="ignore")


register_eval_compiler(_compile_for_eval)


def _compile_inner_graph(fgraph, mode) -> Function:
    """What an op's ``perform`` runs an inner graph with (a loop's step): a
    function of the inner graph's inputs that borrows them and lends its
    results (the caller copies what it keeps), compiled by ``mode`` (the
    compiling linker's :meth:`Mode.inner_mode`; None: the default)."""
    return function([In(var, borrow=True) for var in fgraph.inputs],
                    [Out(var, borrow=True) for var in fgraph.outputs], mode=mode,
                    on_unused_input="ignore", no_default_updates=True)


register_inner_compiler(_compile_inner_graph)
