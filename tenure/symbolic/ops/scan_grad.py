"""The gradient of a :class:`~tenure.symbolic.ops.scan.Scan`: a second scan
that runs the steps backwards (its module doc says what it carries).

At backward step ``t`` (from the last step run down to the first), for each
float state ``y`` whose earliest tap is ``-L``, the *window* ``W`` holds the
gradient reaching ``y[t], y[t-1], ..., y[t-L+1]`` from the steps after ``t``
(``W[0]`` is complete: every step reading ``y[t]`` comes after it).  The
backward step takes forward step ``t``'s vector-Jacobian product over the
stored trajectories -- the step's inputs, and ``y[t]`` itself wherever the
gradient reads the step's result (``tanh``'s rule reads its value: the
step's products are not run again) -- with cotangent ``dL/dy[t] + W[0]`` (and
``dL/dz[t]`` for each nit-sot ``z``), and shifts the window by one, adding the
step's gradient for each tap ``y[t + tap]`` at ``W[-1 - tap]``.  After step
``0`` the window holds the gradient of the initial values (newest first).  A
non-sequence's gradient is the sum over steps; a sequence's, one entry per
step.  The final value's gradient enters as the first window's ``W[0]``
(so does a trajectory's gradient that is zeros but in its last entry: the
gradient of ``hs[-1]``).

A loop built with ``checkpoint_every=k`` kept the states before every
``k``-th step instead of its trajectories: its backward pass is one
:class:`CheckpointedScanGrad` node, which runs the same backward step over
segments it recomputes from those checkpoints.

Any other loop (states, no ``until``) gets one :class:`LoopGradient` node:
the backward pass over the stored trajectories, not yet expanded, so that
compiling can still choose how it runs.  The rewrite
:mod:`tenure.rewrites.scan_checkpoint` expands it first thing: inline (the
backward scan over the trajectories, :meth:`LoopGradient.inline`) or, when
the function has an activation-memory budget that the trajectories exceed,
as a checkpointed loop (:meth:`LoopGradient.checkpointed`).  Where no rewrite
runs, the node runs its inline form as an inner graph.
"""

from __future__ import annotations

import numpy as np

from tenure.symbolic import inner_graph
from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.graph import Apply, Constant, clone_get_equiv, clone_replace, io_toposort
from tenure.symbolic.inner_graph import OpWithInnerGraphs
from tenure.symbolic.grad import grad, is_differentiable
from tenure.symbolic.ops.creation import Alloc, zeros_like
from tenure.symbolic.ops.elemwise import eq, maximum, where
from tenure.symbolic.ops.join import concatenate
from tenure.symbolic.ops.reduce import sum as tn_sum
from tenure.symbolic.ops.scan import LoopMemory, nbytes, scan_node
from tenure.symbolic.ops.scan_schedule import reverse_binomially
from tenure.symbolic.ops.shape import expand_dims, shape_tuple
from tenure.symbolic.ops.subtensor_update import IncSubtensor, inc_subtensor
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import as_tensor_variable

__all__ = ["CheckpointedScanGrad", "LoopGradient", "scan_grad"]


class _Backward:
    """The backward loop's inner graph, built from the forward op's."""

    def __init__(self, op, diff_states, diff_nitsots, diff_seqs, diff_nonseqs, graded):
        parts = op.parts
        self.diff_states = list(diff_states)
        self.diff_nitsots = list(diff_nitsots)
        self.diff_seqs = list(diff_seqs)
        self.diff_nonseqs = list(diff_nonseqs)
        #: the float states whose trajectory has a gradient (a sequence of
        #: the backward loop); the others' cotangent is their window's alone
        self.graded = list(graded)
        slices, taps, nonseqs = parts.inner(list(op.inner.inputs))
        self.g_states = [op.inner.outputs[k].type(name=f"grad_of_state{k}[t]")
                         for k in self.graded]
        self.g_nitsots = [op.inner.outputs[parts.n_states + j].type(name=f"grad_of_out{j}[t]")
                          for j in diff_nitsots]
        self.slices = [v.type(name=v.name) for v in slices]
        self.taps = [[v.type(name=v.name) for v in state_taps] for state_taps in taps]
        self.windows = [TensorType(taps[k][0].type.dtype,
                                   (-op.state_taps[k][0],) + taps[k][0].type.shape)(
                                       name=f"grad_window{k}") for k in diff_states]
        self.sums = [nonseqs[i].type(name=f"grad_sum{i}") for i in diff_nonseqs]
        self.nonseqs = [v.type(name=v.name) for v in nonseqs]
        replace = dict(zip(slices, self.slices))
        replace.update(zip(nonseqs, self.nonseqs))
        for old, new in zip(taps, self.taps):
            replace.update(zip(old, new))
        step_outputs = op.inner.outputs[:parts.n_states + parts.n_nitsot]
        equiv = clone_get_equiv(list(op.inner.inputs), step_outputs, replace=replace,
                                copy_inputs=False)
        forward = [equiv.get(v, v) for v in step_outputs]
        g_of = dict(zip(self.graded, self.g_states))
        terms = [tn_sum(forward[k] * (w[0] + g_of[k] if k in g_of else w[0]))
                 for k, w in zip(diff_states, self.windows)]
        terms += [tn_sum(forward[parts.n_states + j] * g)
                  for j, g in zip(diff_nitsots, self.g_nitsots)]
        cost = terms[0]
        for term in terms[1:]:
            cost = cost + term
        wrt = ([self.slices[i] for i in diff_seqs]
               + [v for k in diff_states for v in self.taps[k]]
               + [self.nonseqs[i] for i in diff_nonseqs])
        grads = grad(cost, wrt, disconnected_inputs="zero") if wrt else []
        seq_grads, rest = grads[:len(diff_seqs)], grads[len(diff_seqs):]
        self.new_windows = []
        for k, window in zip(diff_states, self.windows):
            state_grads, rest = rest[:len(op.state_taps[k])], rest[len(op.state_taps[k]):]
            self.new_windows.append(_shifted(window, op.state_taps[k], state_grads))
        self.new_sums = [s + g for s, g in zip(self.sums, rest)]
        self.seq_grads = seq_grads
        #: each state's value after step t, as stored (its trajectory's entry
        #: t): what the step's gradient reads of the forward step's results
        self.values = [forward[k].type(name=f"state{k}[t]") for k in range(parts.n_states)]
        outs = _reading_stored_values(self.new_windows + self.new_sums + self.seq_grads,
                                      forward[:parts.n_states], self.values)
        n_windows, n_sums = len(self.new_windows), len(self.new_sums)
        self.new_windows = outs[:n_windows]
        self.new_sums = outs[n_windows:n_windows + n_sums]
        self.seq_grads = outs[n_windows + n_sums:]

    def inputs(self) -> list:
        return (self.g_states + self.g_nitsots + self.slices
                + [v for state_taps in self.taps for v in state_taps] + self.values
                + self.windows + self.sums + self.nonseqs)

    def outputs(self) -> list:
        return self.new_windows + self.new_sums + self.seq_grads


