"""A loop keeps only what is read: ``scan_save_memory``.

A :class:`~tenure.symbolic.ops.scan.Scan` node stacks every state's value of
every step.  Where nothing reads a state's trajectory (a shared variable
updated in the loop, an RNN's hidden state when only the last one is used,
an iterative solver's iterate), the rewritten loop keeps that state in a
ring of its last ``L`` values (``L``: its earliest tap), overwritten in
place from step to step, and gives its final value only: the memory of the
state goes from ``n_steps`` values to ``L``.  Reading only the
trajectory's last entry (``hs[-1]``) is reading the final value
(``scan_last_entry``).  An output no step reads back
(a nit-sot) that nothing reads is dropped from the step altogether.

A gradient reads the trajectories (the backward loop recomputes each step
from them), so in a training step they stay stored.
"""

from __future__ import annotations

from tenure.rewrites.engine import register_node_rewrite
from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.ops.indexing import Subtensor
from tenure.symbolic.ops.scan import Scan

_WHOLE_AXIS = ("slice", None, None, None)


def _read(fgraph, var) -> bool:
    return bool(fgraph.clients.get(var))


@register_node_rewrite("memory", tags=("scan_save_memory",))
def scan_save_memory(fgraph, node):
    """Unread trajectories become rings; unread nit-sot outputs are dropped."""
    op = node.op
    if not isinstance(op, Scan):
        return None
    parts = op.parts
    outputs = node.outputs
    stored = tuple(was and _read(fgraph, outputs[k]) for k, was in enumerate(op.stored))
    nitsots = [j for j in range(op.n_nitsot) if _read(fgraph, outputs[parts.n_states + j])]
    if stored == op.stored and len(nitsots) == op.n_nitsot:
        return None
    inner = op.inner
    kept_outputs = (inner.outputs[:parts.n_states]
                    + [inner.outputs[parts.n_states + j] for j in nitsots]
                    + inner.outputs[parts.n_states + op.n_nitsot:])
    new_op = Scan(FunctionGraph(list(inner.inputs), kept_outputs).clone(), op.n_seqs,
                  op.state_taps, len(nitsots), op.as_while, op.exact_length,
                  op.truncate_gradient, _kept_labels(op, nitsots), op.inner_mode, stored)
    new = new_op.make_node(*node.inputs).outputs
    replacements = list(new[:parts.n_states])
    replacements += [new[parts.n_states + nitsots.index(j)] if j in nitsots else None
                     for j in range(op.n_nitsot)]
    replacements += new[parts.n_states + len(nitsots):]
    return replacements


@register_node_rewrite("memory", tags=("scan_save_memory", "scan_last_entry"))
def scan_last_entry(fgraph, node):
    """``trajectory[-1]`` of a loop's state is the loop's final value of it."""
    if not isinstance(node.op, Subtensor):
        return None
    pattern = node.op.pattern
    if pattern[0] != ("int", -1) or any(entry != _WHOLE_AXIS for entry in pattern[1:]):
        return None
    source = node.inputs[0]
    loop = source.owner
    if loop is None or not isinstance(loop.op, Scan) or source.index >= loop.op.parts.n_states:
        return None
    parts = loop.op.parts
    return loop.outputs[parts.n_states + parts.n_nitsot + source.index]


def _kept_labels(op: Scan, nitsots: list) -> dict | None:
    if op.labels is None:
        return None
    labels = dict(op.labels)
    if "outputs" in labels:
        labels["outputs"] = [labels["outputs"][j] for j in nitsots
                             if j < len(labels["outputs"])]
    return labels
