"""The CUDA linker's parts (see DESIGN.md, "Linkers").

Landed so far: the kernels and how they are checked without a GPU.

- :mod:`.elemwise`: CUDA C for elementwise and ``Composite`` nodes from the
  scalar table the C linker uses (one definition of each op's math).
- :mod:`.layout`: from operands' shapes and strides to a launch.
- :mod:`.nvrtc`: compile a kernel source to PTX without a device (NVRTC
  through CuPy's bindings, else ``nvcc -ptx``).
- :mod:`.emulation`: the same source compiled as host C++ under
  ``include/host_emulation.h`` and run over NumPy arrays, so CI executes
  every generated elementwise kernel.
- :mod:`.device`: whether CuPy and a device are here, and which is missing.

CuPy is never imported by importing this package.
"""
