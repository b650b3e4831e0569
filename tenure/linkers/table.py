"""The one table of linkers: :data:`LINKERS`, name -> how to make it.

A :class:`~tenure.compile.mode.Mode` names its linker by a key of this table
and makes it through the row (``make(mode)``: the mode carries the linker's
options, read by attribute); the Dask linker compiles each chunk's kernel
with the linker its ``chunk_linker`` option names, one of the rows marked
``chunk_kernels``.  A linker joins by adding a row here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from tenure.linkers.c.linker import CLinker
from tenure.linkers.check import CheckLinker
from tenure.linkers.cuda.device_linker import CudaLinker
from tenure.linkers.cuda.linker import HostCudaLinker
from tenure.linkers.python import PythonLinker
from tenure.linkers.thunk import Linker

__all__ = ["LINKERS", "LinkerEntry", "chunk_linkers"]


class LinkerEntry(NamedTuple):
    """One row of :data:`LINKERS`."""
    #: ``make(options) -> linker``: ``options`` is the mode (or None for a
    #: chunk kernel's linker), whose attributes carry the linker's options
    make: Callable[[object], Linker]
    #: whether ``make_thunk`` also takes the function's ``In`` specs and its
    #: number of outputs (the rest of the graph's outputs are updates)
    takes_input_specs: bool = False
    #: rewrites every mode of this linker leaves out
    excludes: tuple[str, ...] = ()
    #: whether it may compile the kernel of a Dask chunk (a host linker
    #: that needs no options: a worker makes it with ``make(None)``)
    chunk_kernels: bool = False
    #: the linker that compiles an inner graph (a loop's step) of a graph
    #: this linker compiles; None: this one.  The step runs on the host from
    #: the loop's ``perform`` (the dask and cuda linkers hand it host values)
    inner_linker: str | None = None
    #: the linker that compiles the step of a loop whose state stays where
    #: this linker computes (an op with ``state_on_device``: the loop runs
    #: on device arrays, its step compiled for the device); None: every
    #: loop runs on the host, its step compiled by ``inner_linker``
    device_loop_linker: str | None = None
    #: whether a function compiled for it first replaces the nodes of ops
    #: with an expansion by it (:mod:`tenure.rewrites.expand`): a linker
    #: that runs only the ops it has a kernel for
    expands_ops: bool = False


def _dask_linker(mode) -> Linker:
    # Imported here, not at the top: Dask is an optional extra (and slow to
    # import), needed only by modes that name it.
    try:
        from tenure.linkers.dask.linker import DaskLinker
    except ImportError as exc:
        raise ImportError(f"Mode(linker='dask') needs Dask, which is not installed "
                          f"({exc}); pip install 'dask[array]' distributed (or pip "
                          f"install -e '.[dask]' in tenure's source tree)") from exc
    return DaskLinker(compute=mode.compute, chunk_linker=mode.chunk_linker, query=mode.query)


#: every linker a mode may name, in the order errors list them
#: (``config.LINKERS`` first: those may be the default)
LINKERS: dict[str, LinkerEntry] = {
    # Row programs (fuse_rows) are for the linkers with their kernels (c,
    # cuda, cuda_host): elsewhere their perform computes the unfused ops
    # whole, which saves nothing.
    "py": LinkerEntry(lambda mode: PythonLinker(), chunk_kernels=True, excludes=("fuse_rows",)),
    "c": LinkerEntry(lambda mode: CLinker(), chunk_kernels=True),
    "check": LinkerEntry(lambda mode: CheckLinker(), excludes=("fuse_rows",)),
    # A chunk Dask holds may be read by other tasks: nothing is overwritten.
    "dask": LinkerEntry(_dask_linker, takes_input_specs=True, excludes=("inplace", "fuse_rows"),
                        inner_linker="c", expands_ops=True),
    "cuda": LinkerEntry(lambda mode: CudaLinker(emulated=mode.cuda_emulation),
                        inner_linker="c", device_loop_linker="cuda", expands_ops=True),
    "cuda_host": LinkerEntry(lambda mode: HostCudaLinker(), inner_linker="c"),
}


def chunk_linkers() -> tuple[str, ...]:
    """The names a Dask mode's ``chunk_linker`` may take."""
    return tuple(name for name, entry in LINKERS.items() if entry.chunk_kernels)
