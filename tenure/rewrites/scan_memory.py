"""A loop keeps only what is read: ``scan_save_memory``.

A :class:`~tenure.symbolic.ops.scan.Scan` node stacks every state's value of
every step.  Where nothing reads a state's trajectory (a shared variable
updated in the loop, an RNN's hidden state when only the last one is used,
an iterative solver's iterate), the rewritten loop keeps that state in a
ring of its last ``L`` values (``L``: its earliest tap), overwritten in
place from step to step, and gives its final value only: the memory of the
state goes from ``n_steps`` values to ``L``.  Reading only the trajectory's
last entry (``hs[-1]``) is reading the final value; the loop then raises
NumPy's ``IndexError`` when no step ran, as ``hs[-1]`` of an empty
trajectory does.  An output no step reads back (a nit-sot) that nothing
reads is dropped from the step altogether.

A gradient reads the trajectories (the backward loop recomputes each step
from them), so in a training step they stay stored.
"""

from __future__ import annotations

from tenure.rewrites.engine import register_graph_rewrite
from tenure.symbolic.fgraph import OUTPUT, FunctionGraph
from tenure.symbolic.ops.indexing import Subtensor
from tenure.symbolic.ops.scan import Scan

_WHOLE_AXIS = ("slice", None, None, None)


def is_last_entry(client) -> bool:
    """Whether a client of a trajectory is ``trajectory[-1]``."""
    node = client[0]
    if node == OUTPUT or not isinstance(node.op, Subtensor):
        return False
    pattern = node.op.pattern
    return pattern[0] == ("int", -1) and all(entry == _WHOLE_AXIS for entry in pattern[1:])


@register_graph_rewrite("memory", tags=("scan_last_entry",))
def scan_save_memory(fgraph) -> bool:
    """Unread trajectories become rings (``hs[-1]`` read from the final
    value); unread nit-sot outputs are dropped."""
    changed = False
    for node in [n for n in fgraph.toposort() if isinstance(n.op, Scan)]:
        if node in fgraph.apply_nodes:
            changed |= _save_memory(fgraph, node)
    return changed


def _save_memory(fgraph, node) -> bool:
    op = node.op
    parts = op.parts
    outputs = node.outputs
    last_reads = [[] for _ in range(parts.n_states)]
    stored, checks_empty = [], []
    for k in range(parts.n_states):
        clients = fgraph.clients.get(outputs[k], [])
        # a trajectory with its initial entries is read for them: kept whole
        only_last = bool(clients) and not op.keeps_initial[k] and \
            all(is_last_entry(c) for c in clients)
        if only_last:
            last_reads[k] = [c[0].outputs[0] for c in clients]
        stored.append(op.stored[k] and bool(clients) and not only_last)
        checks_empty.append(op.final_checks_empty[k] or only_last)
    nitsots = [j for j in range(op.n_nitsot)
               if fgraph.clients.get(outputs[parts.n_states + j])]
    if tuple(stored) == op.stored and len(nitsots) == op.n_nitsot:
        return False
    new_op = _rebuilt(op, nitsots, stored, checks_empty)
    old_trajs, old_nitsots, old_finals, old_checkpoints = op.output_groups(outputs)
    trajs, kept_nitsots, finals, checkpoints = new_op.output_groups(
        new_op.make_node(*node.inputs).outputs)
    pairs = [(old_trajs[k], trajs[k]) for k in range(parts.n_states) if not last_reads[k]]
    pairs += [(old_nitsots[j], kept_nitsots[i]) for i, j in enumerate(nitsots)]
    pairs += list(zip(old_finals, finals)) + list(zip(old_checkpoints, checkpoints))
    pairs += [(read, finals[k]) for k in range(parts.n_states) for read in last_reads[k]]
    pairs = [(old, new_var) for old, new_var in pairs if fgraph.clients.get(old)]
    return fgraph.replace_all_validate(pairs, reason="scan_save_memory")


def _rebuilt(op: Scan, nitsots: list, stored: list, checks_empty: list) -> Scan:
    parts = op.parts
    inner = op.inner
    kept_outputs = (inner.outputs[:parts.n_states]
                    + [inner.outputs[parts.n_states + j] for j in nitsots]
                    + inner.outputs[parts.n_states + op.n_nitsot:])
    labels = None
    if op.labels is not None:
        labels = dict(op.labels)
        if "outputs" in labels:
            labels["outputs"] = [labels["outputs"][j] for j in nitsots
                                 if j < len(labels["outputs"])]
    return op.replaced(FunctionGraph(list(inner.inputs), kept_outputs).clone(),
                       n_nitsot=len(nitsots), labels=labels, stored=tuple(stored),
                       final_checks_empty=tuple(checks_empty),
                       keeps_initial=tuple(initial and kept for initial, kept
                                           in zip(op.keeps_initial, stored)))
