"""A per-op cost model: about how long one apply node takes, from shapes alone.

The activation-memory budget (:mod:`tenure.rewrites.remat`) weighs keeping a
forward value against computing it again; this module prices the
recomputation.  :func:`node_cost` estimates the seconds a node takes as::

    flops / FLOPS_RATE + bytes_moved / BYTES_RATE + NODE_OVERHEAD

with ``flops`` and ``bytes_moved`` what the node's op says:
:meth:`Op.flops <tenure.symbolic.graph.Op.flops>` and :meth:`Op.bytes_moved
<tenure.symbolic.graph.Op.bytes_moved>`, each op family overriding the
defaults in its own module (the size helpers they share are in
:mod:`tenure.symbolic.cost_facts`).  Only *relative* costs matter to the
budget (which of two values is cheaper to recompute), so the rates are round
numbers for a typical CPU core rather than a measurement of this one.  What
the ops count:

- products (``MatMul``, ``Dot``, ``TensorDot``, ``Gemm``): ``2 * m * n * k``
  flops -- each output element sums ``k`` products (``Gemm`` adds 3 per
  output element for the scaling and the sum);
- elementwise ops: the output size times the number of scalar ops (a fused
  ``Composite`` counts each of its steps; a ``FusedReduce`` one more, the
  fold, per element of its broadcast inputs);
- reductions (``Reduce``, ``Var``, ``ArgReduce``, ``CumSum``): one flop per
  input element; softmax-like ops ``SOFTMAX_FLOPS`` per input element; sorts
  ``log2 n`` per input element;
- views (every output in ``view_map``: ``DimShuffle``, ``Reshape``,
  ``Subtensor``, ``SumTo`` ...) and shape ops (``Shape``, ``MakeVector``):
  nothing but the overhead -- no flops, no bytes moved -- except a view that
  may copy (``view_may_copy``) and changes the size: a ``SumTo`` that sums or
  an ``ExpandTo`` that broadcasts costs one flop per input element and
  moves its input and output;
- anything else (``Outer`` included): one flop per output element, and the
  bytes of its inputs and outputs.

``shapes`` is the map :meth:`tenure.rewrites.sizes.SizeModel.shapes` returns
(variable -> tuple of ints, or ``None`` when unknown).  An unknown shape
counts as zero elements, so such a node costs just :data:`NODE_OVERHEAD`:
small, but never zero (a knapsack never keeps an item worth nothing).
"""

from __future__ import annotations

import math

from tenure.symbolic.cost_facts import SOFTMAX_FLOPS  # noqa: F401  (re-exported)

#: floating-point operations per second: one modern core with SIMD and BLAS
#: (tens of GFLOP/s on a matrix product)
FLOPS_RATE = 50e9

#: bytes per second one core moves to and from main memory
BYTES_RATE = 10e9

#: seconds every node costs whatever its size (dispatching one op from Python)
NODE_OVERHEAD = 2e-6


def node_flops(node, shapes) -> float:
    """Floating-point operations ``node`` performs (an estimate): its op's
    :meth:`~tenure.symbolic.graph.Op.flops`."""
    return float(node.op.flops(node, shapes))


def bytes_moved(node, shapes) -> float:
    """Bytes ``node`` reads and writes (views move none): its op's
    :meth:`~tenure.symbolic.graph.Op.bytes_moved`."""
    return float(node.op.bytes_moved(node, shapes))


def node_cost(node, shapes) -> float:
    """Estimated seconds to run ``node`` once (see the module docstring)."""
    return (node_flops(node, shapes) / FLOPS_RATE + bytes_moved(node, shapes) / BYTES_RATE
            + NODE_OVERHEAD)


def nodes_cost(nodes, shapes) -> float:
    """The total :func:`node_cost` of ``nodes``."""
    return math.fsum(node_cost(n, shapes) for n in nodes)