def _reading_stored_values(outputs: list, forward: list, stored: list) -> list:
    """``outputs`` with every computation of a forward step's result in them
    replaced by the result as stored.  A gradient rule reads the value it
    differentiates (``tanh``'s: ``1 - out**2``) as a node of the same op over
    the same inputs: recomputed, it would run the forward step again (an
    RNN step's products) inside every backward step."""
    stored_for = {(var.owner.op, tuple(var.owner.inputs), var.index): value
                  for var, value in zip(forward, stored) if var.owner is not None}
    replace = {}
    for node in io_toposort([], outputs):
        for out in node.outputs:
            value = stored_for.get((node.op, tuple(node.inputs), out.index))
            if value is not None:
                replace[out] = value
    return clone_replace(outputs, replace) if replace else list(outputs)


def _shifted(window, taps, tap_grads):
    """The window for the step before: moved by one (``W[i]`` becomes ``W[i+1]``,
    the oldest entry starts at zero), plus the step's gradient of each tap."""
    depth = -taps[0]
    if depth > 1:
        new = concatenate([window[1:], zeros_like(window[:1])], axis=0)
    else:
        new = zeros_like(window)
    for tap, g in zip(taps, tap_grads):
        new = inc_subtensor(new[-1 - tap], g)
    return new


def scan_grad(op, inputs: list, output_grads: list) -> list:
    """``op``'s gradient with respect to each of its node's ``inputs``."""
    if any(op.keeps_initial):
        raise NotImplementedError("a gradient of a loop compiling rewrote to keep its initial "
                                  "entries: take the gradient of the loop as built")
    parts = op.parts
    n_states, n_nitsot = parts.n_states, op.n_nitsot
    n_steps, seqs, inits, nonseqs = parts.outer(inputs)
    g_trajs, g_nitsots, g_finals, _ = op.output_groups(output_grads)
    g_trajs, g_finals = _last_entries_as_finals(g_trajs, g_finals)
    diff_states = [k for k in range(n_states) if is_differentiable(op.inner.outputs[k])]
    diff_nitsots = [j for j in range(n_nitsot) if g_nitsots[j] is not None
                    and is_differentiable(op.inner.outputs[n_states + j])]
    wanted = any(g_trajs[k] is not None or g_finals[k] is not None for k in diff_states)
    if not wanted and not diff_nitsots:
        return [None] * len(inputs)
    diff_seqs = [i for i, x in enumerate(seqs) if is_differentiable(x)]
    diff_nonseqs = [i for i, x in enumerate(nonseqs) if is_differentiable(x)]
    graded = [k for k in diff_states if g_trajs[k] is not None]
    back = _Backward(op, diff_states, diff_nitsots, diff_seqs, diff_nonseqs, graded)

    outputs = op.make_node(*inputs).outputs
    trajs, _, _, checkpoints = op.output_groups(outputs)
    # A until loop's length is its trajectories'; a checkpointed loop may keep
    # none (a ring), but is never a until loop: its length is n_steps.
    n = n_steps if op.checkpoint_every else shape_tuple(outputs[0])[0]
    truncated = op.truncate_gradient != -1
    start = maximum(n - op.truncate_gradient, 0) if truncated else 0

    windows = []
    for k in diff_states:
        window = zeros_like(inits[k])
        if g_finals[k] is not None:
            window = inc_subtensor(window[0], g_finals[k])
        windows.append(window)
    sums = [zeros_like(nonseqs[i]) for i in diff_nonseqs]
    g_states = [g_trajs[k] for k in graded]
    g_outs = [g_nitsots[j] for j in diff_nitsots]
    groups = (seqs, inits, trajs, nonseqs, g_states, g_outs, windows, sums)
    if op.checkpoint_every:      # (its sums start at zeros of its own: no input)
        node = CheckpointedScanGrad(op, back).grouped(
            n, start, seqs, checkpoints, nonseqs, g_states, g_outs, windows)
        results = node.outputs
    elif op.as_while:     # its length is known only when it has run: never checkpointed
        results = _stored_backward(op, back, n, start, *groups)
    else:
        results = LoopGradient.node(op, back, n, start, *groups).outputs
    carried, d_seq_values = results[:len(windows) + len(sums)], results[len(windows) + len(sums):]
    d_inits = [None] * n_states
    for k, window in zip(diff_states, carried[:len(diff_states)]):
        d_init = window[::-1]
        if truncated:
            d_init = where(eq(start, 0), d_init, zeros_like(d_init))
        d_inits[k] = d_init
    d_nonseqs = [None] * len(nonseqs)
    for i, total in zip(diff_nonseqs, carried[len(diff_states):]):
        d_nonseqs[i] = total
    d_seqs = [None] * len(seqs)
    for i, d_seq in zip(diff_seqs, d_seq_values):
        d_seqs[i] = d_seq
    return [None] + d_seqs + d_inits + d_nonseqs


