"""Text rendering of graphs: :func:`debugprint`.

Each line shows a variable: the op that computes it (or its name, for roots),
an id (so shared subgraphs print once and are referred to after), its type,
and the memory marks of the op: ``v={out: [in]}`` for views,
``d={out: [in]}`` for outputs written into an input's buffer.
"""

from __future__ import annotations

import io
import sys

from tenure.symbolic.graph import Constant, Variable


def _id_letters(n: int) -> str:
    letters = ""
    n += 1
    while n:
        n, rem = divmod(n - 1, 26)
        letters = chr(ord("A") + rem) + letters
    return letters


class _Printer:
    def __init__(self, stream, stop_at: set):
        self.stream = stream
        self.ids: dict = {}
        self.stop_at = stop_at

    def _id(self, key) -> str:
        if key not in self.ids:
            self.ids[key] = _id_letters(len(self.ids))
        return self.ids[key]

    def tree(self, root: Variable, label: str = "") -> None:
        """Print ``root`` and what it is computed from, depth first.

        An explicit stack rather than recursion: graphs can be deeper than
        Python's recursion limit.
        """
        stack = [(root, "", "", label)]
        while stack:
            var, prefix, child_prefix, suffix = stack.pop()
            inputs = self._line(var, prefix, suffix)
            for i in reversed(range(len(inputs))):
                last = i == len(inputs) - 1
                stack.append((inputs[i], child_prefix + (" └─ " if last else " ├─ "),
                              child_prefix + ("    " if last else " │  "), ""))

    def _line(self, var: Variable, prefix: str, suffix: str) -> list:
        """Write one variable's line; return the inputs still to print below it."""
        node = var.owner
        if node is None or var in self.stop_at:
            if isinstance(var, Constant):
                text = f"{var}"
            else:
                kind = "shared " if type(var).__name__ == "SharedVariable" else ""
                text = f"{kind}{var.name or '<' + str(var.type) + '>'}"
            type_text = (f"Python {type(var.weak_value).__name__}"
                         if getattr(var, "weak", False) else str(var.type))
            self.stream.write(f"{prefix}{text} [id {self._id(var)}] <{type_text}>{suffix}\n")
            return []
        seen = node in self.ids
        out = f".{var.index}" if len(node.outputs) > 1 else ""
        marks = "".join(
            f" {tag}={dict(mapping)}" for tag, mapping in (("v", node.op.view_map),
                                                         ("d", node.op.destroy_map)) if mapping)
        name = f" '{var.name}'" if var.name else ""
        self.stream.write(f"{prefix}{node.op}{out} [id {self._id(node)}]{name} "
                          f"<{var.type}>{marks}{suffix}{' ···' if seen else ''}\n")
        return [] if seen else list(node.inputs)


def debugprint(obj, file=None) -> str | None:
    """Print a graph: a variable, a list of variables or a compiled :class:`Function`.

    With ``file="str"`` the text is returned instead of printed.  Nodes that
    appear more than once are printed in full the first time and shown with
    ``···`` afterwards.  For a function, update expressions are labelled with
    the shared variable they assign.
    """
    from tenure.function import Function
    stream = io.StringIO() if file == "str" else (file or sys.stdout)
    stop_at: set = set()
    if isinstance(obj, Function):
        fgraph = obj.fgraph
        roots = list(fgraph.outputs)
        stop_at = set(fgraph.inputs)
        n_out = len(obj.outputs)
        labels = [""] * n_out + [f" -> update of {obj.shared_vars[j]}"
                                 for j in obj._update_shared_index]
    elif isinstance(obj, Variable):
        roots, labels = [obj], [""]
    elif isinstance(obj, (list, tuple)) and all(isinstance(v, Variable) for v in obj):
        roots, labels = list(obj), [""] * len(obj)
    else:
        raise TypeError(f"debugprint: expected a variable, a list of variables or a Function, "
                        f"got {type(obj).__name__}")
    printer = _Printer(stream, stop_at)
    for var, label in zip(roots, labels):
        printer.tree(var, label)
    if file == "str":
        return stream.getvalue()
    return None
