"""How a function treats each input and output: :class:`In` and :class:`Out`.

``In`` says whether outputs may alias the caller's array (``borrow``) and
whether tenure may overwrite it (``mutable``); ``Out`` whether a returned
array may be an internal buffer.  :func:`as_in` and :func:`as_out` turn the
items of ``function(inputs, outputs)`` into specs, refusing what cannot be one.
"""

from __future__ import annotations

from tenure.compile.updates import check_update
from tenure.symbolic.graph import Constant, Variable
from tenure.symbolic.shared import Container, SharedVariable


class In:
    """How a function treats one input.

    ``borrow=True``: outputs may alias the caller's array (no defensive copy).
    ``mutable=True``: the caller gives the buffer away; tenure may overwrite
    it as workspace.  ``borrow`` defaults to ``mutable`` (as in PyTensor), and
    ``mutable=True, borrow=False`` is a ValueError.  ``value``: the default used when
    the argument is not given.  ``name``: the keyword to pass it by (defaults
    to the variable's name).  ``chunks``: for the dask linker only, how a
    NumPy argument is cut into chunks (anything ``dask.array.from_array``
    takes: ``"auto"`` when not given); a Dask array argument keeps its own.
    ``strict=True``: the argument must already be an array of the input's
    dtype (no conversion, not even a safe cast).  ``allow_downcast``: this
    input's own answer to the function's ``allow_input_downcast`` (None:
    the function's).

    ``update``: an expression of the function's inputs that becomes this
    input's value after each call (Theano's stateful input: it needs a
    ``value`` to start from).  The function keeps the value between calls;
    a call that passes the argument sets it first.  ``f[name]`` and
    ``f.value[name]`` read and write it (and any input's ``value``).
    ``implicit=True``: the argument cannot be passed (it takes no position
    among the arguments); the value is the function's alone.

    ``value`` may be another function's cell, ``g.container[y]`` (Theano's
    container): the two functions then share the value, so that a stateful
    input's update in one is the value in the other.  ``implicit`` defaults
    (None) to True for such a value, False for any other, as in PyTensor.
    """

    #: (the class's: pickles of functions from before these existed load)
    strict = False
    allow_downcast: bool | None = None
    update = None
    implicit = False

    def __init__(self, variable: Variable, name: str | None = None, value=None,
                 update=None, borrow: bool | None = None, mutable: bool = False, chunks=None,
                 strict: bool = False, allow_downcast: bool | None = None,
                 implicit: bool | None = None):
        if not isinstance(variable, Variable):
            raise TypeError(f"In(): expected a symbolic variable, got "
                            f"{type(variable).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"In({variable}): name must be a string (the keyword to pass the "
                            f"input by) or None, got {type(name).__name__} {name!r}")
        if borrow is None:  # as in PyTensor: a buffer given away is necessarily lent
            borrow = mutable
        if mutable and not borrow:
            raise ValueError(f"In({variable}): mutable=True requires borrow=True (a buffer "
                             "tenure may overwrite is necessarily lent to it)")
        if allow_downcast not in (None, True, False):
            raise TypeError(f"In({variable}): allow_downcast must be None, True or False, got "
                            f"{allow_downcast!r}")
        if strict and allow_downcast:
            raise ValueError(f"In({variable}): strict=True refuses every cast, "
                             "allow_downcast=True allows lossy ones: choose one")
        if update is not None:   # (its value= is checked by function(), as PyTensor does)
            update = check_update(variable, update, f"In({variable}, update=): the new value of")
        if implicit not in (None, True, False):
            raise TypeError(f"In({variable}): implicit must be None, True or False, got "
                            f"{implicit!r}")
        if implicit and value is None:
            raise ValueError(f"In({variable}): implicit=True means the argument cannot be "
                             f"passed, so the input needs value=")
        self.update = update
        # (as in PyTensor: a value taken from another function's container
        # is that function's state, not an argument, unless said otherwise)
        self.implicit = isinstance(value, Container) if implicit is None else bool(implicit)
        self.strict = bool(strict)
        self.allow_downcast = allow_downcast
        self.variable = variable
        self.name = name if name is not None else variable.name
        self.value = value
        self.borrow = bool(borrow)
        self.mutable = bool(mutable)
        self.chunks = chunks

    def __repr__(self):
        extra = "" if self.chunks is None else f", chunks={self.chunks!r}"
        extra += ", strict=True" if self.strict else ""
        extra += "" if self.allow_downcast is None else f", allow_downcast={self.allow_downcast}"
        extra += "" if self.update is None else f", update={self.update}"
        extra += ", implicit=True" if self.implicit else ""
        return (f"In({self.variable}, name={self.name!r}, borrow={self.borrow}, "
                f"mutable={self.mutable}{extra})")


class Out:
    """How a function returns one output.

    ``borrow=False`` (default): a fresh array the caller owns.  ``borrow=True``:
    possibly an internal buffer that the next call overwrites (and that may
    alias shared storage or borrowed inputs); in steady state it costs no
    allocation per call.
    """

    def __init__(self, variable: Variable, borrow: bool = False):
        if not isinstance(variable, Variable):
            raise TypeError(f"Out(): expected a symbolic variable, got "
                            f"{type(variable).__name__}")
        self.variable = variable
        self.borrow = bool(borrow)

    def __repr__(self):
        return f"Out({self.variable}, borrow={self.borrow})"


def as_in(item, i: int) -> In:
    """``inputs[i]`` of ``function`` as an :class:`In` (a variable gets the defaults)."""
    spec = item if isinstance(item, In) else In(item) if isinstance(item, Variable) else None
    if spec is None:
        raise TypeError(f"inputs[{i}]: expected a symbolic variable or In(...), got "
                        f"{type(item).__name__}")
    var = spec.variable
    if isinstance(var, SharedVariable):
        # (the words PyTensor's message starts with, which its users match)
        raise TypeError(f"Cannot use a shared variable ({var}) as explicit input (inputs[{i}]): "
                        "shared variables are implicit inputs (leave it out, or use givens "
                        "to replace it)")
    if isinstance(var, Constant):
        raise TypeError(f"inputs[{i}]: {var} is a constant and cannot be an input")
    return spec


def check_stateful_values(inputs: list[In]) -> None:
    """A ValueError for a stateful input without a value to start from.
    (Checked after the graph's missing and unused inputs, as PyTensor's
    users expect those errors first.)"""
    for i, spec in enumerate(inputs):
        if spec.update is not None and spec.value is None:
            raise ValueError(f"inputs[{i}]: In({spec.variable}, update=) makes a stateful "
                             f"input, which needs value= to start from (the value before the "
                             f"first call)")


def as_out(item, i: int) -> Out:
    """``outputs[i]`` of ``function`` as an :class:`Out`."""
    if isinstance(item, Out):
        return item
    if isinstance(item, Variable):
        return Out(item)
    raise TypeError(f"outputs[{i}]: expected a symbolic variable or Out(...), got "
                    f"{type(item).__name__}")