def _last_entries_as_finals(g_trajs: list, g_finals: list) -> tuple:
    """A trajectory's gradient that is zeros but in its last entry (the
    gradient of ``hs[-1]``: ``inc_subtensor(zeros[-1], g)``) is a gradient of
    the final value: so taken, the backward pass needs no array of ``n``
    zeros, and the forward loop may keep no trajectory."""
    g_trajs, g_finals = list(g_trajs), list(g_finals)
    for k, g in enumerate(g_trajs):
        last = _last_entry_gradient(g)
        if last is not None:
            g_trajs[k] = None
            g_finals[k] = last if g_finals[k] is None else g_finals[k] + last
    return g_trajs, g_finals


def _is_zeros(v) -> bool:
    """Whether ``v`` is an ``Alloc`` of the constant 0 (``zeros_like``)."""
    node = getattr(v, "owner", None)
    if node is None or not isinstance(node.op, Alloc):
        return False
    fill = node.inputs[0]
    return isinstance(fill, Constant) and not np.any(fill.data != 0)


def _last_entry_gradient(g):
    """``v`` when ``g`` is ``inc_subtensor(zeros[-1], v)`` (or set_subtensor)."""
    node = getattr(g, "owner", None)
    if node is None or not isinstance(node.op, IncSubtensor) or node.op.pattern[0] != ("int", -1):
        return None
    if any(entry != ("slice", None, None, None) for entry in node.op.pattern[1:]):
        return None
    if not _is_zeros(node.inputs[0]):
        return None
    value = node.inputs[1]
    return value if value.ndim == g.ndim - 1 else None


def _stored_backward(op, back, n, start, seqs, inits, trajs, nonseqs, g_states, g_outs,
                     windows, sums, histories=None) -> list:
    """The backward pass over the stored trajectories: the final windows and
    sums, then each float sequence's gradient (zeros before ``start``).
    ``histories``: per state, its initial entries and trajectory in one array
    (a loop that keeps its initial entries gives it), else they are joined."""
    if histories is None:
        histories = [concatenate([init, traj], axis=0) for init, traj in zip(inits, trajs)]
    carried, seq_steps = _backward_loop(op, back, n, start, seqs, histories, g_states,
                                        g_outs, windows, sums, nonseqs)
    d_seqs = [inc_subtensor(zeros_like(seqs[i])[start:n], steps[::-1])
              for i, steps in zip(back.diff_seqs, seq_steps)]
    return list(carried) + d_seqs


def _backward_loop(op, back, n, start, seqs, histories, g_states, g_outs, windows, sums,
                   nonseqs) -> tuple:
    """The backward scan over the stored trajectories (each state's
    ``histories``: its ``L`` initial entries, then its trajectory):
    ``(final windows and sums, per-step sequence gradients in backward
    order)``."""
    def backwards(x):
        return x[start:n][::-1]

    sequences = [backwards(g) for g in g_states]
    sequences += [backwards(g) for g in g_outs]
    sequences += [backwards(x) for x in seqs]
    for k, history in enumerate(histories):
        depth = -op.state_taps[k][0]
        sequences += [backwards(history[depth + tap:depth + tap + n])
                      for tap in op.state_taps[k]]
    for k, history in enumerate(histories):     # the values after each step
        depth = -op.state_taps[k][0]
        sequences.append(backwards(history[depth:depth + n]))
    buffers = [expand_dims(v, 0) for v in windows + sums]
    labels = {"sequences": [f"the gradient's sequence {i}" for i in range(len(sequences))],
              "states": [f"the gradient of {op.label('states', k)}" for k in back.diff_states]
              + [f"the gradient of {op.label('non_sequences', i)}" for i in back.diff_nonseqs]}
    results = scan_node(back.inputs(), back.outputs(), n - start, sequences, buffers, nonseqs,
                        state_taps=[(-1,)] * len(buffers), n_nitsot=len(back.seq_grads),
                        labels=labels)
    loop = results[0].owner.op
    _, seq_steps, finals, _ = loop.output_groups(results)
    return finals, seq_steps


