"""The neural-network ops of :mod:`tenure.symbolic.ops.nnet` in C:
``Softmax``, ``LogSoftmax`` and ``LogSumExp`` over any axes (``keepdims`` for
``LogSumExp``), on float32 and float64 inputs (whose output dtype is the
input's; integer and boolean inputs, which give float64, run their perform).

Nothing is generated per node: the checks and the row loops, one per dtype,
are the C runtime's (``src/nnet.c.src``: ``tn_nn_check``, ``tn_nn_run``), and
the schedule interpreter calls them with what :func:`spec` says of a node
(:func:`has_c_code` tells which nodes).

The kernel -- its contract with the caller:

- ``inputs[0]`` is the node's input, of the output's dtype (native byte
  order), any strides (negative too);
- ``outputs[0]`` is allocated by the caller with the output's shape (the
  input's for softmax and log_softmax; the reduced shape, length 1 on reduced
  axes with keepdims, for logsumexp) and dtype, any strides.  It may be the
  input itself (exactly): the kernels read each row before writing it; any
  other overlap is detected and goes through a copy.
- Dtypes, ndims, the output's shape and writeability are checked on every
  call (``TypeError``/``ValueError``).  Returns 0, or -1 with a Python
  exception set (the caller holds the GIL).

What is computed, row by row (a row: the values along the reduced axes), as
``perform`` does: ``m``, the row's maximum, replaced by 0 when it is not
finite (all -inf, any +inf, or any NaN -- a NaN makes the row's sum NaN, so
the whole row NaN, whatever ``m``); ``e = exp(x - m)`` and its sum ``s``
(rounded to the dtype; float32 sums accumulate in double, 16 lanes, so they are
at least as accurate as NumPy's pairwise float32 sum); then softmax ``e / s``,
log_softmax ``(x - m) - log(s)``, logsumexp ``log(s) + m``.  So rows of -inf
give NaN (softmax, log_softmax) and -inf (logsumexp), a +inf gives NaN where
perform does, and an empty reduced axis gives an empty output (softmax,
log_softmax) or -inf (logsumexp), like perform.  NumPy's warnings (0/0,
log(0)) are not issued.

Loops.  When the reduced axes are the trailing ones and the input and output
are C-contiguous and aligned, the rows are read in place: one pass for the
maximum (16 lanes), one computing ``exp`` a block of :data:`BLOCK` at a time
into a stack buffer (vectorized through libmvec) and summing it, and one
writing the row.  Otherwise the input is copied (kept axes first, reduced axes
last, C order), the rows computed into a contiguous temporary and that copied
into the output.  No OpenMP.
"""

from __future__ import annotations

import sys

from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.nnet import LogSoftmax, LogSumExp, Softmax

__all__ = ["BLOCK", "has_c_code", "spec"]

#: values exponentiated at a time (on the stack) along a row
BLOCK = 256

_KIND = {Softmax: 0, LogSoftmax: 1, LogSumExp: 2}
_FLOATS = ("float32", "float64")


def has_c_code(node: Apply) -> bool:
    """Whether the runtime's kernels compute ``node``."""
    op = node.op
    if type(op) not in _KIND or len(node.inputs) != 1 or len(node.outputs) != 1:
        return False
    x, out = node.inputs[0], node.outputs[0]
    if x.dtype not in _FLOATS or out.dtype != x.dtype or x.ndim > 32:
        return False
    return all(0 <= a < x.ndim for a in op.axis)


def spec(node: Apply) -> tuple[int, list[int], int, int]:
    """``(kind, reduced flags per input axis, keepdims, output ndim)``: the
    arguments of the runtime's ``tn_nn_check`` and ``tn_nn_run`` (kind 0
    softmax, 1 log_softmax, 2 logsumexp; keepdims -1: the input's shape)."""
    if not has_c_code(node):
        raise NotImplementedError(f"no C code for {node.op}")
    op = node.op
    nd = node.inputs[0].ndim
    reduced = [1 if d in op.axis else 0 for d in range(nd)]
    kind = _KIND[type(op)]
    keepdims = int(op.keepdims) if kind == 2 else -1  # -1: the input's shape
    return kind, reduced, keepdims, node.outputs[0].ndim


# How the C linker runs them (.dispatch): from a description (src/nnet.c.src).
_ENTRY = CEntry("nnet", sys.modules[__name__], step="nnet")
register_c_op(Softmax, _ENTRY)
register_c_op(LogSoftmax, _ENTRY)
register_c_op(LogSumExp, _ENTRY)
