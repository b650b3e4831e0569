"""How a call's arguments bind to a function's inputs, and how errors name them.

Arguments bind positionally, then by keyword (an input's ``In`` name; a name
two inputs share can only be passed positionally); a missing one takes the
input's default value, if it has one.  An implicit input (``In(implicit=True)``)
takes no argument: the positions skip it, and its value is always the
function's own.
"""

from __future__ import annotations

from collections.abc import Callable

from tenure.compile.io import In

#: an argument not given (a default value, if any, stands in)
_MISSING = object()


class CallSignature:
    """The binding rules of one function's inputs (``In`` specs)."""

    def __init__(self, inputs: list[In]):
        self.inputs = inputs
        #: the inputs an argument may be passed for, in positional order
        self._explicit = [i for i, spec in enumerate(inputs) if not spec.implicit]
        #: whether positions are inputs (no implicit input): binding's one-list path
        self._positional = len(self._explicit) == len(inputs)
        self._implicit_names = {spec.name for spec in inputs if spec.implicit}
        names = [spec.name for spec in inputs]
        self._index_of_name = {n: i for i, n in enumerate(names) if n is not None
                               and names.count(n) == 1}
        self._ambiguous_names = {n for n in names if n is not None and names.count(n) > 1}
        parts = []
        for i, spec in enumerate(inputs):
            if spec.implicit:
                continue
            text = spec.name if spec.name is not None else f"<input #{i}>"
            if spec.value is not None:
                text += "=<default>"
            parts.append(text)
        #: the signature as errors show it: ``(x, y=<default>)``
        self.text = "(" + ", ".join(parts) + ")"

    def input_label(self, i: int) -> str:
        """Input ``i`` as errors name it: its name, or its position and type."""
        name = self.inputs[i].name
        return repr(name) if name is not None else f"#{i} ({self.inputs[i].variable.type})"

    def bind(self, args, kwargs, defaults: list, label: Callable[[], str]
             ) -> tuple[list, list[bool]]:
        """Arguments in input order; also which ones came from a default value
        (``defaults[i]``: input ``i``'s value cell, whose ``value`` it takes,
        or None where it has none).  ``label()`` names the function in errors."""
        n = len(self.inputs)
        if len(args) > len(self._explicit):
            raise TypeError(f"{label()} takes {len(self._explicit)} argument(s) {self.text}, "
                            f"got {len(args)}")
        if self._positional:
            values = list(args) + [_MISSING] * (n - len(args))
        else:
            values = [_MISSING] * n
            for i, value in zip(self._explicit, args):
                values[i] = value
        for key, value in kwargs.items():
            if key in self._implicit_names:
                raise TypeError(f"{label()}: input {key!r} is implicit (In(implicit=True)): "
                                f"it takes no argument; its value is the function's own "
                                f"(f[{key!r}] = ... sets it)")
            if key in self._ambiguous_names:
                raise TypeError(f"{label()}: several inputs are named {key!r}; pass "
                                "them positionally")
            i = self._index_of_name.get(key)
            if i is None:
                raise TypeError(f"{label()} got an unexpected keyword argument {key!r}; "
                                f"expected {self.text}")
            if values[i] is not _MISSING:
                raise TypeError(f"{label()} got several values for input {key!r}")
            values[i] = value
        from_default = [False] * n
        for i, value in enumerate(values):
            if value is _MISSING:
                if defaults[i] is None:
                    raise TypeError(f"{label()} is missing a value for input "
                                    f"{self.input_label(i)}; expected {self.text}")
                values[i] = defaults[i].value
                from_default[i] = True
        return values, from_default
