"""The CUDA linker's executor: the Python linker's schedule, plans and
buffer reuse, with every node that has a generated kernel -- elementwise and
``Composite`` nodes (:mod:`.elemwise`), reductions and fused reductions
(:mod:`.reduce`), softmax, log_softmax and logsumexp (:mod:`.nnet`), region
updates with basic indexing (:mod:`.subtensor`) -- computed by that kernel
through a :class:`~.launch.Backend`; the other nodes run their ``perform``.
Which kernel a node gets is the dispatch table's (:mod:`.dispatch`): the
kernel part of its op class's entry.

Two executors share it: ``Mode(linker="cuda_host")`` here
(:class:`~.host_kernels.HostBackend`: NumPy arrays in and out, the kernels
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

from tenure.linkers.cuda.dispatch import CudaContext, KernelStep, kernel_step
from tenure.linkers.cuda.host_kernels import HostBackend
from tenure.linkers.plan import make_plan, step_workspace
from tenure.linkers.python import MIN_REUSE_BYTES, PythonThunk, op_perform

# KernelStep and kernel_step live in .dispatch (the table's kernel parts make
# the steps); they stay importable from here, where the executor uses them.
__all__ = ["CudaThunk", "HostCudaLinker", "KernelStep", "kernel_step"]


class CudaThunk(PythonThunk):
    """A :class:`PythonThunk` whose nodes with kernels run them."""

    def __init__(self, plan, keep, fgraph, backend, context: CudaContext | None = None):
        self.backend = backend
        #: what the dispatch table's entries receive (:mod:`.dispatch`)
        self.context = context if context is not None else CudaContext(backend=backend)
        self.kernel_steps = {}
        for step in plan.steps:
            found = kernel_step(step.node, backend, self.context)
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


_HOST = None
_HOST_LOCK = threading.Lock()


def host_backend() -> HostBackend:
    """The process's backend of kernels run on the host: its kernels are shared by
    every function."""
    global _HOST
    with _HOST_LOCK:
        if _HOST is None:
            _HOST = HostBackend()
        return _HOST


class HostCudaLinker:
    """``Mode(linker="cuda_host")``: the CUDA linker's kernels run on
    the host, compiled as host C++ (see the module doc)."""

    name = "cuda_host"

    def make_thunk(self, fgraph, keep_outputs: set[int], allow_gc: bool = True) -> CudaThunk:
        plan = make_plan(fgraph, allow_gc=allow_gc, keep=keep_outputs)
        keep = {plan.outputs[i] for i in keep_outputs}
        backend = host_backend()
        thunk = CudaThunk(plan, keep, fgraph, backend, CudaContext(self, backend))
        thunk.min_reuse_bytes = MIN_REUSE_BYTES
        return thunk
