"""Elementwise fusion: trees of elementwise ops become one ``Elemwise(Composite)``,
and a reduction absorbs the elementwise tree it reduces.

Phase ``"fuse"``, tag ``"fusion"`` (``tn.Mode(exclude=["fusion"])`` turns both
rewrites off).

``fuse_elemwise``
    Starting from the last elementwise node of a region and walking towards the
    inputs, a producer is absorbed into the group when it is a non-inplace
    ``Elemwise`` and *every* reader of its result is already in the group (and
    the result is not a graph output).  A result with readers outside the group
    stays a separate node (itself the root of another group) and enters the
    composite as an input -- unless recomputing it costs less than storing it
    (:func:`recomputable`: one cheap arithmetic op reading one full-size value
    that exists anyway, as ``x - x.mean(axis=1, keepdims=True)``): then the
    group computes its own copy, and the node stays for the other readers
    (or goes, when each of them takes a copy too).  The absorbed region is
    convex (a copy reads only the producer's inputs), so fusing it never
    makes a cycle.  Python-number constants are
    folded into the scalar graph as weak literals; a group reads at most
    :data:`MAX_INPUTS` distinct inputs.  Broadcasting needs no care: the
    composite broadcasts all its inputs to the output shape, which is the shape
    every step of the chain broadcasts to anyway.

``fuse_reduce``
    ``sum``/``prod``/``max``/``min``/``mean`` over at least one axis of an elementwise
    result that nothing else reads becomes a :class:`FusedReduce`, which folds
    each block of the elementwise values into the reduction as it goes: the
    full intermediate is never allocated.
"""

from __future__ import annotations

import heapq

from tenure.rewrites.engine import register_graph_rewrite
from tenure.symbolic.fgraph import OUTPUT
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.composite import Composite, FusedReduce
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.reduce import Reduce
from tenure.symbolic.variable import TensorConstant

#: the most distinct inputs one fused op reads
MAX_INPUTS = 32

#: the reductions that can absorb an elementwise tree
FUSABLE_REDUCTIONS = ("sum", "prod", "max", "min", "mean")


def _is_fusable(node) -> bool:
    return (node is not None and isinstance(node.op, Elemwise) and not node.op.inplace_pattern
            and len(node.outputs) == 1)


def _is_weak(var) -> bool:
    return isinstance(var, TensorConstant) and var.weak


#: scalar ops cheap enough to compute again in each reader rather than store
CHEAP_TO_RECOMPUTE = frozenset({"add", "sub", "mul", "neg"})


def recomputable(fgraph, producer) -> bool:
    """Whether a group may compute its own copy of ``producer``'s result
    instead of reading it: one cheap arithmetic op (not a graph output)
    whose inputs are, but for one, statically smaller than its result
    (broadcast along an axis it spans), and whose one full-size input exists
    anyway -- a graph input, a non-elementwise result, or an elementwise
    one read elsewhere too -- so the copy reads what the stored result
    would have cost to write and read back, and stores nothing.  Values are
    the same bits: the same op on the same inputs."""
    if getattr(producer.op.scalar_op, "name", None) not in CHEAP_TO_RECOMPUTE:
        return False
    (result,) = producer.outputs
    if any(client == OUTPUT for client, _ in fgraph.clients.get(result, ())):
        return False
    full = [v for v in producer.inputs if not _is_weak(v) and not _smaller(v, result)]
    if len(full) != 1:
        return False
    owner = full[0].owner
    return not (_is_fusable(owner) and len(fgraph.clients.get(full[0], ())) == 1)


def _smaller(v, result) -> bool:
    """Whether ``v`` is statically broadcast along an axis ``result`` spans."""
    offset = result.ndim - v.ndim
    return offset > 0 or any(
        mine == 1 and theirs != 1 for mine, theirs in zip(v.type.shape, result.type.shape))


