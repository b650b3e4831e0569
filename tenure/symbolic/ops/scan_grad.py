"""The gradient of a :class:`~tenure.symbolic.ops.scan.Scan`: a second scan
that runs the steps backwards (its module doc says what it carries).

At backward step ``t`` (from the last step run down to the first), for each
float state ``y`` whose earliest tap is ``-L``, the *window* ``W`` holds the
gradient reaching ``y[t], y[t-1], ..., y[t-L+1]`` from the steps after ``t``
(``W[0]`` is complete: every step reading ``y[t]`` comes after it).  The
backward step recomputes forward step ``t`` from the stored trajectories,
takes its vector-Jacobian product with cotangent ``dL/dy[t] + W[0]`` (and
``dL/dz[t]`` for each nit-sot ``z``), and shifts the window by one, adding the
step's gradient for each tap ``y[t + tap]`` at ``W[-1 - tap]``.  After step
``0`` the window holds the gradient of the initial values (newest first).  A
non-sequence's gradient is the sum over steps; a sequence's, one entry per
step.  The final value's gradient enters as the first window's ``W[0]``.
"""

from __future__ import annotations

from tenure.symbolic.graph import clone_get_equiv
from tenure.symbolic.grad import grad, is_differentiable
from tenure.symbolic.ops.creation import zeros_like
from tenure.symbolic.ops.elemwise import eq, maximum, where
from tenure.symbolic.ops.join import concatenate
from tenure.symbolic.ops.reduce import sum as tn_sum
from tenure.symbolic.ops.scan import scan_node
from tenure.symbolic.ops.shape import expand_dims, shape_tuple
from tenure.symbolic.ops.subtensor_update import inc_subtensor
from tenure.symbolic.types import TensorType

__all__ = ["scan_grad"]


class _Backward:
    """The backward loop's inner graph, built from the forward op's."""

    def __init__(self, op, diff_states, diff_nitsots, diff_seqs, diff_nonseqs):
        parts = op.parts
        slices, taps, nonseqs = parts.inner(list(op.inner.inputs))
        self.g_states = [op.inner.outputs[k].type(name=f"grad_of_state{k}[t]")
                         for k in diff_states]
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
        terms = [tn_sum(forward[k] * (g + w[0]))
                 for k, g, w in zip(diff_states, self.g_states, self.windows)]
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

    def inputs(self) -> list:
        return (self.g_states + self.g_nitsots + self.slices
                + [v for state_taps in self.taps for v in state_taps]
                + self.windows + self.sums + self.nonseqs)

    def outputs(self) -> list:
        return self.new_windows + self.new_sums + self.seq_grads


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
    parts = op.parts
    n_states, n_nitsot = parts.n_states, op.n_nitsot
    n_steps, seqs, inits, nonseqs = parts.outer(inputs)
    g_trajs = output_grads[:n_states]
    g_nitsots = output_grads[n_states:n_states + n_nitsot]
    g_finals = output_grads[n_states + n_nitsot:]
    diff_states = [k for k in range(n_states) if is_differentiable(op.inner.outputs[k])]
    diff_nitsots = [j for j in range(n_nitsot) if g_nitsots[j] is not None
                    and is_differentiable(op.inner.outputs[n_states + j])]
    wanted = any(g_trajs[k] is not None or g_finals[k] is not None for k in diff_states)
    if not wanted and not diff_nitsots:
        return [None] * len(inputs)
    diff_seqs = [i for i, x in enumerate(seqs) if is_differentiable(x)]
    diff_nonseqs = [i for i, x in enumerate(nonseqs) if is_differentiable(x)]
    back = _Backward(op, diff_states, diff_nitsots, diff_seqs, diff_nonseqs)

    outputs = op.make_node(*inputs).outputs
    trajs = outputs[:n_states]
    n = shape_tuple(outputs[0])[0]
    truncated = op.truncate_gradient != -1
    start = maximum(n - op.truncate_gradient, 0) if truncated else 0

    def backwards(x):
        return x[start:n][::-1]

    sequences = [backwards(g if g is not None else zeros_like(trajs[k]))
                 for k, g in ((k, g_trajs[k]) for k in diff_states)]
    sequences += [backwards(g_nitsots[j]) for j in diff_nitsots]
    sequences += [backwards(x) for x in seqs]
    for k, (init, traj) in enumerate(zip(inits, trajs)):
        depth = -op.state_taps[k][0]
        history = concatenate([init, traj], axis=0)
        sequences += [backwards(history[depth + tap:depth + tap + n])
                      for tap in op.state_taps[k]]
    buffers = []
    for k in diff_states:
        window = zeros_like(inits[k])
        if g_finals[k] is not None:
            window = inc_subtensor(window[0], g_finals[k])
        buffers.append(expand_dims(window, 0))
    buffers += [expand_dims(zeros_like(nonseqs[i]), 0) for i in diff_nonseqs]
    n_carried = len(diff_states) + len(diff_nonseqs)
    labels = {"sequences": [f"the gradient's sequence {i}" for i in range(len(sequences))],
              "states": [f"the gradient of {op.label('states', k)}" for k in diff_states]
              + [f"the gradient of {op.label('non_sequences', i)}" for i in diff_nonseqs]}
    results = scan_node(back.inputs(), back.outputs(), n - start, sequences, buffers, nonseqs,
                        state_taps=[(-1,)] * n_carried, n_nitsot=len(diff_seqs),
                        labels=labels)
    seq_steps = results[n_carried:n_carried + len(diff_seqs)]
    finals = results[n_carried + len(diff_seqs):]

    d_inits = [None] * n_states
    for k, window in zip(diff_states, finals[:len(diff_states)]):
        d_init = window[::-1]
        if truncated:
            d_init = where(eq(start, 0), d_init, zeros_like(d_init))
        d_inits[k] = d_init
    d_nonseqs = [None] * len(nonseqs)
    for i, total in zip(diff_nonseqs, finals[len(diff_states):]):
        d_nonseqs[i] = total
    d_seqs = [None] * len(seqs)
    for i, steps in zip(diff_seqs, seq_steps):
        d_seqs[i] = inc_subtensor(zeros_like(seqs[i])[start:n], steps[::-1])
    return [None] + d_seqs + d_inits + d_nonseqs
