"""The CUDA linker's executor: the Python linker's schedule, plans and
buffer reuse, with every node that has a generated kernel -- elementwise and
``Composite`` nodes (:mod:`.elemwise`), reductions and fused reductions
(:mod:`.reduce`), softmax, log_softmax and logsumexp (:mod:`.nnet`), region
updates with basic indexing (:mod:`.subtensor`) -- computed by that kernel
through a :class:`~.launch.Backend`; the other nodes run their ``perform``.

Two executors share it: ``Mode(linker="cuda_emulated")`` here
(:class:`~.emulation.EmulatedBackend`: NumPy arrays in and out, the kernels
compiled as host C++ and run on the CPU, everything else by ``perform``),
which runs the kernels inside whole graphs -- in place where the
DestroyHandler allows, into last call's buffer or a dead buffer the plan
hands on -- for testing and debugging kernels; and the device path,
``Mode(linker="cuda")`` (:mod:`.device_linker`: device arrays, device shared
variables, every node on the device).

A kernel step writes into the output cell's buffer when it holds one of the
output's shape and dtype that it may write (a kept output buffer, a planned
donor); an in-place node writes into its destroyed input (the launcher's
rule); otherwise it allocates.  Every kernel of a graph is compiled when the
function is (one module per kernel, shared by every graph that needs it and
kept in the compile cache).
"""

from __future__ import annotations

import threading


from tenure.linkers.cuda import elemwise as cuda_elemwise
from tenure.linkers.cuda import nnet as cuda_nnet
from tenure.linkers.cuda import reduce as cuda_reduce
from tenure.linkers.cuda.emulation import EmulatedBackend
from tenure.linkers.cuda.launch import run_elemwise, run_nnet, run_reduce
from tenure.linkers.cuda.subtensor import RegionUpdateStep, region_kernel
from tenure.linkers.plan import make_plan, step_workspace
from tenure.linkers.python import MIN_REUSE_BYTES, PythonThunk, op_perform
from tenure.symbolic.ops.composite import FusedReduce
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.nnet import LogSoftmax, LogSumExp, Softmax
from tenure.symbolic.ops.reduce import Reduce
from tenure.symbolic.ops.subtensor_update import IncSubtensor

__all__ = ["CudaThunk", "EmulatedCudaLinker", "KernelStep", "kernel_step"]


class KernelStep:
    """``step(node, inputs, cells)``: ``node`` computed by its kernel on
    ``backend``, into ``cells[0][0]`` when that buffer may take the result."""

    def __init__(self, backend, kernel, run):
        self.backend = backend
        self.kernel = kernel
        self.run = run

    def __call__(self, node, inputs, cells):
        cell = cells[0]
        spare = _writable_output(self.backend, cell[0], node, inputs)
        cell[0] = self.run(self.backend, self.kernel, node, list(inputs), spare=spare)


def _writable_output(backend, buffer, node, inputs):
    """``buffer`` (an output cell's content) when it may take ``node``'s
    result: an array of ``backend``'s kind and the output's dtype,
    C-contiguous and writeable, and not an input (an in-place node writes
    into its destroyed input, by the launcher's rule).  The launcher uses it
    when its shape fits, and allocates otherwise."""
    if not backend.is_array(buffer) or buffer.dtype != node.outputs[0].type.numpy_dtype:
        return None
    if not (buffer.flags.c_contiguous and backend.writeable(buffer)):
        return None
    if any(buffer is x for x in inputs):
        return None
    return buffer


def kernel_step(node, backend) -> KernelStep | RegionUpdateStep | None:
    """The kernel step computing ``node`` on ``backend``, or None when no
    generated kernel computes it (then ``perform`` does)."""
    op = node.op
    try:
        if isinstance(op, Elemwise) and cuda_elemwise.has_cuda_code(node):
            return KernelStep(backend, cuda_elemwise.elemwise_kernel(node), run_elemwise)
        if isinstance(op, (Reduce, FusedReduce)) and cuda_reduce.has_cuda_code(node):
            return KernelStep(backend, cuda_reduce.reduce_kernel(node), run_reduce)
        if isinstance(op, (Softmax, LogSoftmax, LogSumExp)) and cuda_nnet.has_cuda_code(node):
            return KernelStep(backend, cuda_nnet.nnet_kernel(node), run_nnet)
        if isinstance(op, IncSubtensor):
            region = region_kernel(node)
            return RegionUpdateStep(backend, region) if region is not None else None
    except (NotImplementedError, OverflowError):
        return None
    return None


class CudaThunk(PythonThunk):
    """A :class:`PythonThunk` whose nodes with kernels run them."""

    def __init__(self, plan, keep, fgraph, backend):
        self.backend = backend
        self.kernel_steps = {}
        for step in plan.steps:
            found = kernel_step(step.node, backend)
            if found is not None:
                self.kernel_steps[step.node] = found
        for found in {s.kernel.name: s.kernel for s in self.kernel_steps.values()}.values():
            backend.prepare([found])          # compiled now, one module per kernel
        self.perform_of = self._perform_of    # before the steps are made (PythonThunk)
        self.workspace_of = self._workspace_of
        super().__init__(plan, keep, fgraph)

    def _perform_of(self, node):
        return self.kernel_steps.get(node) or op_perform(node)

    def _workspace_of(self, node, shapes) -> int:
        """A kernel needs no temporaries (``perform``'s do: the plan counts them)."""
        return 0 if node in self.kernel_steps else step_workspace(node, shapes)


_EMULATED = None
_EMULATED_LOCK = threading.Lock()


def emulated_backend() -> EmulatedBackend:
    """The process's emulated device: its kernels are shared by every function."""
    global _EMULATED
    with _EMULATED_LOCK:
        if _EMULATED is None:
            _EMULATED = EmulatedBackend()
        return _EMULATED


class EmulatedCudaLinker:
    """``Mode(linker="cuda_emulated")``: the CUDA linker's kernels run on
    the CPU under host emulation (see the module doc)."""

    name = "cuda_emulated"

    def make_thunk(self, fgraph, keep_outputs: set[int], allow_gc: bool = True) -> CudaThunk:
        plan = make_plan(fgraph, allow_gc=allow_gc, keep=keep_outputs)
        keep = {plan.outputs[i] for i in keep_outputs}
        thunk = CudaThunk(plan, keep, fgraph, emulated_backend())
        thunk.min_reuse_bytes = MIN_REUSE_BYTES
        return thunk
