"""Expansion: ops replaced by graphs of other ops, for the linkers that run
only the ops they have a kernel for.

An op may define ``expand(node) -> [outputs]``: the same values as a graph
of other ops (the 2-d correlation and its gradients,
:mod:`tenure.symbolic.ops.corr2d`: slices, a join and a product).  The py
and C linkers run such an op itself (``perform``, or the C linker's kernel),
which is why it is an op: it computes in less memory than its expansion.
The cuda and dask linkers have no kernel for it; their row of
:data:`tenure.linkers.table.LINKERS` says ``expands_ops``, and a function
compiled for them expands every such node before the mode's rewrites run
(:func:`expand_ops`), so that the expansion is rewritten (fused, made in
place) like any graph.  It is not a rewrite a mode selects: without it those
linkers could not run the graph at all, whatever the mode's rewrites.
"""

from __future__ import annotations

from tenure.symbolic.fgraph import FunctionGraph

__all__ = ["expand_ops", "expandable"]


def expandable(node) -> bool:
    """Whether ``node``'s op has an expansion."""
    return callable(getattr(node.op, "expand", None))


def expand_ops(fgraph: FunctionGraph) -> bool:
    """Replace every node of ``fgraph`` whose op has an expansion by it,
    until none is left (today's expansions hold none, but an op may expand
    into another that expands).  Returns whether any was."""
    changed = False
    while True:
        nodes = [node for node in fgraph.toposort() if expandable(node)]
        if not nodes:
            return changed
        for node in nodes:
            outputs = node.op.expand(node)
            fgraph.replace_all(list(zip(node.outputs, outputs)), reason="expand_ops")
        changed = True