class CheckpointedScanGrad(OpWithInnerGraphs):
    """The backward pass of a loop that kept checkpoints (``checkpoint_every=k``
    steps) instead of its trajectories.

    Segment by segment, last first, it recomputes the segment's ``k`` states
    from the checkpoint before it (the forward step, run ``k - 1`` times), then
    runs the backward step over the segment, last step first: the memory of
    the forward values is ``n / k`` checkpoints and one segment's ``k``
    states, at the cost of one more forward pass.  With ``snapshots=s``,
    each segment is reversed by the binomial schedule instead
    (:mod:`~tenure.symbolic.ops.scan_schedule`), keeping ``s`` states at
    once besides a scratch one and a step's output: less memory than a
    segment, for more forward steps (how many: ``scan_schedule.advances``).
    Node inputs: ``n``, the first step the gradient reaches
    (``truncate_gradient``), the forward sequences, the checkpoints, the
    forward non-sequences, the gradients of the trajectories (for the float
    states that have one) and of the nit-sot outputs (forward time order),
    the initial windows.  Outputs: the final windows and sums (the sums of
    the non-sequences' gradients, which start at zeros the op allocates: no
    input of zeros to copy), then each float sequence's gradient (zeros
    before the first step reached).  A gradient of this gradient is not
    implemented (a loop without ``checkpoint_every`` has one).
    """

    __props__ = ("every", "state_taps", "diff_states", "n_graded", "n_seqs", "n_nonseqs",
                 "n_g_outs", "diff_nonseqs", "diff_seqs", "snapshots")
    _cache_attrs = ("_forward_step", "_backward_step")
    #: on the CUDA linker it runs on device arrays, its steps compiled for the device
    state_on_device = True

    def __init__(self, forward_op, back: _Backward, snapshots: int | None = None):
        parts = forward_op.parts
        inner = forward_op.inner
        states_only = FunctionGraph(list(inner.inputs), inner.outputs[:parts.n_states]).clone()
        backward = FunctionGraph(back.inputs(), back.outputs())
        super().__init__([states_only, backward.clone()])
        self.every = forward_op.checkpoint_every
        self.state_taps = forward_op.state_taps
        self.diff_states = tuple(back.diff_states)
        self.n_graded = len(back.graded)
        self.n_seqs = parts.n_seqs
        self.n_nonseqs = parts.n_nonseqs
        self.n_g_outs = len(back.g_nitsots)
        self.diff_nonseqs = tuple(back.diff_nonseqs)
        self.diff_seqs = tuple(back.diff_seqs)
        if snapshots is not None and (int(snapshots) != snapshots or snapshots < 0):
            raise ValueError(f"CheckpointedScanGrad: snapshots must be None (a segment's states "
                             f"recomputed whole) or a number >= 0, got {snapshots!r}")
        self.snapshots = None if snapshots is None else int(snapshots)
        self.inner_mode = forward_op.inner_mode

    def __str__(self) -> str:
        if self.snapshots is None:
            return f"scan_grad{{checkpoint_every={self.every}}}"
        return f"scan_grad{{checkpoint_every={self.every}, snapshots={self.snapshots}}}"

    def make_node(self, *inputs):
        """Inputs flat, in the order of the class doc (see :meth:`grouped`)."""
        inputs = [as_tensor_variable(v) for v in inputs]
        _, _, groups = self._split(inputs)
        seqs, _, nonseqs, _, _, windows = groups
        outputs = [v.type() for v in windows] + [nonseqs[i].type() for i in self.diff_nonseqs]
        outputs += [seqs[i].type() for i in self.diff_seqs]
        return Apply(self, inputs, outputs)

    def grouped(self, n, start, seqs, checkpoints, nonseqs, g_states, g_outs, windows) -> Apply:
        """The node over its inputs given by group."""
        groups = [seqs, checkpoints, nonseqs, g_states, g_outs, windows]
        return self.make_node(n, start, *[v for group in groups for v in group])

    def _split(self, values: list) -> tuple:
        n_states = len(self.state_taps)
        sizes = [self.n_seqs, n_states, self.n_nonseqs, self.n_graded, self.n_g_outs,
                 len(self.diff_states)]
        groups, pos = [], 2
        for size in sizes:
            groups.append(values[pos:pos + size])
            pos += size
        return values[0], values[1], groups

    def _steps(self):
        if self._forward_step is None:
            forward, backward = self.inner_graphs
            self._forward_step = inner_graph.compile_inner_graph(forward, self.inner_mode)
            self._backward_step = inner_graph.compile_inner_graph(backward, self.inner_mode)
        return self._forward_step, self._backward_step

    def perform(self, node, inputs, output_storage):
        with self.running():
            self._perform(node, inputs, output_storage)

    def _perform(self, node, inputs, output_storage):
        n_value, start_value, groups = self._split(list(inputs))
        seqs, checkpoints, nonseqs, g_states, g_outs, windows0 = groups
        n, start = int(n_value), int(start_value)
        forward, backward = self._steps()
        mem = LoopMemory.of(seqs + checkpoints + nonseqs + g_states + g_outs)
        windows = [mem.copy(w) for w in windows0]
        sums = [mem.zeros(tuple(nonseqs[i].shape), node.outputs[len(windows) + j].type.numpy_dtype)
                for j, i in enumerate(self.diff_nonseqs)]
        seq_grads = [mem.zeros(tuple(seqs[i].shape), node.outputs[
            len(windows) + len(sums) + j].type.numpy_dtype) for j, i in enumerate(self.diff_seqs)]
        depths = [-taps[0] for taps in self.state_taps]
        shapes = [tuple(c.shape)[2:] for c in checkpoints]
        reversal = None
        for segment in reversed(range(-(-n // self.every))):
            t0, t1 = segment * self.every, min(n, (segment + 1) * self.every)
            if t1 <= start:
                break
            if self.snapshots is not None:
                if reversal is None:
                    reversal = _Reversal(self, mem, forward, backward, seqs, nonseqs,
                                         g_states + g_outs, windows + sums, seq_grads)
                reversal.segment(t0, t1, [c[segment] for c in checkpoints], start)
                continue
            history = self._recompute(mem, segment, t0, t1, forward, seqs, checkpoints,
                                      nonseqs, depths, shapes)
            t_low = max(t0, start)
            if self._backward_in_compiled_steps(backward, t_low, t1 - 1, t0, g_states + g_outs,
                                                seqs, history, depths, windows + sums,
                                                nonseqs, seq_grads):
                continue
            for t in range(t1 - 1, t_low - 1, -1):
                args = [g[t, ...] for g in g_states] + [g[t, ...] for g in g_outs]
                args += self._forward_args(t, t0, seqs, history, depths, [])
                args += [buf[depth + t - t0, ...] for buf, depth in zip(history, depths)]
                args += windows + sums + list(nonseqs)
                results = backward(*args)
                for buf, value in zip(windows + sums, results):
                    buf[...] = value
                for grads, value in zip(seq_grads, results[len(windows) + len(sums):]):
                    grads[t] = value
        for cell, value in zip(output_storage, windows + sums + seq_grads):
            cell[0] = value

    def _recompute(self, mem, segment, t0, t1, forward, seqs, checkpoints, nonseqs, depths,
                   shapes) -> list:
        """Each state's values over one segment, after the ``L`` before it: the
        checkpoint, then the forward step run from it."""
        history = [mem.empty((depth + t1 - t0,) + shape, c.dtype)
                   for depth, shape, c in zip(depths, shapes, checkpoints)]
        for buf, c, depth in zip(history, checkpoints, depths):
            buf[:depth] = c[segment]
        # every step's value: the backward step of t reads it
        if self._forward_in_compiled_steps(forward, t0, t1, seqs, history, depths, nonseqs):
            return history
        for t in range(t0, t1):
            results = forward(*self._forward_args(t, t0, seqs, history, depths, nonseqs))
            for buf, depth, value in zip(history, depths, results):
                buf[depth + t - t0] = value
        return history

    # Steps in compiled code (step.run_steps; the C runtime's src/loop.c says
    # what a read and a write are): each returns whether the steps ran there.

    def _state_rows(self, history, depths, t0) -> list:
        """A state tap's read of ``history`` as rows: ``(base, start)``, with row
        ``start + t`` at step ``t``, in the forward step's input order."""
        layout = zip(history, depths, self.state_taps)
        return [(buf, depth - t0 + tap) for buf, depth, taps in layout for tap in taps]

    def _forward_in_compiled_steps(self, forward, first, stop, seqs, history, depths,
                                   nonseqs) -> bool:
        if stop <= first or getattr(forward, "run_steps", None) is None:
            return stop <= first
        rows = [(seq, 0) for seq in seqs] + self._state_rows(history, depths, first)
        reads = tuple((pos, base, start, 0) for pos, (base, start) in enumerate(rows))
        writes = tuple((k, buf, depth - first, 0) for k, (buf, depth) in
                       enumerate(zip(history, depths)))
        args = [None] * len(rows) + list(nonseqs)
        return _ran(forward.run_steps(args, reads, writes, -1, first, stop), writes, "forward")

    def _backward_in_compiled_steps(self, backward, t_low, t_high, t0, g_rows, seqs, history,
                                    depths, carried, nonseqs, seq_grads) -> bool:
        """Steps ``t_high`` down to ``t_low``: step ``u`` of the run is step
        ``t_high - u``, so every array read or written by row is read through
        its reversed view.  The carried windows and sums are arguments as
        they are, written whole after each step (a one-row view, ring of 1)."""
        if getattr(backward, "run_steps", None) is None:
            return False
        rows = [(g, 0) for g in g_rows] + [(seq, 0) for seq in seqs] + \
            self._state_rows(history, depths, t0) + \
            [(buf, depth - t0) for buf, depth in zip(history, depths)]
        reads = tuple((pos, *_reversed(base, start, t_high)) for pos, (base, start) in
                      enumerate(rows))
        writes = tuple((k, buf[np.newaxis], 0, 1) for k, buf in enumerate(carried)) + tuple(
            (len(carried) + j, *_reversed(grads, 0, t_high)) for j, grads in enumerate(seq_grads))
        args = [None] * len(rows) + list(carried) + list(nonseqs)
        return _ran(backward.run_steps(args, reads, writes, -1, 0, t_high - t_low + 1),
                    writes, "backward")

    def _forward_args(self, t, t0, seqs, history, depths, nonseqs) -> list:
        args = [seq[t, ...] for seq in seqs]
        for buf, depth, taps in zip(history, depths, self.state_taps):
            args += [buf[depth + t - t0 + tap, ...] for tap in taps]
        return args + list(nonseqs)

    def workspace_bytes(self, node, input_shapes, output_shapes) -> int:
        """The states kept at once (:meth:`_kept_rows`), the carried windows
        and sums, and the peaks of the two compiled steps."""
        _, _, groups = self._split(list(input_shapes))
        seqs, checkpoints, nonseqs, g_states, g_outs, windows = groups
        if any(shape is None for group in groups for shape in group):
            return 0
        _, _, var_groups = self._split(list(node.inputs))
        sums = [nonseqs[i] for i in self.diff_nonseqs]
        total = 0
        for shape, var in zip(checkpoints, var_groups[1]):
            total += nbytes((self._kept_rows(shape[1]),) + tuple(shape[2:]), var)
        for shape, var in zip(windows + sums,
                              var_groups[5] + [var_groups[2][i] for i in self.diff_nonseqs]):
            total += nbytes(shape, var)
        states = [tuple(shape[2:]) for shape in checkpoints]
        slices_and_taps = [tuple(shape[1:]) for shape in seqs] + \
            [state for state, taps in zip(states, self.state_taps) for _ in taps]
        loop_values = [tuple(shape) for shape in nonseqs]
        forward_inputs = slices_and_taps + loop_values
        backward_inputs = ([tuple(shape[1:]) for shape in g_states + g_outs] + slices_and_taps
                           + states + [tuple(shape) for shape in windows + sums] + loop_values)
        forward, backward = self._steps()
        peaks = [inner_graph.inner_graph_peak(getattr(forward, "fgraph", self.inner_graphs[0]),
                                              forward_inputs),
                 inner_graph.inner_graph_peak(getattr(backward, "fgraph", self.inner_graphs[1]),
                                              backward_inputs)]
        return total + max(peaks)

    def _kept_rows(self, depth: int) -> int:
        """The rows of one state's values the op keeps at once, for a state
        of ``depth`` taps: a segment's (``L + k``), or the snapshots', the
        scratch state's and the output of the step being reversed."""
        if self.snapshots is None:
            return depth + self.every
        return (self.snapshots + 1) * depth + 1

    def infer_shape(self, node, input_shapes):
        _, _, groups = self._split(list(input_shapes))
        seqs, _, nonseqs, _, _, windows = groups
        return (list(windows) + [nonseqs[i] for i in self.diff_nonseqs]
                + [seqs[i] for i in self.diff_seqs])

    def grad(self, inputs, output_grads):
        raise NotImplementedError("a gradient of a checkpointed loop's gradient: build the "
                                  "loop without checkpoint_every to take it")


class _Reversal:
    """The segments of a :class:`CheckpointedScanGrad` with ``snapshots``,
    reversed by the binomial schedule (:mod:`~tenure.symbolic.ops.scan_schedule`).

    A *state* is, per loop state, its ``L`` values before a step in a ring
    ``(buffer, phase)``: value ``j`` at row ``(j - phase) mod L``.  A
    checkpoint is one in order (phase ``t0 - L``); a state advanced in place
    keeps its phase.  The memory: the ``snapshots`` states the schedule keeps
    at once, a scratch state where the state before the step being
    reversed is reached, and that step's output (the forward step's)."""

    def __init__(self, op, mem, forward, backward, seqs, nonseqs, g_rows, carried, seq_grads):
        self.op, self.mem = op, mem
        self.forward, self.backward = forward, backward
        self.seqs, self.nonseqs, self.g_rows = seqs, list(nonseqs), g_rows
        self.carried, self.seq_grads = carried, seq_grads
        self.taps = op.state_taps
        self.scratch: list | None = None
        self.spare: list[list] = []       # buffers of released snapshots

    def segment(self, t0: int, t1: int, checkpoint: list, start: int) -> None:
        """Backward steps ``t1 - 1`` down to ``max(t0, start)`` from the
        checkpoint before ``t0`` (one array of ``L`` rows per state)."""
        state = [(c, t0 - len(c)) for c in checkpoint]
        reverse_binomially(t0, t1, self.op.snapshots, state, self.reverse_step, self.snapshot,
                           self.release, floor=start)

    def _buffers(self, state) -> list:
        return [self.mem.empty(tuple(buf.shape), buf.dtype) for buf, _ in state]

    @staticmethod
    def _copy(state, buffers) -> list:
        for buf, (held, _) in zip(buffers, state):
            buf[...] = held
        return [(buf, phase) for buf, (_, phase) in zip(buffers, state)]

    def snapshot(self, state, at: int, m: int) -> list:
        kept = self._copy(state, self.spare.pop() if self.spare else self._buffers(state))
        self.advance(kept, at, m)
        return kept

    def release(self, kept) -> None:
        self.spare.append([buf for buf, _ in kept])

    def reverse_step(self, state, at: int, t: int) -> None:
        if self.scratch is None:
            self.scratch = self._buffers(state)
        here = self._copy(state, self.scratch)
        self.advance(here, at, t)
        taps = self._tap_rows(here, t)
        outputs = self.forward(*[seq[t, ...] for seq in self.seqs], *taps, *self.nonseqs)
        args = [g[t, ...] for g in self.g_rows] + [seq[t, ...] for seq in self.seqs] + taps
        results = self.backward(*args, *outputs[:len(state)], *self.carried, *self.nonseqs)
        for buf, value in zip(self.carried, results):
            buf[...] = value
        for grads, value in zip(self.seq_grads, results[len(self.carried):]):
            grads[t] = value

    def _tap_rows(self, state, t: int) -> list:
        return [buf[(t + tap - phase) % len(buf), ...]
                for (buf, phase), taps in zip(state, self.taps) for tap in taps]

    def advance(self, state, at: int, stop: int) -> None:
        """Forward steps ``at..stop-1`` in place in ``state``'s rings."""
        if stop <= at or self._advance_in_compiled_steps(state, at, stop):
            return
        for t in range(at, stop):
            results = self.forward(*[seq[t, ...] for seq in self.seqs],
                                   *self._tap_rows(state, t), *self.nonseqs)
            for (buf, phase), value in zip(state, results):
                buf[(t - phase) % len(buf)] = value

    def _advance_in_compiled_steps(self, state, at: int, stop: int) -> bool:
        if getattr(self.forward, "run_steps", None) is None:
            return False
        rows = [(seq, 0, 0) for seq in self.seqs] + [
            (buf, tap - phase, len(buf)) for (buf, phase), taps in zip(state, self.taps)
            for tap in taps]
        reads = tuple((pos, *row) for pos, row in enumerate(rows))
        writes = tuple((k, buf, -phase, len(buf)) for k, (buf, phase) in enumerate(state))
        args = [None] * len(rows) + self.nonseqs
        return _ran(self.forward.run_steps(args, reads, writes, -1, at, stop), writes, "forward")


class LoopGradient(OpWithInnerGraphs):
    """The backward pass of a loop over its stored trajectories, as one node
    until compiling expands it (the module doc says how and why).

    Node inputs: ``n`` (the loop's length), the first step the gradient
    reaches (``truncate_gradient``), then by group the forward sequences,
    initial buffers, trajectories (every state's, from the forward node) and
    non-sequences, the gradients of the trajectories (the float states that
    have one) and of the nit-sot outputs, the initial windows and sums.
    Outputs: the final windows and sums, then each float sequence's
    gradient.  Its inner graph is the inline form over placeholders of those
    inputs: what :meth:`inline` puts in place of the node, and what
    ``perform`` runs when no rewrite did.
    """

    __props__ = ("state_taps", "n_seqs", "n_nonseqs", "diff_states", "diff_nitsots",
                 "diff_seqs", "diff_nonseqs", "graded")
    _cache_attrs = ("_run",)
    #: on the CUDA linker it runs on device arrays, its inner graph compiled for the device
    state_on_device = True

    def __init__(self, forward_op, back: _Backward, input_types):
        parts = forward_op.parts
        self.state_taps = forward_op.state_taps
        self.n_seqs = parts.n_seqs
        self.n_nonseqs = parts.n_nonseqs
        self.diff_states = tuple(back.diff_states)
        self.diff_nitsots = tuple(back.diff_nitsots)
        self.diff_seqs = tuple(back.diff_seqs)
        self.diff_nonseqs = tuple(back.diff_nonseqs)
        self.graded = tuple(back.graded)
        self.inner_mode = forward_op.inner_mode
        placeholders = [t(name=f"scan_grad_input{i}") for i, t in enumerate(input_types)]
        n, start, groups = self.split(placeholders)
        outputs = _stored_backward(forward_op, back, n, start, *groups)
        super().__init__([FunctionGraph(placeholders, outputs)])

    @classmethod
    def node(cls, forward_op, back: _Backward, n, start, seqs, inits, trajs, nonseqs,
             g_states, g_outs, windows, sums) -> Apply:
        """The node over its inputs given by group (the class doc's)."""
        groups = [seqs, inits, trajs, nonseqs, g_states, g_outs, windows, sums]
        inputs = [as_tensor_variable(v) for v in
                  [n, start] + [v for group in groups for v in group]]
        return cls(forward_op, back, [v.type for v in inputs]).make_node(*inputs)

    def __str__(self) -> str:
        return "scan_grad"

    def _sizes(self) -> list:
        n_states = len(self.state_taps)
        return [self.n_seqs, n_states, n_states, self.n_nonseqs, len(self.graded),
                len(self.diff_nitsots), len(self.diff_states), len(self.diff_nonseqs)]

    def split(self, values: list) -> tuple:
        """``(n, start, groups)``: a node's inputs (or anything laid out as
        they are) with the groups of the class doc, in its order."""
        groups, pos = [], 2
        for size in self._sizes():
            groups.append(list(values[pos:pos + size]))
            pos += size
        return values[0], values[1], groups

    def make_node(self, *inputs):
        """Inputs flat, in the order of the class doc (see :meth:`node`)."""
        inputs = [as_tensor_variable(v) for v in inputs]
        expected = self.inner_graphs[0].inputs
        if len(inputs) != len(expected):
            raise ValueError(f"scan_grad: {len(inputs)} inputs, expected {len(expected)}")
        for i, (var, placeholder) in enumerate(zip(inputs, expected)):
            if not placeholder.type.is_compatible_replacement(var.type):
                raise TypeError(f"scan_grad: input {i} must be of type "
                                f"{placeholder.type}, got {var} of type {var.type}")
        _, _, groups = self.split(inputs)
        seqs, windows, sums = groups[0], groups[6], groups[7]
        outputs = [v.type() for v in windows + sums]
        outputs += [seqs[i].type() for i in self.diff_seqs]
        return Apply(self, inputs, outputs)

    # -- expanding -------------------------------------------------------------
    def inline(self, inputs: list) -> list:
        """The outputs of the inline form over ``inputs`` (a node's): the
        backward scan over the stored trajectories."""
        inner = self.inner_graphs[0]
        return clone_replace(list(inner.outputs), dict(zip(inner.inputs, inputs)))

    def over_histories(self, inputs: list, forward: Apply) -> list:
        """The outputs of the inline form over ``forward``'s trajectories with
        their initial entries (the loop these ``inputs`` -- a node's --
        differentiate, built with ``keeps_initial`` for every state): the
        backward scan reads the states before each step as views of them,
        with no joined copy."""
        op = forward.op
        if not all(op.keeps_initial):
            raise ValueError("LoopGradient.over_histories: the forward loop does not keep "
                             "every state's initial entries")
        n, start, groups = self.split(list(inputs))
        back = _Backward(op, self.diff_states, self.diff_nitsots, self.diff_seqs,
                         self.diff_nonseqs, self.graded)
        return _stored_backward(op, back, n, start, *groups,
                                histories=op.output_groups(forward.outputs)[0])

    def checkpointed(self, inputs: list, forward: Apply, read: list | None = None,
                     snapshots: int | None = None) -> list:
        """The outputs of the backward pass over ``forward``'s checkpoints:
        ``forward`` is the loop these ``inputs`` (a node's) differentiate,
        built with ``checkpoint_every``; its trajectories are not read.
        ``read``: per output of this op, whether anything reads it (None:
        all); a sequence's gradient nobody reads is not computed (None in
        its place).  ``snapshots``: None, each segment's states recomputed
        whole; a number, each segment reversed by the binomial schedule
        keeping that many states at once (:class:`CheckpointedScanGrad`)."""
        op = forward.op
        if not op.checkpoint_every:
            raise ValueError("LoopGradient.checkpointed: the forward loop keeps no checkpoints")
        _, _, groups = self.split(list(inputs))
        seqs, _, _, nonseqs, g_states, g_outs, windows, sums = groups
        carried = len(windows) + len(sums)
        read = [True] * (carried + len(self.diff_seqs)) if read is None else list(read)
        diff_seqs = [i for i, wanted in zip(self.diff_seqs, read[carried:]) if wanted]
        back = _Backward(op, self.diff_states, self.diff_nitsots, diff_seqs,
                         self.diff_nonseqs, self.graded)
        n = forward.inputs[0]
        truncated = op.truncate_gradient != -1
        start = maximum(n - op.truncate_gradient, 0) if truncated else 0
        checkpoints = op.output_groups(forward.outputs)[3]
        node = CheckpointedScanGrad(op, back, snapshots).grouped(
            n, start, seqs, checkpoints, nonseqs, g_states, g_outs, windows)
        seq_grads = dict(zip(diff_seqs, node.outputs[carried:]))
        # The op's sums start at zeros; initial sums that are not (none the
        # gradient builds) are added after.
        totals = [total if _is_zeros(initial) else total + initial
                  for total, initial in zip(node.outputs[len(windows):carried], sums)]
        return (list(node.outputs[:len(windows)]) + totals
                + [seq_grads.get(i) for i in self.diff_seqs])

    # -- running ---------------------------------------------------------------
    def perform(self, node, inputs, output_storage):
        with self.running():
            self._perform(node, inputs, output_storage)

    def _perform(self, node, inputs, output_storage):
        if self._run is None:
            self._run = inner_graph.compile_inner_graph(self.inner_graphs[0], self.inner_mode)
        mem = LoopMemory.of(inputs)
        for cell, value in zip(output_storage, self._run(*inputs)):
            cell[0] = mem.copy(value)   # the step may reuse its buffers

    def infer_shape(self, node, input_shapes):
        _, _, groups = self.split(list(input_shapes))
        seqs, windows, sums = groups[0], groups[6], groups[7]
        return list(windows) + list(sums) + [seqs[i] for i in self.diff_seqs]

    def workspace_bytes(self, node, input_shapes, output_shapes) -> int:
        """The peak of the inline form, run as an inner graph."""
        return inner_graph.inner_graph_peak(self.inner_graphs[0], list(input_shapes))

    def grad(self, inputs, output_grads):
        """The vector-Jacobian product of the inline form (a gradient of a
        gradient: second order).  It is taken with respect to fresh roots
        standing for the inputs, then put over them: an input may be computed
        from another (a trajectory's gradient from the trajectory), and a
        gradient taken over the inputs themselves would count that path
        twice -- here and again where the outer gradient passes it."""
        roots = [var.type(name=f"scan_grad_input{i}") for i, var in enumerate(inputs)]
        outputs = self.inline(roots)
        terms = [tn_sum(out * g) for out, g in zip(outputs, output_grads) if g is not None]
        if not terms:
            return [None] * len(inputs)
        cost = terms[0]
        for term in terms[1:]:
            cost = cost + term
        wrt = [i for i, var in enumerate(inputs) if is_differentiable(var)]
        grads = grad(cost, [roots[i] for i in wrt], disconnected_inputs="zero")
        grads = clone_replace(grads, dict(zip(roots, inputs)))
        result = [None] * len(inputs)
        for i, g in zip(wrt, grads):
            result[i] = g
        return result


def _ran(got, writes: tuple, which: str) -> bool:
    """Whether ``run_steps`` ran the steps (None: they run from Python).  The
    steps of a gradient give values of the shapes the loop's forward steps
    gave: one of another shape is an error in the gradient, not the user's."""
    if got is None:
        return False
    t, _, bad_write, value = got
    if bad_write >= 0:
        pos, base = writes[bad_write][:2]
        raise ValueError(f"scan gradient: {which} step {t} gave its output {pos} the shape "
                         f"{np.shape(value)}; it must have the shape {tuple(base.shape[1:])}")
    return True


def _reversed(base, start: int, t_high: int) -> tuple:
    """Rows ``start + t`` of ``base`` for ``t = t_high, t_high - 1, ...`` as rows
    ``start' + u`` (``u = 0, 1, ...``) of the reversed view: ``(view, start', 0)``."""
    return (base[::-1], len(base) - 1 - start - t_high, 0)
