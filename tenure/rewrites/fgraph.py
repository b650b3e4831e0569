"""FunctionGraph: the mutable working copy of a graph that a compiled function owns.

It records the graph's inputs and outputs, every apply node between them and,
for every variable, its *clients* (the nodes reading it, with the input
position).  Rewrites change it through :meth:`FunctionGraph.replace`, which
keeps clients consistent and checks types.
"""

from __future__ import annotations

from collections.abc import Sequence

from tenure.symbolic.graph import Apply, Constant, Variable, io_toposort

#: the client that stands for "returned as output i"
OUTPUT = "output"


class FunctionGraph:
    """A graph from ``inputs`` to ``outputs``.

    ``inputs`` must be every root the outputs depend on that is not a
    constant (explicit inputs and shared variables alike); a missing one is a
    ``ValueError`` naming it.
    """

    def __init__(self, inputs: Sequence[Variable], outputs: Sequence[Variable]):
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.apply_nodes: set[Apply] = set()
        self.variables: set[Variable] = set()
        self.clients: dict[Variable, list[tuple]] = {}
        for var in self.inputs:
            self._add_variable(var)
        for i, out in enumerate(self.outputs):
            self._import(out)
            self.clients[out].append((OUTPUT, i))

    # -- construction --------------------------------------------------------
    def _add_variable(self, var: Variable) -> None:
        if var not in self.variables:
            self.variables.add(var)
            self.clients.setdefault(var, [])

    def _import(self, var: Variable) -> None:
        """Add ``var`` and everything it depends on (up to the inputs)."""
        inputs = set(self.inputs)
        for node in io_toposort(self.inputs, [var]):
            if node in self.apply_nodes:
                continue
            self.apply_nodes.add(node)
            for i, inp in enumerate(node.inputs):
                if inp.owner is None and inp not in inputs and not isinstance(inp, Constant):
                    raise ValueError(f"{inp} is needed to compute the outputs but is not an "
                                     "input of the graph")
                self._add_variable(inp)
                self.clients[inp].append((node, i))
            for out in node.outputs:
                self._add_variable(out)
        if var.owner is None and var not in inputs and not isinstance(var, Constant):
            raise ValueError(f"output {var} is not computed from the inputs and is not one")
        self._add_variable(var)

    # -- queries -------------------------------------------------------------
    def toposort(self) -> list[Apply]:
        """The apply nodes in a valid execution order (deterministic)."""
        return io_toposort(self.inputs, self.outputs)

    def __str__(self) -> str:
        return f"FunctionGraph({', '.join(map(str, self.outputs))})"

    # -- changes -------------------------------------------------------------
    def replace(self, old: Variable, new: Variable) -> None:
        """Make every reader of ``old`` (and the outputs) read ``new`` instead."""
        if old not in self.variables:
            raise ValueError(f"{old} is not in this graph")
        if not old.type.is_compatible_replacement(new.type):
            raise TypeError(f"cannot replace {old} ({old.type}) with {new} ({new.type})")
        self._import(new)
        for client, i in list(self.clients[old]):
            if client == OUTPUT:
                self.outputs[i] = new
            else:
                client.inputs[i] = new
            self.clients[new].append((client, i))
        self.clients[old] = []
        self._prune()

    def _prune(self) -> None:
        """Forget nodes that no output depends on any more."""
        live = set(io_toposort(self.inputs, self.outputs))
        for node in self.apply_nodes - live:
            for i, inp in enumerate(node.inputs):
                if inp in self.clients:
                    self.clients[inp] = [c for c in self.clients[inp] if c != (node, i)]
            for out in node.outputs:
                self.variables.discard(out)
                self.clients.pop(out, None)
        self.apply_nodes &= live

