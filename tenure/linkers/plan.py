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

from dataclasses import dataclass

from tenure.rewrites.destroy import destroy_orderings, order_with_constraints
from tenure.symbolic.graph import Apply, Constant, Variable


def schedule(fgraph) -> list[Apply]:
    """A topological order that also runs every reader of a buffer before the
    node that overwrites it.  Raises ``ValueError`` when that is impossible."""
    return order_with_constraints(fgraph.toposort(), destroy_orderings(fgraph.apply_nodes))


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