def collect_group(fgraph, root: Apply, position: dict,
                  max_inputs: int = MAX_INPUTS) -> set[Apply]:
    """``root`` and every elementwise producer whose result only the group reads.

    Candidates are decided from the outputs towards the inputs (highest
    ``position`` in the schedule first), so when a producer is looked at, every
    node that could still read its result from inside the group has already
    joined or been refused: the decision is final and the walk linear.
    """
    group = {root}
    # the distinct variables the group reads from outside (Python numbers excluded)
    external = {v: None for v in root.inputs if not _is_weak(v)}
    heap: list = []
    queued: set = set()

    def push_producers(node):
        for inp in node.inputs:
            producer = inp.owner
            if producer is not None and producer not in queued and producer in position:
                queued.add(producer)
                heapq.heappush(heap, (-position[producer], id(producer), producer))

    push_producers(root)
    while heap:
        _, _, producer = heapq.heappop(heap)
        if not _is_fusable(producer) or producer not in fgraph.apply_nodes:
            continue
        (result,) = producer.outputs
        clients = fgraph.clients.get(result, ())
        if not clients or any(client == OUTPUT or client not in group for client, _ in clients):
            if not (clients and recomputable(fgraph, producer)):
                continue
        new = [v for v in producer.inputs if not _is_weak(v) and v not in external]
        if len(external) - 1 + len(set(new)) > max_inputs:
            continue
        group.add(producer)
        del external[result]
        for v in new:
            external[v] = None
        push_producers(producer)
    return group


def build_composite(group: set[Apply], root: Apply, position: dict) -> tuple[Composite, list]:
    """The Composite computing ``root``'s output from the group's external inputs.

    Composites already in the group are inlined (a fused op never nests).
    Returns the composite and its inputs, in order.
    """
    order = sorted(group, key=position.__getitem__)
    assert order[-1] is root
    inputs: list = []
    input_index: dict = {}
    result_ref: dict = {}   # variable produced in the group -> ("t", step)
    steps: list = []

    def ref(var):
        if var in result_ref:
            return result_ref[var]
        if _is_weak(var):
            return ("c", var.weak_value)
        if var not in input_index:
            input_index[var] = len(inputs)
            inputs.append(var)
        return ("i", input_index[var])

    for node in order:
        outer = [ref(v) for v in node.inputs]
        sop = node.op.scalar_op
        if isinstance(sop, Composite):
            local: list = []
            for op, refs in sop.steps:
                mapped = [outer[v] if k == "i" else local[v] if k == "t" else (k, v)
                          for k, v in refs]
                steps.append((op, mapped))
                local.append(("t", len(steps) - 1))
        else:
            steps.append((sop, outer))
        result_ref[node.outputs[0]] = ("t", len(steps) - 1)
    return Composite(len(inputs), steps), inputs


@register_graph_rewrite("fuse", name="fuse_elemwise", tags=("fusion",))
def fuse_elemwise(fgraph) -> bool:
    """Merge trees of elementwise nodes into one ``Elemwise(Composite)`` each."""
    order = fgraph.toposort()
    position = {node: i for i, node in enumerate(order)}
    changed = False
    for root in reversed(order):
        if root not in fgraph.apply_nodes or not _is_fusable(root):
            continue
        group = collect_group(fgraph, root, position)
        if len(group) < 2:
            continue
        composite, inputs = build_composite(group, root, position)
        old = root.outputs[0]
        new = Elemwise(composite)(*inputs)
        if new.type.dtype != old.type.dtype:  # never expected; refuse rather than change types
            continue
        if fgraph.replace_all_validate([(old, new)], reason="fuse_elemwise"):
            changed = True
            position[new.owner] = position[root]
    return changed


@register_graph_rewrite("fuse", name="fuse_reduce", tags=("fusion",))
def fuse_reduce(fgraph) -> bool:
    """A reduction of an elementwise tree that nothing else reads becomes one
    :class:`FusedReduce` that never materialises the elementwise result."""
    changed = False
    order = fgraph.toposort()
    # Replacing a node by a FusedReduce keeps the others in a valid order.
    position = {node: i for i, node in enumerate(order)}
    for node in order:
        op = node.op
        if (node not in fgraph.apply_nodes or type(op) is not Reduce
                or op.fn_name not in FUSABLE_REDUCTIONS or not op.axis):
            continue
        values = node.inputs[0]
        producer = values.owner
        if not _is_fusable(producer) or producer not in fgraph.apply_nodes:
            continue
        if fgraph.clients.get(values) != [(node, 0)]:
            continue  # read elsewhere (or returned): the intermediate exists anyway
        if op.fn_name == "mean" and values.type.dtype != node.outputs[0].type.dtype:
            continue  # (NumPy's mean of ints converts blocks to floats: left whole)
        group = collect_group(fgraph, producer, position)
        composite, inputs = build_composite(group, producer, position)
        old = node.outputs[0]
        new = FusedReduce(composite, op.fn_name, op.axis, op.keepdims)(*inputs)
        if new.type.dtype != old.type.dtype:
            continue
        if fgraph.replace_all_validate([(old, new)], reason="fuse_reduce"):
            changed = True
    return changed
