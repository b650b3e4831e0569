"""The CUDA linker (see DESIGN.md, "Linkers").

The kernels, the two executors (``Mode(linker="cuda_host")`` over host
arrays, ``Mode(linker="cuda")`` over device arrays), CUDA graphs, and how
all of it is checked without a GPU (docs: "GPU kernels", "Running on a GPU").

Two words, one meaning each: the *emulated device* is the ``"cuda"`` device
over host memory (:mod:`.emulated_device`, ``config.cuda_emulation``: the
device path without a GPU), and *on the host* means the generated kernels
compiled as host C++ and run on the CPU (:mod:`.host_kernels`, and
``Mode(linker="cuda_host")``, which runs them over NumPy arrays).

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
- :mod:`.cupy_backend`: the device (CuPy arrays; kernels compiled by
  :mod:`.device_code` -- NVRTC without CuPy's ``-ftz=true`` -- kept in
  tenure's compile cache, loaded by CuPy).
- :mod:`.dispatch`: the CUDA linker's table, op class -> how it runs (a
  generated kernel family, a device-path implementation, on the host).
- :mod:`.host_kernels`: the same sources compiled as host C++ under
  ``include/host_kernels.h`` and run over NumPy arrays (block threads that
  synchronise as coroutines), so CI executes every generated kernel.
- :mod:`.nvrtc`: compile a source to PTX or machine code without a device
  (NVRTC through CuPy's bindings, else ``nvcc``): CI compiles every
  generated kernel.
- :mod:`.linker`: the executor -- the Python linker's schedule and plans,
  nodes with kernels run them -- as ``Mode(linker="cuda_host")``.
- :mod:`.device_linker`: the device path (``Mode(linker="cuda")``): device
  shared variables, transfers, calls ordered across streams.
- :mod:`.device_ops`: the ops without kernels, with the functions CuPy
  arrays take over (products through cuBLAS); :mod:`.index_checks`: index
  and slice-step checks on the device path, with the Python linker's errors.
- :mod:`.graphs`: whole-function CUDA graphs, captured once per input-shape
  signature and replayed.
- :mod:`.runtime`: the device runtimes (CuPy's, the emulated device's):
  allocation, transfers, cuBLAS products, streams and the order of calls
  across them, CUDA-graph capture, allocation counts; and whether CuPy and
  a device are there (``unavailable_reason``).
- :mod:`.emulated_device`: the emulated GPU those runtimes and CI run on
  (arrays over host memory that refuse implicit conversion as CuPy's do,
  streams, asynchrony, graphs).

Importing this package registers both runtimes with
:mod:`tenure.symbolic.device` (:func:`.runtime.register_runtimes`), where
the graph layer finds them without importing this layer.

The device path is built and runs on a GPU (``Mode(linker="cuda")``, whose
memory reports measure the device pool through the runtime's ``track``).
Not built yet: CUDA kernels that take their constants as parameters (the C
linker's loops do).

CuPy is never imported by importing this package.
"""

from tenure.linkers.cuda.runtime import register_runtimes

register_runtimes()
