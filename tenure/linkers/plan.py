"""The execution plan shared by every linker: schedule, storage slots, lifetimes.

A :class:`Plan` is linker-independent.  It fixes

- the *schedule*: a topological order of the apply nodes in which every
  destructive op runs after all other readers of the buffer it overwrites
  (and of that buffer's views);
- a *slot* (an index into a flat storage list) for every variable;
- for each step, the slots whose variable is dead after it (last reader ran),
  so a linker can free intermediates early (``config.allow_gc``).

Inputs, constants and outputs are never freed by the plan: inputs belong to
the caller or to shared variables, constants to the graph, outputs to whoever
receives them.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from tenure.symbolic.graph import Apply, Constant, Variable


def view_chain(var: Variable) -> tuple[list[Apply], Variable]:
    """The nodes through which ``var`` is a view (or in-place result) of another
    buffer, and that buffer's own variable (its *view root*)."""
    chain = []
    while var.owner is not None:
        op = var.owner.op
        targets = op.view_map.get(var.index) or op.destroy_map.get(var.index)
        if not targets:
            break
        if len(targets) != 1:
            raise NotImplementedError(f"{op}: an output viewing several inputs is not supported")
        chain.append(var.owner)
        var = var.owner.inputs[targets[0]]
    return chain, var


def view_root(var: Variable) -> Variable:
    """The variable whose buffer ``var`` may be (through views and in-place ops)."""
    return view_chain(var)[1]


def destroyed_roots(fgraph) -> dict[Variable, Apply]:
    """Every buffer (view root) that some node overwrites, with that node.

    Raises ``ValueError`` when one buffer is overwritten by two nodes: their
    order would decide the result.
    """
    destroyers: dict[Variable, Apply] = {}
    for node in fgraph.apply_nodes:
        for inputs in node.op.destroy_map.values():
            for i in inputs:
                root = view_root(node.inputs[i])
                if root in destroyers and destroyers[root] is not node:
                    raise ValueError(f"buffer of {root} is overwritten by two nodes: "
                                     f"{destroyers[root]} and {node}")
                destroyers[root] = node
    return destroyers


def _destroy_constraints(fgraph) -> dict[Apply, set[Apply]]:
    """Extra edges ``reader -> destroyer``: readers of a buffer run before it is overwritten."""
    destroyers = destroyed_roots(fgraph)
    if not destroyers:
        return {}
    extra: dict[Apply, set[Apply]] = {}
    for node in fgraph.apply_nodes:
        for inp in node.inputs:
            chain, root = view_chain(inp)
            destroyer = destroyers.get(root)
            # A reader of what the destroyer wrote (through its output) comes
            # after it anyway; every other reader sees the old content: before.
            if destroyer is not None and destroyer is not node and destroyer not in chain:
                extra.setdefault(destroyer, set()).add(node)
    return extra


def schedule(fgraph) -> list[Apply]:
    """A topological order that also runs every reader of a buffer before the
    node that overwrites it.  Raises ``ValueError`` when that is impossible."""
    base = fgraph.toposort()
    extra = _destroy_constraints(fgraph)
    if not extra:
        return base
    # Kahn's algorithm, breaking ties by the base order so the result is stable.
    position = {node: i for i, node in enumerate(base)}
    preds: dict[Apply, set[Apply]] = {node: set() for node in base}
    for node in base:
        for inp in node.inputs:
            if inp.owner is not None and inp.owner in preds:
                preds[node].add(inp.owner)
        preds[node] |= extra.get(node, set())
    succs: dict[Apply, list[Apply]] = {node: [] for node in base}
    for node, before in preds.items():
        for p in before:
            succs[p].append(node)
    waiting = {node: len(before) for node, before in preds.items()}
    ready = [(position[n], i, n) for i, n in enumerate(base) if waiting[n] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, _, node = heapq.heappop(ready)
        order.append(node)
        for nxt in succs[node]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                heapq.heappush(ready, (position[nxt], len(order), nxt))
    if len(order) != len(base):
        stuck = [n for n in base if waiting[n] > 0]
        raise ValueError("in-place operations cannot be ordered: a buffer would be overwritten "
                         f"before all of its readers ran (nodes involved: {stuck[:4]})")
    return order


@dataclass
class Step:
    node: Apply
    inputs: tuple[int, ...]    # slots read
    outputs: tuple[int, ...]   # slots written
    frees: tuple[int, ...]     # slots dead after this step


@dataclass
class Plan:
    inputs: tuple[int, ...]            # slots of fgraph.inputs, in order
    outputs: tuple[int, ...]           # slots of fgraph.outputs, in order
    constants: dict[int, object]       # slot -> constant value
    steps: list[Step]
    n_slots: int
    variables: list[Variable]          # slot -> variable


def make_plan(fgraph, allow_gc: bool = True) -> Plan:
    """Schedule ``fgraph`` and assign storage slots and lifetimes."""
    order = schedule(fgraph)
    slot_of: dict[Variable, int] = {}
    variables: list[Variable] = []

    def slot(var: Variable) -> int:
        if var not in slot_of:
            slot_of[var] = len(variables)
            variables.append(var)
        return slot_of[var]

    input_slots = tuple(slot(v) for v in fgraph.inputs)
    constants: dict[int, object] = {}
    for node in order:
        for inp in node.inputs:
            if isinstance(inp, Constant):
                constants[slot(inp)] = inp.data
    for out in fgraph.outputs:
        if isinstance(out, Constant):
            constants[slot(out)] = out.data

    keep = set(fgraph.inputs) | set(fgraph.outputs)
    last_reader: dict[Variable, int] = {}
    for i, node in enumerate(order):
        for inp in node.inputs:
            last_reader[inp] = i
    steps = []
    for i, node in enumerate(order):
        frees = ()
        if allow_gc:
            dead = {inp for inp in node.inputs
                    if last_reader.get(inp) == i and inp not in keep
                    and not isinstance(inp, Constant)}
            # An output nobody reads (one of several outputs of a node) dies at once.
            dead |= {out for out in node.outputs if out not in last_reader and out not in keep}
            frees = tuple(sorted(slot(v) for v in dead))
        steps.append(Step(node, tuple(slot(v) for v in node.inputs),
                          tuple(slot(v) for v in node.outputs), frees))
    output_slots = tuple(slot(v) for v in fgraph.outputs)
    return Plan(input_slots, output_slots, constants, steps, len(variables), variables)
