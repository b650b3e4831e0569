"""Index checks for the device path: CuPy checks less than NumPy does.

CuPy's integer index arrays (``x[i]``, ``x[:, i]``, ``take``, scatter-adds)
are never checked: an index out of range wraps around its axis and the call
returns a wrong result.  Where CuPy does check (a zero slice step, a scalar
index out of range, index arrays that do not broadcast), it raises in its
own words and sometimes another exception type.  The device path must raise
what the NumPy executor (the reference) raises, word for word, so every
indexing node on the device checks its index first:

- on the host, from shapes and host scalars only (slice steps, scalar
  indices, the index arrays' shapes): no device work at all;
- the index arrays' values on the device: one small reduction per array,
  all read back together (one synchronisation per node);
- and once a fault is found, the node's reference ``perform`` runs on host
  stand-ins -- the index arrays copied to the host, every other array a
  zero-strided host array of its shape (nothing copied) -- and raises the
  reference's own error.
"""

from __future__ import annotations

import numpy as np

from tenure.symbolic.ops.indexing import In, advanced_region_shape

__all__ = ["check_advanced_index", "check_basic_index", "raise_reference_error", "stand_in"]


def stand_in(shape, dtype) -> np.ndarray:
    """A writeable host array of ``shape`` and ``dtype`` over one element
    (zero strides): what a reference check reads of a device array, its
    shape, without copying it."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), tuple(shape),
                                           (0,) * len(shape), writeable=True)


def check_basic_index(index_op, shape, dtype, scalars) -> None:
    """Raise what NumPy raises for ``x[index]`` (a zero step, an integer
    out of range) when ``x`` has ``shape``: the index applied to a stand-in
    (a view: nothing allocated)."""
    stand_in(shape, dtype)[index_op.index(scalars)]


def check_advanced_index(node, inputs, runtime, first: int) -> None:
    """Raise the reference's error when the advanced index of ``node`` (its
    op's ``pattern``; the index inputs are ``inputs[first:]``) does not fit
    ``x = inputs[0]``: index arrays that do not broadcast, a zero step, an
    integer or an index-array element out of range."""
    pattern, x, values = node.op.pattern, inputs[0], inputs[first:]
    try:
        advanced_region_shape(pattern, tuple(x.shape), values)   # host only: shapes
        fault = _out_of_range(pattern, tuple(x.shape), values, runtime)
    except (IndexError, ValueError):
        fault = True
    if fault:
        raise_reference_error(node, inputs, runtime, first)


def _out_of_range(pattern, shape: tuple, values, runtime) -> bool:
    """Whether an integer or an index array's element is out of its axis's
    range: scalars on the host, arrays on the device, read back once."""
    flags = []
    axis = 0
    for entry in pattern:
        kind = entry[0]
        if kind in ("newaxis", "ellipsis"):
            continue
        n = shape[axis]
        if kind == "int":
            index = int(values[entry[1].pos - 1]) if isinstance(entry[1], In) else entry[1]
            if not -n <= index < n:
                return True
        elif kind == "array":
            array = values[entry[1].pos - 1]
            if array.size:
                flags.append(((array < -n) | (array >= n)).any())
        axis += 1
    if not flags:
        return False
    on_device = [f for f in flags if runtime.is_device_array(f)]
    host = any(bool(f) for f in flags if not runtime.is_device_array(f))
    # One read of the device: every array's flag stacked, then reduced.
    return host or (bool(np.stack(on_device).any()) if on_device else False)


def raise_reference_error(node, inputs, runtime, first: int) -> None:
    """Run ``node``'s reference ``perform`` where it raises: on host copies
    of its index inputs (positions ``first`` on) and stand-ins for its other
    arrays; it raises the NumPy executor's own error.  (Should it not raise,
    the device check was wrong: an ``IndexError`` saying so.)"""
    host = []
    for position, value in enumerate(inputs):
        if runtime.is_device_array(value):
            value = (runtime.to_host(value) if position >= first
                     else stand_in(value.shape, value.dtype))
        host.append(value)
    node.op.perform(node, host, [[None] for _ in node.outputs])
    raise IndexError(f"{node.op}: the device found an index out of range that the reference "
                     f"accepts (please report this)")
