"""FunctionGraph: the mutable working copy of a graph that a compiled function owns.

It records the graph's inputs and outputs, every apply node between them and,
for every variable, its *clients* (the nodes reading it, with the input
position; ``("output", i)`` for the i-th output).  Rewrites change it only
through :meth:`FunctionGraph.replace` / :meth:`replace_all`, which keep the
clients consistent, check types and tell the attached *features* what
changed.  :meth:`replace_all_validate` asks every feature to validate the
result and undoes the change when one refuses it.

It lives in ``symbolic`` because it depends on nothing but
:mod:`tenure.symbolic.graph`: rewrites change it, linkers read it, and an op
with inner graphs (:class:`~tenure.symbolic.inner_graph.OpWithInnerGraphs`) owns some,
so it sits below all of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tenure.symbolic.graph import Apply, Constant, Variable, clone, io_toposort

#: the client that stands for "returned as output i"
OUTPUT = "output"


class InconsistencyError(ValueError):
    """A change would make the graph invalid (raised by a feature's ``validate``)."""


class Feature:
    """A listener attached to a FunctionGraph.  Every hook is optional."""

    def on_attach(self, fgraph: FunctionGraph) -> None:
        """Called once when attached (the graph may already have nodes)."""

    def on_detach(self, fgraph: FunctionGraph) -> None:
        """Called once when removed."""

    def on_import(self, fgraph: FunctionGraph, node: Apply, reason: str) -> None:
        """A node entered the graph."""

    def on_prune(self, fgraph: FunctionGraph, node: Apply, reason: str) -> None:
        """A node left the graph (nothing reads its outputs any more)."""

    def on_change_input(self, fgraph: FunctionGraph, client, i: int, old: Variable,
                        new: Variable, reason: str) -> None:
        """``client`` (a node, or OUTPUT) now reads ``new`` at position ``i`` instead of ``old``."""

    def validate(self, fgraph: FunctionGraph) -> None:
        """Raise :class:`InconsistencyError` if the graph is not acceptable."""

    def orderings(self, fgraph: FunctionGraph) -> dict[Apply, set[Apply]]:
        """Extra scheduling constraints: ``{node: nodes that must run before it}``."""
        return {}


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
        self.features: list[Feature] = []
        self._input_set = set(self.inputs)
        #: the changes since the last checkpoint, for rollback: (client, i, old, new)
        self._history: list[tuple] | None = None
        for var in self.inputs:
            self._add_variable(var)
        for i, out in enumerate(self.outputs):
            self._import(out, reason="init")
            self.clients[out].append((OUTPUT, i))

    # -- features ------------------------------------------------------------
    def attach_feature(self, feature: Feature) -> None:
        if feature in self.features:
            return
        self.features.append(feature)
        feature.on_attach(self)

    def remove_feature(self, feature: Feature) -> None:
        self.features.remove(feature)
        feature.on_detach(self)

    def _notify(self, hook: str, *args) -> None:
        for feature in self.features:
            getattr(feature, hook)(self, *args)

    # -- construction --------------------------------------------------------
    def _add_variable(self, var: Variable) -> None:
        if var not in self.variables:
            self.variables.add(var)
            self.clients.setdefault(var, [])

    def _new_nodes(self, var: Variable) -> list[Apply]:
        """The nodes ``var`` needs that are not in the graph yet, inputs first.

        Stops at nodes already present, so importing a small new expression
        over a large graph costs only the new part.
        """
        order, done, stack = [], set(), []
        if var.owner is not None and var.owner not in self.apply_nodes \
                and var not in self._input_set:
            stack.append((var.owner, 0))
        while stack:
            node, i = stack.pop()
            if node in done:
                continue
            if i < len(node.inputs):
                stack.append((node, i + 1))
                owner = node.inputs[i].owner
                if (owner is not None and owner not in self.apply_nodes and owner not in done
                        and node.inputs[i] not in self._input_set):
                    stack.append((owner, 0))
            else:
                done.add(node)
                order.append(node)
        return order

    def _import(self, var: Variable, reason: str) -> None:
        """Add ``var`` and everything it depends on (up to the inputs)."""
        for node in self._new_nodes(var):
            for i, inp in enumerate(node.inputs):
                if (inp.owner is None and inp not in self._input_set
                        and not isinstance(inp, Constant)):
                    raise ValueError(f"{inp} is needed to compute the outputs but is not an "
                                     "input of the graph")
            self.apply_nodes.add(node)
            for i, inp in enumerate(node.inputs):
                self._add_variable(inp)
                self.clients[inp].append((node, i))
            for out in node.outputs:
                self._add_variable(out)
            self._notify("on_import", node, reason)
        if var.owner is None and var not in self._input_set and not isinstance(var, Constant):
            raise ValueError(f"output {var} is not computed from the inputs and is not one")
        self._add_variable(var)

    # -- queries -------------------------------------------------------------
    def toposort(self) -> list[Apply]:
        """The apply nodes in a valid execution order (deterministic), not
        counting the features' extra orderings (see :meth:`orderings`)."""
        return io_toposort(self.inputs, self.outputs)

    def orderings(self) -> dict[Apply, set[Apply]]:
        """Every feature's extra scheduling constraints, merged."""
        merged: dict[Apply, set[Apply]] = {}
        for feature in self.features:
            for node, before in feature.orderings(self).items():
                merged.setdefault(node, set()).update(before)
        return merged

    def readers(self, var: Variable) -> list[Apply]:
        """The nodes that read ``var`` (not counting its being an output)."""
        return [c for c, _ in self.clients.get(var, ()) if c != OUTPUT]

    def __str__(self) -> str:
        return f"FunctionGraph({', '.join(map(str, self.outputs))})"

    def clone(self) -> FunctionGraph:
        """A graph over a copy of this one (new inputs, nodes and outputs;
        constants shared), with no features: features belong to the
        compilation that attached them, not to the graph's structure."""
        inputs, outputs = clone(self.inputs, self.outputs)
        return FunctionGraph(inputs, outputs)

    # -- changes -------------------------------------------------------------
    def change_input(self, client, i: int, new: Variable, reason: str = "") -> None:
        """Make ``client`` (a node, or OUTPUT) read ``new`` at position ``i``."""
        old = self.outputs[i] if client == OUTPUT else client.inputs[i]
        if old is new:
            return
        if not old.type.is_compatible_replacement(new.type):
            raise TypeError(f"cannot replace {old} ({old.type}) with {new} ({new.type})"
                            + (f" [{reason}]" if reason else ""))
        self._import(new, reason)
        if client == OUTPUT:
            self.outputs[i] = new
        else:
            client.inputs[i] = new
        self.clients[old].remove((client, i))
        self.clients[new].append((client, i))
        if self._history is not None:
            self._history.append((client, i, old, new))
        self._notify("on_change_input", client, i, old, new, reason)
        self._prune_if_unused(old, reason)

    def replace(self, old: Variable, new: Variable, reason: str = "") -> None:
        """Make every reader of ``old`` (and the outputs) read ``new`` instead."""
        if old not in self.variables:
            raise ValueError(f"{old} is not in this graph")
        for client, i in list(self.clients[old]):
            self.change_input(client, i, new, reason)

    def replace_all(self, pairs: Iterable[tuple[Variable, Variable]], reason: str = "") -> None:
        pairs = list(pairs)
        present = {old for old, _ in pairs if old in self.variables}
        for old, new in pairs:
            if old in present and old not in self.variables:
                continue  # pruned by an earlier replacement of this batch: nothing reads it
            self.replace(old, new, reason)

    def replace_all_validate(self, pairs: Iterable[tuple[Variable, Variable]],
                             reason: str = "") -> bool:
        """Apply the replacements if every feature accepts the result.

        Returns ``True`` when applied; otherwise undoes them and returns
        ``False``.  Type errors propagate: they are bugs in the rewrite.
        """
        pairs = list(pairs)
        return self.try_changes(lambda: self.replace_all(pairs, reason), reason)

    def try_changes(self, apply, reason: str = "") -> bool:
        """Run ``apply()`` (which changes the graph), then validate once.

        One validation for a whole batch of changes: a rewrite that checked
        each change itself uses this to avoid a full validation per change.
        When a feature refuses the result, every change is undone and the
        result is ``False``.
        """
        outer = self._history
        self._history = []
        try:
            try:
                apply()
                self.validate()
            except InconsistencyError:
                self._rollback(reason)
                return False
            if outer is not None:
                outer.extend(self._history)
            return True
        finally:
            self._history = outer

    def validate(self) -> None:
        for feature in self.features:
            feature.validate(self)

    def _rollback(self, reason: str) -> None:
        history, self._history = self._history, None
        for client, i, old, new in reversed(history):
            self.change_input(client, i, old, reason=f"rollback of {reason}")
        self._history = []

    def _prune_if_unused(self, var: Variable, reason: str) -> None:
        """Forget ``var``'s node, and what only it needed, once nothing reads it."""
        if isinstance(var, Constant) and not self.clients.get(var):
            self.variables.discard(var)
            self.clients.pop(var, None)
            return
        stack = [var]
        while stack:
            v = stack.pop()
            node = v.owner
            if node is None or node not in self.apply_nodes:
                continue
            if any(self.clients.get(o) for o in node.outputs):
                continue
            self.apply_nodes.discard(node)
            for out in node.outputs:
                self.variables.discard(out)
                self.clients.pop(out, None)
            for i, inp in enumerate(node.inputs):
                self.clients[inp].remove((node, i))
                if not self.clients[inp] and inp not in self._input_set:
                    if inp.owner is not None:
                        stack.append(inp)
                    elif isinstance(inp, Constant):
                        self.variables.discard(inp)
                        self.clients.pop(inp, None)
            self._notify("on_prune", node, reason)
