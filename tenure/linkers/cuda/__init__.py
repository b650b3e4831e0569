"""The CUDA linker (see DESIGN.md, "Linkers").

Landed so far: the kernels, the executor, and how both are checked without
a GPU.

- :mod:`.elemwise`: CUDA C for elementwise and ``Composite`` nodes from the
  scalar table the C linker uses (one definition of each op's math).
- :mod:`.reduce`: reductions and fused reductions (a block per output with a
  shared-memory tree, or a thread per output).
- :mod:`.nnet`: softmax, log_softmax, logsumexp (a block per row).
- :mod:`.subtensor`: ``inc_subtensor``/``set_subtensor`` with basic
  indexing, an elementwise kernel writing into the region.
- :mod:`.kernel_source`: the prelude every module starts with
  (``include/tenure_cuda.h`` and the scalar helpers), NVRTC's options, the
  index arithmetic, the host launchers.
- :mod:`.layout`: from operands' shapes and strides to a launch.
- :mod:`.launch`: the host side of a launch on any :class:`~.launch.Backend`.
- :mod:`.cupy_backend`: the device (CuPy arrays, NVRTC through CuPy's
  on-disk kernel cache).
- :mod:`.emulation`: the same sources compiled as host C++ under
  ``include/host_emulation.h`` and run over NumPy arrays (block threads that
  synchronise as coroutines), so CI executes every generated kernel.
- :mod:`.nvrtc`: compile a source to PTX without a device (NVRTC through
  CuPy's bindings, else ``nvcc -ptx``): CI compiles every generated kernel.
- :mod:`.linker`: the executor -- the Python linker's schedule and plans,
  nodes with kernels run them -- as ``Mode(linker="cuda_emulated")``.
- :mod:`.device`: whether CuPy and a device are here, and which is missing.

Not built yet: the device path of the executor (``Mode(linker="cuda")``:
device shared variables, transfers, CuPy implementations of the ops without
kernels, cuBLAS products), advanced-index updates, memory plans measured
on the device, CUDA graphs,
the GPU benchmarks and the docs page.

CuPy is never imported by importing this package.
"""
