"""Fused elementwise math: the :class:`Composite` scalar op and :class:`FusedReduce`.

A :class:`Composite` is a scalar op defined by a small scalar graph: a tuple of
*steps* ``(scalar_op, refs)`` evaluated in order, each ref naming an input
(``("i", k)``), the result of an earlier step (``("t", j)``) or a literal
Python number (``("c", value)``).  The last step is the result.  It is a
:class:`~tenure.symbolic.ops.scalar.ScalarOp` like any other, so
``Elemwise(Composite(...))`` is an ordinary elementwise op: broadcasting,
buffer reuse, ``inplace_pattern`` and gradients all work as for ``exp``.

Dtypes are exactly those of the unfused chain: every step is evaluated with its
own NumPy implementation on values of the dtype the unfused step would have
had, and literal constants are the weak Python numbers the user wrote (``x *
2`` keeps ``x``'s dtype; ``float32 * 0.1`` stays float32).

Memory: an output of more than :data:`CHUNK_THRESHOLD` elements is computed
in blocks of about :data:`BLOCK_SIZE` elements.  The inputs are broadcast to
the output shape (views, no copy), each block runs the whole scalar graph with
block-sized temporaries (reused between steps as soon as a value is dead) and
writes its final value straight into the output, so no full-size intermediate
ever exists.

:class:`FusedReduce` is ``sum``/``prod``/``max``/``min`` of a Composite: it
runs the same blocks and folds each one into the reduction at once, so the
elementwise result is never materialised at all.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from tenure.symbolic import cost_facts
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.ops import elemwise as ew
from tenure.symbolic.ops import scalar as ps

#: outputs with more elements than this are computed block by block
CHUNK_THRESHOLD = 1 << 16
#: about how many elements one block holds
BLOCK_SIZE = 1 << 15


def _is_python_number(value) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, (np.generic, np.ndarray))


def _constant_key(value) -> tuple:
    # 2, 2.0 and True are equal in Python but not as NumPy operands; the type and
    # the exact repr (round-trip for floats) tell them apart.
    return ("c", type(value).__name__, repr(value))


# --------------------------------------------------------------------------
# Printing a scalar graph


#: infix spelling and precedence (Python's) of the binary scalar ops
_BINARY = {
    "add": ("+", 4), "sub": ("-", 4), "mul": ("*", 5), "true_divide": ("/", 5),
    "floor_divide": ("//", 5), "mod": ("%", 5), "power": ("**", 7),
    "bitwise_and": ("&", 3), "bitwise_xor": ("^", 2), "bitwise_or": ("|", 1),
    "less": ("<", 0), "less_equal": ("<=", 0), "greater": (">", 0),
    "greater_equal": (">=", 0), "equal": ("==", 0), "not_equal": ("!=", 0),
}
_UNARY = {"neg": "-", "invert": "~"}
_ATOM, _UNARY_PREC = 9, 6


def format_steps(nin: int, steps: tuple) -> str:
    """``exp(i0) * 2 + i1``; a step used more than once is named once (``t0 = ...;``)."""
    uses = [0] * len(steps)
    for _, refs in steps:
        for ref in refs:
            if ref[0] == "t":
                uses[ref[1]] += 1
    texts: list[tuple[str, int]] = []  # (text, precedence) of each step as used
    lets = []

    def operand(ref) -> tuple[str, int]:
        kind, value = ref
        if kind == "i":
            return f"i{value}", _ATOM
        if kind == "c":
            text = repr(value)
            return text, (_UNARY_PREC if text.startswith("-") else _ATOM)
        return texts[value]

    for j, (op, refs) in enumerate(steps):
        args = [operand(r) for r in refs]
        if op.name in _BINARY and len(args) == 2:
            sym, prec = _BINARY[op.name]
            (lt, lp), (rt, rp) = args
            # Python's rules: ** binds right to left, everything else left to right.
            left_paren = lp < prec or (lp == prec and (prec == 7 or prec == 0))
            right_paren = rp < prec or (rp == prec and prec != 7)
            if prec == 7 and lp == _UNARY_PREC:
                left_paren = True
            lt = f"({lt})" if left_paren else lt
            rt = f"({rt})" if right_paren else rt
            text, p = f"{lt} {sym} {rt}", prec
        elif op.name in _UNARY:
            t, p0 = args[0]
            text, p = f"{_UNARY[op.name]}{f'({t})' if p0 < _UNARY_PREC else t}", _UNARY_PREC
        else:
            text, p = f"{op.name}({', '.join(t for t, _ in args)})", _ATOM
        if uses[j] > 1 and j != len(steps) - 1:
            lets.append(f"t{j} = {text}")
            text, p = f"t{j}", _ATOM
        texts.append((text, p))
    return "; ".join(lets + [texts[-1][0]])


# --------------------------------------------------------------------------
# Composite


class Composite(ps.ScalarOp):
    """A scalar op made of other scalar ops: ``steps`` over ``nin`` inputs.

    ``steps`` is a sequence of ``(scalar_op, refs)``; each ref is ``("i", k)``
    (input ``k``), ``("t", j)`` (the result of step ``j < `` this one) or
    ``("c", value)`` (a Python number, kept weakly typed).  The result is the
    last step's.  Equal steps give equal (and equally hashed) composites.
    """

    def __init__(self, nin: int, steps):
        steps = tuple((op, tuple(tuple(r) for r in refs)) for op, refs in steps)
        if not steps:
            raise ValueError("Composite: needs at least one step")
        for j, (op, refs) in enumerate(steps):
            if not isinstance(op, ps.ScalarOp):
                raise TypeError(f"Composite: step {j}: expected a ScalarOp, got {op!r}")
            if len(refs) != op.nin:
                raise ValueError(f"Composite: step {j}: {op.name} takes {op.nin} input(s), "
                                 f"got {len(refs)}")
            for ref in refs:
                kind, value = ref
                ok = ((kind == "i" and isinstance(value, int) and 0 <= value < nin)
                      or (kind == "t" and isinstance(value, int) and 0 <= value < j)
                      or (kind == "c" and _is_python_number(value)))
                if not ok:
                    raise ValueError(f"Composite: step {j}: bad reference {ref!r}")
        self.steps = steps
        self._key = tuple((op, tuple(_constant_key(r[1]) if r[0] == "c" else r for r in refs))
                          for op, refs in steps)
        super().__init__(f"Composite{{{format_steps(nin, steps)}}}", nin, self._impl,
                         doc="fused elementwise expression")
        # Step j's temporary is dead after step last_use[j].
        last_use = list(range(len(steps)))
        for j, (_, refs) in enumerate(steps):
            for kind, value in refs:
                if kind == "t":
                    last_use[value] = j
        self._last_use = tuple(last_use)
        self._dtype_cache: dict = {}

    def params(self) -> tuple:
        return (self.nin, self._key)

    def may_raise(self, kinds: str) -> bool:
        # The steps' dtypes differ from the inputs': any step that can raise counts.
        return any(op.may_raise("biuf") for op, _ in self.steps)

    # -- dtypes ----------------------------------------------------------------
    def step_dtypes(self, probes) -> tuple[np.dtype, ...]:
        """The dtype of every step for inputs like ``probes`` (arrays, or Python
        numbers for weakly typed inputs): what the unfused chain would give."""
        key = tuple(("py", type(p).__name__, repr(p)) if _is_python_number(p)
                    else np.asarray(p).dtype.str for p in probes)
        found = self._dtype_cache.get(key)
        if found is None:
            values = [p if _is_python_number(p) else np.empty((0,), np.asarray(p).dtype)
                      for p in probes]
            dtypes = []
            for op, refs in self.steps:
                args = [values[v] if k == "i" else v if k == "c" else
                        np.empty((0,), dtypes[v]) for k, v in refs]
                dtypes.append(np.dtype(op.output_dtype(args)))
            found = self._dtype_cache[key] = tuple(dtypes)
        return found

    def output_dtype(self, probes: list) -> np.dtype:
        return self.step_dtypes(probes)[-1]

    # -- evaluation --------------------------------------------------------------
    def _impl(self, *arrays, out=None):
        if len(arrays) != self.nin:
            raise TypeError(f"{self.name} takes {self.nin} input(s), got {len(arrays)}")
        arrays = [a if _is_python_number(a) else np.asarray(a) for a in arrays]
        dtypes = self.step_dtypes(arrays)
        shapes = [a.shape for a in arrays if isinstance(a, np.ndarray)]
        if out is not None:
            shape = np.broadcast_shapes(out.shape, *shapes)
            if shape != out.shape:
                raise ValueError(f"{self.name}: the output buffer of shape {out.shape} cannot "
                                 f"hold a result of shape {shape}")
        else:
            shape = np.broadcast_shapes(*shapes)
        if math.prod(shape) <= CHUNK_THRESHOLD or not shape:
            return self._eval_whole(arrays, dtypes, out)
        if out is None:
            out = np.empty(shape, dtypes[-1])
        views = [np.broadcast_to(a, shape) if isinstance(a, np.ndarray) else a for a in arrays]
        buffers = _BlockBuffers(_full_block_shape(shape, BLOCK_SIZE))
        for _, outer, start, stop in _blocks(shape, BLOCK_SIZE):
            index = outer + (slice(start, stop),)
            self.eval_block([v[index] if isinstance(v, np.ndarray) else v for v in views],
                            dtypes, out[index], buffers)
        return out

    def _eval_whole(self, arrays, dtypes, out):
        """Step by step over whole arrays, exactly as the unfused chain does."""
        values = []
        last = len(self.steps) - 1
        for j, (op, refs) in enumerate(self.steps):
            args = [arrays[v] if k == "i" else v if k == "c" else values[v] for k, v in refs]
            if j == last and out is not None:
                _final_step(op, args, out, dtypes[j])
                return out
            values.append(np.asarray(op.impl(*args), dtype=dtypes[j]))
        return values[-1]

    def eval_block(self, blocks, dtypes, out, buffers: _BlockBuffers) -> None:
        """Evaluate one block (inputs already sliced, of ``out``'s shape or
        broadcastable to it) into ``out``.

        Temporaries come from ``buffers``; a step's buffer goes back as soon as
        its last reader ran, and a ufunc may write into the buffer of an operand
        that dies with it (exact overlap is safe for ufuncs).
        """
        n = out.shape[0]
        full: list = [None] * len(self.steps)    # the scratch arrays
        temps: list = [None] * len(self.steps)   # their first n rows
        last = len(self.steps) - 1
        last_use = self._last_use
        for j, (op, refs) in enumerate(self.steps):
            args = [blocks[v] if k == "i" else v if k == "c" else temps[v] for k, v in refs]
            dying = {v for k, v in refs if k == "t" and last_use[v] == j}
            ufunc = isinstance(op.impl, np.ufunc)
            if ufunc:
                for v in dying:
                    buffers.give_back(full[v])
            if j == last:
                _final_step(op, args, out, dtypes[j])
            else:
                full[j] = buffers.take(dtypes[j])
                temps[j] = full[j] if full[j].shape[0] == n else full[j][:n]
                op.impl(*args, out=temps[j])
                if last_use[j] == j:  # never read
                    buffers.give_back(full[j])
            if not ufunc:
                for v in dying:
                    buffers.give_back(full[v])
            for v in dying:
                full[v] = temps[v] = None

    # -- memory ------------------------------------------------------------------
    def block_buffer_counts(self, dtypes) -> dict:
        """How many scratch arrays of each dtype :meth:`eval_block` takes from
        its :class:`_BlockBuffers` at most (the pool keeps them for every block)."""
        free: dict = {}
        made: dict = {}
        last = len(self.steps) - 1

        def give_back(dtype):
            free[dtype] = free.get(dtype, 0) + 1

        for j, (op, refs) in enumerate(self.steps):
            dying = {v for k, v in refs if k == "t" and self._last_use[v] == j}
            ufunc = isinstance(op.impl, np.ufunc)
            if ufunc:
                for v in dying:
                    give_back(dtypes[v])
            if j != last:
                if free.get(dtypes[j]):
                    free[dtypes[j]] -= 1
                else:
                    made[dtypes[j]] = made.get(dtypes[j], 0) + 1
                if self._last_use[j] == j:
                    give_back(dtypes[j])
            if not ufunc:
                for v in dying:
                    give_back(dtypes[v])
        return made

    def temporary_bytes(self, dtypes, input_shapes, out_shape, into_inputs=(),
                        keep_last: bool = False) -> int:
        """Bytes of the temporaries evaluating this composite allocates beyond
        its output, for inputs of ``input_shapes`` (``()`` for Python numbers),
        a result of ``out_shape`` and step ``dtypes``.

        Whole arrays (small outputs): every step but the last makes a full
        temporary, all held until the end (``keep_last``: the last one too,
        when the caller reduces it).  Blocks: the scratch arrays of one block.
        ``into_inputs``: the inputs whose buffer the result is written into (a
        last step that is not a ufunc and reads one of them computes into a
        scratch result)."""
        last_op, last_refs = self.steps[-1]
        scratch_last = not isinstance(last_op.impl, np.ufunc) and any(
            k == "i" and v in into_inputs for k, v in last_refs)
        size = math.prod(out_shape)
        if size <= CHUNK_THRESHOLD or not out_shape:
            shapes: list[tuple] = []
            held = peak = 0
            for j, (op, refs) in enumerate(self.steps):
                args = [tuple(input_shapes[v] or ()) if k == "i" else () if k == "c"
                        else shapes[v] for k, v in refs]
                shape = np.broadcast_shapes(*args) if args else ()
                shapes.append(shape)
                result = math.prod(shape) * dtypes[j].itemsize
                if j == len(self.steps) - 1 and not keep_last:
                    result = result if scratch_last else 0
                # While step j runs: the earlier results, its own, and what
                # NumPy buffers for the inputs it broadcasts.
                peak = max(peak, held + result + ew.broadcast_buffer_bytes(
                    shape, args, dtypes[j].itemsize))
                held += result
            return peak
        block = _full_block_shape(tuple(out_shape), BLOCK_SIZE)
        elems = math.prod(block)
        total = sum(count * elems * np.dtype(dt).itemsize
                    for dt, count in self.block_buffer_counts(dtypes).items())
        if scratch_last:
            total += elems * dtypes[-1].itemsize
        # Inputs broadcast to the output are stretched views in each block:
        # a step reading one may make NumPy buffer it.
        ndim = len(out_shape)
        cut = ndim - len(block)
        stretched = []
        for s in input_shapes:
            s = (1,) * (ndim - len(s or ())) + tuple(s or ())
            stretched.append(tuple(1 if s[a] == 1 and out_shape[a] != 1 else block[a - cut]
                                   for a in range(cut, ndim)) if s != (1,) * ndim else ())
        buffered = max((ew.broadcast_buffer_bytes(
            block, [stretched[v] if k == "i" else block if k == "t" else () for k, v in refs],
            dtypes[j].itemsize) for j, (_, refs) in enumerate(self.steps)), default=0)
        return total + buffered

    # -- gradient ----------------------------------------------------------------
    def rebuild(self, inputs) -> list:
        """The unfused elementwise graph over symbolic ``inputs``: one variable per step."""
        temps: list = []
        for op, refs in self.steps:
            args = [inputs[v] if k == "i" else v if k == "c" else temps[v] for k, v in refs]
            temps.append(ew.Elemwise(op)(*args))
        return temps

    def grad_rule(self, inputs, out, gz):
        """Gradients for ``Elemwise(self)``: reverse mode through the rebuilt steps."""
        from tenure.symbolic.grad import is_differentiable
        temps = self.rebuild(inputs)
        grads_t: list = [None] * len(temps)
        grads_t[-1] = gz
        grads_in: list = [None] * self.nin

        def accumulate(store, index, g):
            store[index] = g if store[index] is None else ew.add(store[index], g)

        for j in range(len(temps) - 1, -1, -1):
            g = grads_t[j]
            if g is None or not is_differentiable(temps[j]):
                continue
            node = temps[j].owner
            for (kind, value), gi in zip(self.steps[j][1], node.op.grad(node.inputs, [g])):
                if gi is None or kind == "c":
                    continue
                accumulate(grads_in if kind == "i" else grads_t, value, gi)
        return grads_in


def _final_step(op, args, out, dtype) -> None:
    """The last step, written into ``out`` (which may be an input's buffer when
    the op runs in place).  A ufunc copes with an operand that is ``out``
    itself; any other implementation gets a scratch result instead, so it can
    never overwrite an operand it still has to read."""
    if not isinstance(op.impl, np.ufunc) and any(
            isinstance(a, np.ndarray) and np.may_share_memory(a, out) for a in args):
        np.copyto(out, np.asarray(op.impl(*args), dtype=dtype), casting="unsafe")
    else:
        op.impl(*args, out=out)


class _BlockBuffers:
    """Scratch arrays of one full block's shape, by dtype, handed out and back as
    values live and die (a shorter last block uses a leading slice of them)."""

    def __init__(self, shape: tuple):
        self.shape = shape
        self.free: dict[np.dtype, list] = {}

    def take(self, dtype) -> np.ndarray:
        pool = self.free.get(dtype)
        if pool:
            return pool.pop()
        return np.empty(self.shape, dtype)

    def give_back(self, array) -> None:
        if array is not None:
            self.free.setdefault(array.dtype, []).append(array)


def _block_plan(shape: tuple, block_size: int) -> tuple[int, int]:
    """``(k, chunk)``: cut along axis ``k``, the first whose trailing axes hold at
    most ``block_size`` elements, ``chunk`` indices at a time."""
    ndim = len(shape)
    k = 0
    while k < ndim - 1 and math.prod(shape[k + 1:]) > block_size:
        k += 1
    row = max(1, math.prod(shape[k + 1:]))
    return k, max(1, block_size // row)


def _blocks(shape: tuple, block_size: int):
    """Cut ``shape`` into blocks of about ``block_size`` elements, looping over
    every index of the axes before the cut axis.  Yields ``(k, outer, start,
    stop)``: the block is ``outer + (slice(start, stop),)``."""
    k, chunk = _block_plan(shape, block_size)
    for outer in np.ndindex(*shape[:k]):
        for start in range(0, shape[k], chunk):
            yield k, outer, start, min(start + chunk, shape[k])


def _full_block_shape(shape: tuple, block_size: int) -> tuple:
    k, chunk = _block_plan(shape, block_size)
    return (min(chunk, shape[k]),) + tuple(shape[k + 1:])


# --------------------------------------------------------------------------
# FusedReduce


_COMBINE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
            "mean": np.add}
_PARTIAL = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "mean": np.sum}


class FusedReduce(Op):
    """``fn_name`` (sum, prod, max, min or mean) over ``axis`` of
    ``Elemwise(composite)`` of the inputs, computed block by block without
    the elementwise intermediate (a mean sums, then divides the sum by the
    count in double precision, rounding to the output dtype, as NumPy does).

    Types are exactly those of ``Reduce(fn_name, axis, keepdims)(Elemwise(composite)(*inputs))``;
    values equal it up to the order of floating-point accumulation.
    """

    __props__ = ("composite", "fn_name", "axis", "keepdims")

    def __init__(self, composite: Composite, fn_name: str, axis: tuple[int, ...],
                 keepdims: bool = False):
        from tenure.symbolic.ops.reduce import Reduce
        if fn_name not in _COMBINE:
            raise ValueError(f"FusedReduce: unsupported reduction {fn_name!r}; expected one "
                             f"of {', '.join(_COMBINE)}")
        self.composite = composite
        self.fn_name = fn_name
        self.axis = tuple(axis)
        self.keepdims = bool(keepdims)
        self.reduce_op = Reduce(fn_name, self.axis, self.keepdims)
        self.elemwise_op = ew.Elemwise(composite)

    def __str__(self) -> str:
        keep = ", keepdims" if self.keepdims else ""
        return f"{self.fn_name}{{axis={self.axis}{keep}}}∘{self.composite.name}"

    def make_node(self, *inputs) -> Apply:
        elem = self.elemwise_op.make_node(*inputs)
        if elem.op.weak_inputs:
            raise TypeError("FusedReduce: Python-number inputs must be folded into the "
                            "composite as constants")
        reduced = self.reduce_op.make_node(elem.outputs[0])
        return Apply(self, elem.inputs, [reduced.outputs[0].type()])

    def perform(self, node, inputs, output_storage):
        from tenure.symbolic.ops.reduce import _fits, reduced_shape
        comp = self.composite
        dtypes = comp.step_dtypes(inputs)
        shape = np.broadcast_shapes(*(np.shape(a) for a in inputs))
        if math.prod(shape) <= CHUNK_THRESHOLD or not shape:
            # Small: the unfused computation, bit for bit.
            values = comp._eval_whole(list(inputs), dtypes, None)
            self.reduce_op.perform(node, [values], output_storage)
            return
        out_dtype = node.outputs[0].type.numpy_dtype
        axes = self.axis
        keep_shape = reduced_shape(shape, axes, True)
        out_shape = reduced_shape(shape, axes, self.keepdims)
        cell = output_storage[0]
        buffer = cell[0]
        if _fits(buffer, out_shape, out_dtype) and buffer.flags.c_contiguous:
            acc = buffer.reshape(keep_shape)
        else:
            buffer = None
            acc = np.empty(keep_shape, out_dtype)
        combine = _COMBINE[self.fn_name]
        partial_fn = _PARTIAL[self.fn_name]
        kwargs = {"dtype": out_dtype} if self.fn_name in ("sum", "prod", "mean") else {}
        views = [np.broadcast_to(a, shape) for a in inputs]
        full_shape = _full_block_shape(shape, BLOCK_SIZE)
        buffers = _BlockBuffers(full_shape)
        block_out = np.empty(full_shape, dtypes[-1])
        for k, outer, start, stop in _blocks(shape, BLOCK_SIZE):
            index = outer + (slice(start, stop),)
            values = block_out[:stop - start]
            comp.eval_block([v[index] for v in views], dtypes, values, buffers)
            inner_axes = tuple(a - k for a in axes if a >= k)
            if inner_axes:
                partial = partial_fn(values, axis=inner_axes, keepdims=True, **kwargs)
            else:
                partial = values
            target = acc[tuple(0 if a in axes else i for a, i in enumerate(outer))
                         + ((slice(0, 1),) if k in axes else (slice(start, stop),))]
            first = (all(i == 0 for a, i in enumerate(outer) if a in axes)
                     and (k not in axes or start == 0))
            if first:
                np.copyto(target, partial, casting="unsafe")
            else:
                combine(target, partial, out=target, casting="unsafe")
        if self.fn_name == "mean":
            # NumPy's mean: the sum divided by the count (an intp) in float64
            count = np.intp(math.prod(shape[a] for a in axes))
            np.true_divide(acc, count, out=acc, casting="unsafe")
        cell[0] = buffer if buffer is not None else acc.reshape(out_shape)

    def workspace_bytes(self, node, input_shapes, output_shapes):
        """The elementwise temporaries: whole (small inputs, then the unfused
        reduction's own), or one block's scratch arrays, its values and the
        partial reductions (the previous one is alive while the next is made)."""
        from tenure.symbolic.ops.reduce import cast_buffer_bytes
        if None in input_shapes:
            return 0
        comp = self.composite
        dtypes = comp.step_dtypes([np.empty((0,), v.type.numpy_dtype) for v in node.inputs])
        shape = np.broadcast_shapes(*(tuple(s) for s in input_shapes))
        if math.prod(shape) <= CHUNK_THRESHOLD or not shape:
            values = comp.temporary_bytes(dtypes, input_shapes, shape, keep_last=True)
            return values + cast_buffer_bytes(self.fn_name, dtypes[-1],
                                              node.outputs[0].type.numpy_dtype,
                                              math.prod(shape))
        block = _full_block_shape(shape, BLOCK_SIZE)
        total = comp.temporary_bytes(dtypes, input_shapes, shape)
        total += math.prod(block) * dtypes[-1].itemsize
        k, _ = _block_plan(shape, BLOCK_SIZE)
        if any(a >= k for a in self.axis):
            partial = [1 if a + k in self.axis else d for a, d in enumerate(block)]
            dtype = node.outputs[0].type.numpy_dtype if self.fn_name in ("sum", "prod") \
                else dtypes[-1]
            total += 2 * math.prod(partial) * dtype.itemsize
        return total

    def flops(self, node, shapes) -> float:
        """The composite over the broadcast inputs, then one fold per element."""
        in_size = cost_facts.inputs_size(node, shapes)
        out_size = cost_facts.outputs_size(node, shapes)
        return float(max(in_size, out_size) * (cost_facts.scalar_steps(self.composite) + 1))

    def infer_shape(self, node, input_shapes):
        from tenure.symbolic.ops.reduce import reduced_shape
        statics = [v.type.shape for v in node.inputs]
        static = ew.broadcast_static_shapes(statics)
        elem_shape = ew.broadcast_symbolic_shapes(static, input_shapes, statics)
        symbolic = reduced_shape(tuple(elem_shape), self.axis, self.keepdims)
        out_static = node.outputs[0].type.shape
        return [tuple(s if s is not None else d for s, d in zip(out_static, symbolic))]

    def grad(self, inputs, output_grads):
        values = self.elemwise_op(*inputs)
        (g_values,) = self.reduce_op.grad([values], output_grads)
        if g_values is None:
            return [None] * len(inputs)
        return self.elemwise_op.grad(inputs, [g_values])
