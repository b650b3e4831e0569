"""Region updates with kernels: ``IncSubtensor`` -- ``x[index] += v`` and
``x[index] = v`` with basic indexing (ints and slices) -- as an elementwise
kernel (:mod:`.elemwise`) writing into the region, a view of the output.

The update's arithmetic is an elementwise node built once per update node
(:func:`region_kernel`): for ``inc``, ``cast(add(region, v))`` to ``x``'s
dtype (NumPy's ``np.add(region, v, out=region, casting="unsafe")``: the sum
in the promoted dtype, then the cast); for ``set``, ``cast(v)``.  ``v``
broadcasts to the region; the kernel reads each region element before it
writes it, so the region may be its own input.

:class:`RegionUpdateStep` is the executor's step: the output is ``x``
itself for an in-place node (when the backend may write it), else a copy of
``x``; the region is ``out[index]`` (a view, on the device as on the CPU);
a ``v`` that overlaps the output is copied first (the launcher's rule).
Advanced indexing (``AdvancedIncSubtensor``: repeated indices accumulate)
is not here: its nodes run their ``perform``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenure.linkers.cuda.dispatch import KernelFamily, register_cuda_op
from tenure.linkers.cuda.elemwise import ElemwiseKernel, elemwise_kernel, has_cuda_code
from tenure.linkers.cuda.index_checks import check_basic_index
from tenure.linkers.cuda.launch import run_elemwise
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.composite import Composite
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.subtensor_update import IncSubtensor
from tenure.symbolic.types import TensorType

__all__ = ["RegionKernel", "RegionUpdateStep", "region_kernel"]


@dataclass(frozen=True)
class RegionKernel:
    """The elementwise ``node`` computing an update's region and its ``kernel``;
    ``reads_region``: the region is the node's first input (``inc``)."""

    node: Apply
    kernel: ElemwiseKernel
    reads_region: bool


def region_kernel(node: Apply) -> RegionKernel | None:
    """The kernel of an ``IncSubtensor`` node, or None (another op, or
    dtypes without C code)."""
    op = node.op
    if type(op) is not IncSubtensor:
        return None
    x, v, *index = node.inputs
    region = op.index_op.make_node(x, *index).outputs[0]
    region_var = TensorType(x.dtype, region.type.shape)()
    # v as the step gives it: with the region's number of axes (length-1
    # axes in front), so the kernel has a variant for every launch.
    v_var = TensorType(v.dtype, (None,) * region.ndim)()
    cast = ps.Cast(x.dtype)
    if op.set_instead_of_inc:
        update = Elemwise(cast).make_node(v_var)
    else:
        body = Composite(2, [(ps.add, [("i", 0), ("i", 1)]), (cast, [("t", 0)])])
        update = Elemwise(body).make_node(region_var, v_var)
    if not has_cuda_code(update):
        return None
    return RegionKernel(update, elemwise_kernel(update), not op.set_instead_of_inc)


class RegionUpdateStep:
    """``step(node, inputs, cells)``: the ``IncSubtensor`` ``node`` by its
    region kernel on ``backend`` (see the module doc)."""

    def __init__(self, backend, region: RegionKernel):
        self.backend = backend
        self.region = region
        self.kernel = region.kernel   # (what the executor compiles up front)

    def __call__(self, node, inputs, cells):
        op = node.op
        x, v, *values = inputs
        # NumPy's errors for a zero step or an integer out of range (CuPy's
        # differ), before anything is copied or written
        check_basic_index(op.index_op, x.shape, x.dtype, values)
        backend = self.backend
        out = x if op.inplace and backend.writeable(x) else backend.copy(x)
        region = out[op.index_op.index(values)]
        op.check_value_shape(v.shape, region.shape)
        v = v.reshape((1,) * (region.ndim - v.ndim) + tuple(v.shape))   # a view
        operands = [region, v] if self.region.reads_region else [v]
        run_elemwise(backend, self.kernel, self.region.node, operands, out=region)
        cells[0][0] = out


# How the CUDA linker runs IncSubtensor (.dispatch): by its region kernel.
register_cuda_op(IncSubtensor, kernel=KernelFamily(region_kernel, make_step=RegionUpdateStep))
