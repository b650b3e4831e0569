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

import os
import pickle
import sys
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
           "OutputKeyError", "ReplacedInputError", "UnusedInputError", "function",
           "function_dump"]

# Pickles made before the split name these here.
_Spec = FunctionSpec
_restore_function = restore_function


def function(inputs: Sequence = (), outputs=None, updates=None, givens=None, mode=None,
             allow_input_downcast: bool | None = None, on_unused_input: str = "raise",
             name: str | None = None, no_default_updates=False,
             trust_input: bool = False, profile: bool = False,
             rebuild_strict: bool = True) -> Function:
    """Compile a function from ``inputs`` to ``outputs``.

    ``inputs``: variables or :class:`In` specs.  ``outputs``: a variable or
    :class:`Out` (the call returns one value), a list of them (returns a
    list), a dict of them by string keys (returns a dict; ``f.outputs`` are
    in the keys' sorted order, as in PyTensor), or ``None``.  ``updates``:
    ``(shared, expression)`` pairs, all computed from the values before the
    call and assigned together after it.
    ``givens``: ``{variable: replacement}`` substituted into the graph.
    ``allow_input_downcast``: True, accept arguments that need a lossy cast;
    False, none; None (the default, as in PyTensor), none but a lone float
    for a ``config.floatX`` input, taken rounded (see :meth:`TensorType.filter`).
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
    output_keys = None
    if isinstance(outputs, dict):
        output_keys, outputs = sorted_output_keys(outputs)
    single = isinstance(outputs, (Variable, Out))
    if outputs is None:
        out_items = []
    elif single:
        out_items = [outputs]
    elif isinstance(outputs, (list, tuple)):
        out_items = list(outputs)
    else:
        raise TypeError(f"function(): outputs must be a variable, Out, a list, a dict or "
                        f"None, got {type(outputs).__name__}")
    out_specs = [as_out(item, i) for i, item in enumerate(out_items)]
    givens = with_rebuild_strict(givens, rebuild_strict)
    all_updates = with_default_updates(check_updates(updates), out_specs, in_specs, givens,
                                       no_default_updates)
    mode = as_mode(mode)
    if profile:
        check_profiled_linker(mode.linker)   # before compiling anything
    f = Function(in_specs, out_specs, single, all_updates, givens, mode,
                 allow_input_downcast, on_unused_input, name, profile=bool(profile),
                 output_keys=output_keys, location=caller_location())
    f.trust_input = bool(trust_input)
    return f


#: tenure's own files: the caller of ``function`` is the first frame outside them
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def caller_location() -> str:
    """``file:line`` of the code outside tenure that is compiling a function
    (PyTensor's default name: which function a profile or a debugger shows)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    return "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


class OutputKeyError(TypeError, AssertionError):
    """A key of ``function(outputs={...})`` that is not a string: a TypeError,
    and the AssertionError PyTensor raises (its tests expect it)."""


def sorted_output_keys(outputs: dict) -> tuple[tuple, list]:
    """``function(outputs={key: variable})``'s keys and outputs, sorted by
    key (PyTensor's order: ``f.outputs`` follows it)."""
    bad = [key for key in outputs if not isinstance(key, str)]
    if bad:
        raise OutputKeyError(f"function(): the keys of a dict of outputs must be strings (a "
                             f"call returns them as a dict), got {bad[0]!r}")
    keys = tuple(sorted(outputs))
    return keys, [outputs[key] for key in keys]


def function_dump(filename, inputs: Sequence = (), outputs=None, updates=None, givens=None,
                  mode=None, allow_input_downcast: bool | None = None,
                  on_unused_input: str = "raise", name: str | None = None,
                  no_default_updates=False, trust_input: bool = False, profile: bool = False,
                  rebuild_strict: bool = True) -> None:
    """Pickle the arguments of a :func:`function` call to ``filename``
    instead of compiling them (PyTensor's ``function_dump``), so that a
    problem can be sent and reproduced: ``function(**pickle.load(file))``
    compiles the same function.  The symbolic graph and the shared
    variables it reads go into the file with their values.  Loading a
    pickle executes code: never load one from a source you do not trust."""
    arguments = dict(inputs=inputs, outputs=outputs, updates=updates, givens=givens, mode=mode,
                     allow_input_downcast=allow_input_downcast,
                     on_unused_input=on_unused_input, name=name,
                     no_default_updates=no_default_updates, trust_input=trust_input,
                     profile=profile, rebuild_strict=rebuild_strict)
    with open(filename, "wb") as file:
        pickle.dump(arguments, file, protocol=pickle.HIGHEST_PROTOCOL)


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
