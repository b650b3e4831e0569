"""``Scan``: a loop as one op, holding its step as an inner graph.

:func:`tenure.loops.scan` (``tn.scan``, PyTensor's interface) builds it; this
module holds the op and how it runs; :mod:`.scan_grad` its gradient.

The op's **inner graph** is one step of the loop.  Its inputs, in order:

- one *slice* per sequence (``seq[t]``; a sequence read at several taps is
  several sequences, sliced outside the loop);
- one value per *tap* of every *state* (``y[t + tap]``, ``tap < 0``),
  state by state, taps in increasing order;
- the *non-sequences* (everything else the step reads: weights, shared
  variables read but not updated, values computed outside the loop).

Its outputs: every state's new value (``y[t]``), then every *nit-sot* (an
output that no step reads back), then, for a ``until`` loop, the condition.

The **node's** inputs: ``n_steps`` (an int64 scalar), the sequences, each
state's *initial buffer* (``L`` entries for a state whose earliest tap is
``-L``, oldest first: tap ``-L`` at step 0 reads entry 0), the
non-sequences.  Its outputs: every state's trajectory ``y[0..n-1]`` and every
nit-sot's, stacked along a new first axis (a state with ``keeps_initial``:
its ``L`` initial entries first, then ``y[0..n-1]``; only compiling sets
it, for a gradient to read the states before each step without a copy),
then every state's *final value*
(``y[n-1]``, or the last initial entry when no step ran), then, with
``checkpoint_every=k``, every state's *checkpoints* (the ``L`` values before
steps ``0, k, 2k, ...``).  A shared variable updated in the loop is a state
with one tap; its new value is its final value.

**Running**: ``perform`` calls the inner graph compiled once (by the function
layer's compiler, see :func:`tenure.symbolic.inner_graph.register_inner_compiler`;
with the mode the compiling linker chose, :attr:`Scan.inner_mode`) for each
step, and writes each step's results into the stacked outputs, which are last
call's buffers when they fit.  Where the compiled step offers ``run_steps``
(the C linker's), the steps from the first one whose every read is a row of
one array run there, with no Python between them.  On a device (the CUDA
linker, ``state_on_device``) the buffers are device arrays of the inputs'
device, and the step is compiled for it.  A step whose state comes back with a shape
other than its initial value's, sequences of the wrong length and a negative
``n_steps`` raise before any result is given, naming the loop argument; a
``until`` loop stops after the first step whose condition is true, so its
outputs have that many entries.

**Gradient**: reverse mode by a second scan that runs the steps backwards.
It carries, per state, a *window* of the gradient reaching the last ``L``
values of that state from the steps already taken back, and per
non-sequence the sum of its gradients; each backward step takes the
forward step's vector-Jacobian product with :func:`tenure.grad`, reading
the step's inputs and the results its gradient needs (``tanh``'s value)
from the stored trajectories, and recomputing the rest (a random draw
inside the loop draws the same numbers again: its generator state is a
state of the loop).
``truncate_gradient=k`` runs only the last ``k`` steps back.  With
checkpoints, the backward pass recomputes each segment's states from its
checkpoint instead of reading stored trajectories.
"""

from __future__ import annotations

import numpy as np

from tenure.symbolic import inner_graph
from tenure.symbolic.device import runtime_of
from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.graph import Apply, Variable, ancestors, clone_get_equiv, clone_replace
from tenure.symbolic.ops.shape import Shape, as_dim, infer_dims, stack_scalars
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import as_tensor_variable

__all__ = ["LoopMemory", "Scan", "ScanParts", "concrete_dims", "nbytes", "scan_node",
           "step_output_shape"]


class ScanParts:
    """Where each kind of input and output sits, for one scan op's layout."""

    def __init__(self, n_seqs: int, state_taps: tuple, n_nitsot: int, n_nonseqs: int):
        self.n_seqs = n_seqs
        self.state_taps = state_taps
        self.n_states = len(state_taps)
        self.n_taps = sum(len(taps) for taps in state_taps)
        self.n_nitsot = n_nitsot
        self.n_nonseqs = n_nonseqs

    def outer(self, inputs: list) -> tuple:
        """The node's inputs as ``(n_steps, sequences, initial buffers, non-sequences)``."""
        seqs_end = 1 + self.n_seqs
        states_end = seqs_end + self.n_states
        return inputs[0], inputs[1:seqs_end], inputs[seqs_end:states_end], inputs[states_end:]

    def inner(self, inputs: list) -> tuple:
        """The inner graph's inputs as ``(slices, taps per state, non-sequences)``."""
        slices, rest = inputs[:self.n_seqs], inputs[self.n_seqs:]
        per_state = []
        for taps in self.state_taps:
            per_state.append(rest[:len(taps)])
            rest = rest[len(taps):]
        return slices, per_state, rest


class Scan(inner_graph.OpWithInnerGraphs):
    """A loop: ``n_steps`` runs of its inner graph (the module doc says the layout).

    ``state_taps``: per state, its taps (negative ints, increasing);
    ``n_nitsot``: outputs no step reads back; ``as_while``: the inner graph's
    last output is a ``until`` condition; ``exact_length``: every sequence
    must have ``n_steps`` entries (``n_steps`` was taken from them; else they
    may be longer); ``truncate_gradient``: how many steps the gradient runs
    back (-1: all).  ``labels`` name each node input and output in errors
    (the loop argument it came from); ``inner_mode`` is the mode the inner
    graph is compiled with (None: the default one).  Neither takes part in
    equality.
    """

    __props__ = ("n_seqs", "state_taps", "n_nitsot", "as_while", "exact_length",
                 "truncate_gradient", "stored", "final_checks_empty", "checkpoint_every",
                 "keeps_initial")
    _cache_attrs = ("_step",)
    #: on the CUDA linker the loop runs on device arrays, its step compiled
    #: for the device: the states never leave it
    state_on_device = True

    def __init__(self, inner: FunctionGraph, n_seqs: int, state_taps, n_nitsot: int,
                 as_while: bool = False, exact_length: bool = True,
                 truncate_gradient: int = -1, labels=None, inner_mode=None, stored=None,
                 final_checks_empty=None, checkpoint_every: int = 0, keeps_initial=None):
        super().__init__([inner])
        self.n_seqs = int(n_seqs)
        self.state_taps = tuple(tuple(int(t) for t in taps) for taps in state_taps)
        self.n_nitsot = int(n_nitsot)
        self.as_while = bool(as_while)
        self.exact_length = bool(exact_length)
        self.truncate_gradient = int(truncate_gradient)
        for taps in self.state_taps:
            if not taps or any(t >= 0 for t in taps) or list(taps) != sorted(set(taps)):
                raise ValueError(f"Scan: a state's taps must be distinct negative ints in "
                                 f"increasing order, got {taps}")
        n_nonseqs = len(inner.inputs) - self.n_seqs - sum(len(t) for t in self.state_taps)
        expected_outputs = len(self.state_taps) + self.n_nitsot + int(self.as_while)
        if n_nonseqs < 0 or len(inner.outputs) != expected_outputs:
            raise ValueError(f"Scan: the inner graph has {len(inner.inputs)} inputs and "
                             f"{len(inner.outputs)} outputs, which do not fit {self.n_seqs} "
                             f"sequences, taps {self.state_taps} and {self.n_nitsot} "
                             f"nit-sot outputs")
        self.parts = ScanParts(self.n_seqs, self.state_taps, self.n_nitsot, n_nonseqs)
        self.stored = (tuple(bool(v) for v in stored) if stored is not None
                       else (True,) * len(self.state_taps))
        self.final_checks_empty = (tuple(bool(v) for v in final_checks_empty)
                                   if final_checks_empty is not None
                                   else (False,) * len(self.state_taps))
        self.keeps_initial = (tuple(bool(v) for v in keeps_initial)
                              if keeps_initial is not None
                              else (False,) * len(self.state_taps))
        for name in ("stored", "final_checks_empty", "keeps_initial"):
            if len(getattr(self, name)) != len(self.state_taps):
                raise ValueError(f"Scan: {name} has {len(getattr(self, name))} entries for "
                                 f"{len(self.state_taps)} states")
        if any(self.keeps_initial) and (self.as_while or not all(
                stored for stored, initial in zip(self.stored, self.keeps_initial) if initial)):
            raise ValueError(f"Scan: keeps_initial needs a stored trajectory in a loop with a "
                             f"length (not a until loop); got keeps_initial="
                             f"{self.keeps_initial}, stored={self.stored}, "
                             f"as_while={self.as_while}")
        self.checkpoint_every = int(checkpoint_every)
        if self.checkpoint_every < 0 or (self.checkpoint_every and self.as_while):
            raise ValueError(f"Scan: checkpoint_every must be 0 (none) or a positive number of "
                             f"steps, and 0 for a until loop; got {checkpoint_every}")
        self.labels = labels
        self.inner_mode = inner_mode

    def replaced(self, inner: FunctionGraph | None = None, **changes) -> Scan:
        """A new op like this one, with ``changes`` to its constructor's
        arguments (and ``inner`` as its step, when given)."""
        params = dict(n_seqs=self.n_seqs, state_taps=self.state_taps, n_nitsot=self.n_nitsot,
                      as_while=self.as_while, exact_length=self.exact_length,
                      truncate_gradient=self.truncate_gradient, labels=self.labels,
                      inner_mode=self.inner_mode, stored=self.stored,
                      final_checks_empty=self.final_checks_empty,
                      checkpoint_every=self.checkpoint_every, keeps_initial=self.keeps_initial)
        params.update(changes)
        return Scan(inner if inner is not None else self.inner.clone(), **params)

    def output_groups(self, outputs: list) -> tuple:
        """A node's outputs as ``(trajectories, nit-sots, finals, checkpoints)``
        (checkpoints: empty unless ``checkpoint_every``)."""
        s, j = self.parts.n_states, self.n_nitsot
        return (outputs[:s], outputs[s:s + j], outputs[s + j:2 * s + j],
                outputs[2 * s + j:])

    @property
    def inner(self) -> FunctionGraph:
        return self.inner_graphs[0]

    def __str__(self) -> str:
        return "scan_until" if self.as_while else "scan"

    # -- labels for errors --------------------------------------------------
    def label(self, kind: str, i: int) -> str:
        names = (self.labels or {}).get(kind)
        if names is not None and i < len(names):
            return names[i]
        return f"{kind}[{i}]"

    # -- graph ---------------------------------------------------------------
    def make_node(self, n_steps, *outer) -> Apply:
        parts = self.parts
        n_steps = as_tensor_variable(n_steps)
        if n_steps.ndim != 0 or n_steps.type.numpy_dtype.kind not in "iu":
            raise TypeError(f"scan: n_steps must be a 0-d integer, got {n_steps} "
                            f"({n_steps.type})")
        outer = [as_tensor_variable(v) for v in outer]
        expected = parts.n_seqs + parts.n_states + parts.n_nonseqs
        if len(outer) != expected:
            raise TypeError(f"scan: expected {expected} inputs after n_steps, got {len(outer)}")
        _, seqs, inits, nonseqs = parts.outer([n_steps] + outer)
        slices, taps, inner_nonseqs = parts.inner(list(self.inner.inputs))
        for i, (seq, piece) in enumerate(zip(seqs, slices)):
            _require_type(seq, piece.type.clone(shape=(None,) + piece.type.shape),
                          self.label("sequences", i))
        for k, (init, state_taps) in enumerate(zip(inits, taps)):
            _require_type(init, state_taps[0].type.clone(
                shape=(None,) + state_taps[0].type.shape), self.label("states", k))
        for i, (value, inner_var) in enumerate(zip(nonseqs, inner_nonseqs)):
            _require_type(value, inner_var.type, self.label("non_sequences", i))
        stacked = [TensorType(out.type.dtype, (None,) + out.type.shape)()
                   for out in self.inner.outputs[:parts.n_states + parts.n_nitsot]]
        finals = [state_taps[0].type() for state_taps in taps]
        checkpoints = [TensorType(t[0].type.dtype, (None, len(init_taps)) + t[0].type.shape)()
                       for t, init_taps in zip(taps, self._depths())] \
            if self.checkpoint_every else []
        return Apply(self, [n_steps] + outer, stacked + finals + checkpoints)

    def _depths(self) -> list:
        """Per state, ``L`` (its earliest tap is ``-L``), as a range of that length."""
        return [range(-taps[0]) for taps in self.state_taps]

    def infer_shape(self, node, input_shapes):
        if self.as_while:
            raise NotImplementedError("a until loop's length is known once it has run")
        n = node.inputs[0]
        lengths = [(n + len(depth) if initial else n) if stored else 0
                   for stored, initial, depth in zip(self.stored, self.keeps_initial,
                                                     self._depths())]
        lengths += [n] * self.n_nitsot
        stacked = [(length,) + tuple(_inner_output_dims(node, k, input_shapes))
                   for k, length in enumerate(lengths)]
        finals = [tuple(_inner_output_dims(node, k, input_shapes))
                  for k in range(self.parts.n_states)]
        checkpoints = []
        if self.checkpoint_every:
            every = self.checkpoint_every
            count = (n + (every - 1)) // every
            checkpoints = [(count, len(depth)) + dims
                           for depth, dims in zip(self._depths(), finals)]
        return stacked + finals + checkpoints

    def workspace_bytes(self, node, input_shapes, output_shapes) -> int:
        """The rings of the states whose trajectory is not kept (``L`` values
        each), and one step's peak: the memory plan of the compiled step
        (which counts the results it lends the loop)."""
        total = 0
        for k, stored in enumerate(self.stored):
            shape = input_shapes[1 + self.n_seqs + k]
            if shape is not None and not stored:
                total += nbytes(shape, node.outputs[k])
        # The compiled step's graph (rewritten: in-place, fused) is what runs.
        step_graph = getattr(self._compiled_step(), "fgraph", self.inner)
        return total + inner_graph.inner_graph_peak(step_graph, self._step_shapes(input_shapes))

    def _step_shapes(self, input_shapes) -> list:
        """The inner graph's input shapes for the node's input shapes."""
        _, seqs, inits, nonseqs = self.parts.outer(list(input_shapes))
        taps = [init for init, state_taps in zip(inits, self.state_taps) for _ in state_taps]
        return [None if shape is None else tuple(shape[1:]) for shape in seqs + taps] + \
            [None if shape is None else tuple(shape) for shape in nonseqs]

    # -- running -------------------------------------------------------------
    def _compiled_step(self):
        if self._step is None:
            self._step = inner_graph.compile_inner_graph(self.inner, self.inner_mode)
        return self._step

    def perform(self, node, inputs, output_storage):
        with self.running():
            self._perform(node, inputs, output_storage)

    def _perform(self, node, inputs, output_storage):
        parts = self.parts
        n_steps, seqs, inits, nonseqs = parts.outer(list(inputs))
        n = self._checked_steps(n_steps, seqs)
        inits = [self._checked_initial(k, init) for k, init in enumerate(inits)]
        step = self._compiled_step()
        mem = LoopMemory.of(seqs + inits + nonseqs)
        layout = zip(inits, self.stored, self.keeps_initial)
        states = [_Trajectory(mem, output_storage[k][0], n, init, initial) if stored
                  else _Ring(mem, output_storage[k][0], n, init)
                  for k, (init, stored, initial) in enumerate(layout)]
        args = [None] * len(self.inner.inputs)
        args[len(args) - parts.n_nonseqs:] = nonseqs
        run = _LoopCall(step, n, args, seqs, self._tap_reads(len(seqs), states), states,
                        [None] * self.n_nitsot, output_storage, node, mem)
        n_states = parts.n_states
        every = self.checkpoint_every
        first_checkpoint = 2 * n_states + self.n_nitsot
        checkpoints = [_checkpoints(mem, output_storage[first_checkpoint + k][0], n, every, init)
                       for k, init in enumerate(inits)] if every else []
        # From the first step whose every read is a row of one array, steps
        # run in compiled code (step.run_steps: no Python between two); the
        # steps before it, and every step when the step cannot run that
        # way, are called one by one from here.
        compiled_from = self._first_compiled_step(run)
        t, done = 0, n
        while t < n:
            if every and t % every == 0:
                _save_checkpoints(states, checkpoints, t // every, t)
            if t >= compiled_from:
                stop = min(n, (t // every + 1) * every) if every else n
                ran = self._compiled_steps(run, t, stop)
                if ran is not None:
                    t, fired = ran
                    if fired:
                        done = t
                        break
                    continue
                compiled_from = n
            if self._step_here(run, t):
                done = t + 1
                break
            t += 1
        nitsots = run.nitsots
        for j in range(self.n_nitsot):
            if nitsots[j] is None:    # no step ran: an empty trajectory
                out = node.outputs[parts.n_states + j]
                nitsots[j] = mem.empty((0,) + _unrun_step_shape(node, parts.n_states + j, inputs),
                                       out.type.numpy_dtype)
        stacked = [state.trajectory(done) for state in states] + nitsots
        lengths = [state.offset + done for state in states] + [done] * self.n_nitsot
        for cell, value, length in zip(output_storage, stacked, lengths):
            cell[0] = value if length == len(value) else value[:length]
        if done == 0 and any(self.final_checks_empty):
            raise IndexError("index -1 is out of bounds for axis 0 with size 0 (the last "
                             "entry of a loop that ran no step)")
        for cell, saved in zip(output_storage[first_checkpoint:], checkpoints):
            cell[0] = saved
        finals = output_storage[n_states + self.n_nitsot:2 * n_states + self.n_nitsot]
        for cell, state in zip(finals, states):
            last = state.last(done)
            cell[0] = mem.buffer(cell[0], last.shape, last.dtype)
            cell[0][...] = last

    def _checked_steps(self, n_steps, seqs) -> int:
        n = int(n_steps)
        if n < 0:
            raise ValueError(f"scan: n_steps must be >= 0, got {n}")
        for i, seq in enumerate(seqs):
            length = len(seq)
            if self.exact_length and length != n:
                raise ValueError(f"scan: the sequences have different lengths: "
                                 f"{self.label('sequences', 0)} has {n} entries, "
                                 f"{self.label('sequences', i)} has {length}; pass "
                                 f"n_steps to loop over the first n_steps of each")
            if length < n:
                raise ValueError(f"scan: {self.label('sequences', i)} has {length} entries, "
                                 f"fewer than n_steps={n}")
        return n

    def _checked_initial(self, k: int, init):
        need = -self.state_taps[k][0]
        if len(init) != need:
            raise ValueError(f"scan: {self.label('states', k)} has {len(init)} initial "
                             f"entries; its taps {list(self.state_taps[k])} need {need}")
        return init

    def _tap_reads(self, first: int, states) -> list:
        """``(argument position, state, tap)`` for every state tap, in the
        inner graph's input order (after the ``first`` sequence slices)."""
        reads, pos = [], first
        for state, taps in zip(states, self.state_taps):
            for tap in taps:
                reads.append((pos, state, tap))
                pos += 1
        return reads

    def _bad_state_shape(self, k: int, t: int, state, value):
        raise ValueError(f"scan: step {t} gave {self.label('states', k)} the shape "
                         f"{np.shape(value)}; it must keep its initial value's shape "
                         f"{state.shape}")

    def _store_nitsot(self, j: int, t: int, store, value) -> None:
        if np.shape(value) != store.shape[1:]:
            self._bad_nitsot_shape(j, t, store, value)
        store[t] = value

    def _bad_nitsot_shape(self, j: int, t: int, store, value):
        raise ValueError(f"scan: step {t} gave {self.label('outputs', j)} the shape "
                         f"{np.shape(value)}, step 0 gave {store.shape[1:]}: every step "
                         f"must give an output of one shape")

    # -- running the steps ---------------------------------------------------------
    def _step_here(self, run: _LoopCall, t: int) -> bool:
        """Step ``t``, called from here; whether ``until`` stopped the loop."""
        n_states = self.parts.n_states
        args, states, nitsots = run.args, run.states, run.nitsots
        for i, seq in enumerate(run.seqs):
            args[i] = seq[t, ...]   # a view (a 0-d array, not a NumPy scalar)
        for pos, state, tap in run.reads:
            args[pos] = state.read(t + tap)
        results = run.step(*args)
        for k in range(n_states):
            value = results[k]
            if getattr(value, "shape", None) != states[k].shape:
                self._bad_state_shape(k, t, states[k], value)
            states[k].write(t, value)
        for j in range(self.n_nitsot):
            value = results[n_states + j]
            if nitsots[j] is None:
                nitsots[j] = run.mem.buffer(run.output_storage[n_states + j][0],
                                            (run.n,) + np.shape(value),
                                            run.node.outputs[n_states + j].type.numpy_dtype)
            self._store_nitsot(j, t, nitsots[j], value)
        return bool(self.as_while and results[-1])

    def _first_compiled_step(self, run: _LoopCall) -> int:
        """The first step that may run in compiled code: every read a row of
        one array (a trajectory's steps before its first entry read the
        initial buffer), and each nit-sot's store made (by step 0)."""
        if getattr(run.step, "run_steps", None) is None:
            return run.n
        first = 1 if self.n_nitsot else 0
        for _, state, tap in run.reads:
            first = max(first, state.first_row_step(tap))
        return first

    def _compiled_steps(self, run: _LoopCall, first: int, stop: int):
        """Steps ``first..stop-1`` through ``step.run_steps``: ``(steps done,
        whether until stopped the loop)``, or None when they cannot run
        that way."""
        n_states = self.parts.n_states
        reads = tuple((i, seq, 0, 0) for i, seq in enumerate(run.seqs)) + tuple(
            state.read_rows(pos, tap) for pos, state, tap in run.reads)
        writes = tuple(state.write_rows(k) for k, state in enumerate(run.states)) + tuple(
            (n_states + j, store, 0, 0) for j, store in enumerate(run.nitsots))
        cond = len(self.inner.outputs) - 1 if self.as_while else -1
        got = run.step.run_steps(run.args, reads, writes, cond, first, stop)
        if got is None:
            return None
        t, fired, bad_write, value = got
        if bad_write >= 0:
            if bad_write < n_states:
                self._bad_state_shape(bad_write, t, run.states[bad_write], value)
            j = bad_write - n_states
            self._bad_nitsot_shape(j, t, run.nitsots[j], value)
        return t, fired

    # -- gradient ------------------------------------------------------------
    def grad(self, inputs, output_grads):
        # scan_grad builds scans (it imports this module): imported when asked.
        from tenure.symbolic.ops.scan_grad import scan_grad
        return scan_grad(self, list(inputs), list(output_grads))


def _require_type(value: Variable, expected: TensorType, label: str) -> None:
    if value.type.dtype != expected.dtype or value.ndim != expected.ndim:
        raise TypeError(f"scan: {label} is {value} ({value.type}); the loop expects "
                        f"{expected}")
    if not expected.is_compatible_replacement(value.type):
        raise TypeError(f"scan: {label} has the static shape {value.type.shape}; the loop "
                        f"expects {expected.shape}")


def _inner_output_dims(node: Apply, k: int, input_shapes) -> list:
    """Output ``k``'s per-step dims: a state's are its initial buffer's (bar the
    first); a nit-sot's are the step's output dims, inferred through the inner
    graph from the node's input dims."""
    op = node.op
    parts = op.parts
    if k < parts.n_states:
        return list(input_shapes[1 + parts.n_seqs + k][1:])
    static = node.outputs[k].type.shape[1:]
    if all(d is not None for d in static):
        return list(static)
    return list(_step_output_dims(op, op.inner.outputs[k], input_shapes))


def _step_output_dims(op, inner_output, input_shapes) -> tuple:
    """The dims of an output of the step, as expressions of the node's input
    dims (``NotImplementedError`` where they would need a value computed in
    the step)."""
    _, seqs, inits, nonseqs = op.parts.outer(list(input_shapes))
    slices, taps, inner_nonseqs = op.parts.inner(list(op.inner.inputs))
    memo = {var: tuple(dims[1:]) for var, dims in zip(slices, seqs)}
    for holders, dims in zip(taps, inits):
        memo.update((var, tuple(dims[1:])) for var in holders)
    memo.update((var, tuple(dims)) for var, dims in zip(inner_nonseqs, nonseqs))
    dims = infer_dims(inner_output, memo)
    symbolic = [d for d in dims if isinstance(d, Variable)]
    # The step's own graph may read the shape of one of its inputs (a
    # gradient's shape arithmetic does): that is the outer dims' vector.
    shapes_read = {var: stack_scalars([as_dim(d) for d in memo[var.owner.inputs[0]]],
                                      dtype="int64")
                   for var in ancestors(symbolic)
                   if var.owner is not None and isinstance(var.owner.op, Shape)
                   and var.owner.inputs[0] in memo and memo[var.owner.inputs[0]]}
    if shapes_read:
        outer = iter(clone_replace(symbolic, shapes_read))
        dims = tuple(next(outer) if isinstance(d, Variable) else d for d in dims)
    inner = op.inner.variables
    if any(isinstance(d, Variable) and any(v in inner for v in ancestors([d]))
           for d in dims):
        raise NotImplementedError("a step output's shape that depends on the step's values")
    return dims


def step_output_shape(node: Apply, k: int, values) -> tuple:
    """The per-step shape of nit-sot output ``k`` of a loop over input
    ``values``, before it runs: inferred through the step from their shapes.
    ``NotImplementedError`` (or the error of evaluating a dim) where only
    running the step tells."""
    return concrete_dims(_inner_output_dims(node, k, [tuple(np.shape(v)) for v in values]))


def concrete_dims(dims) -> tuple:
    """Dims (ints, or 0-d variables of nothing but constants) as ints."""
    return tuple(int(d) if isinstance(d, (int, np.integer)) else int(d.eval()) for d in dims)


def _unrun_step_shape(node: Apply, k: int, inputs) -> tuple:
    """The per-step shape of nit-sot output ``k`` of a loop that ran no step
    (a length nothing tells is 0)."""
    try:
        return step_output_shape(node, k, inputs)
    except Exception:  # noqa: BLE001 -- a step's shape that only running tells
        return tuple(d or 0 for d in node.outputs[k].type.shape[1:])


def nbytes(shape, var) -> int:
    """Bytes of an array of ``var``'s dtype and ``shape``."""
    return int(np.prod(shape, dtype=np.int64)) * var.type.numpy_dtype.itemsize


class _LoopCall:
    """One call of a loop: its compiled step, length, the step's argument
    list, the sequences, the state reads ``(argument position, state,
    tap)``, the states, the nit-sots' stores (made by step 0), the node's
    output storage, the node, and the memory its buffers are in."""

    __slots__ = ("step", "n", "args", "seqs", "reads", "states", "nitsots", "output_storage",
                 "node", "mem")

    def __init__(self, step, n, args, seqs, reads, states, nitsots, output_storage, node, mem):
        self.step, self.n, self.args, self.seqs, self.reads = step, n, args, seqs, reads
        self.states, self.nitsots = states, nitsots
        self.output_storage, self.node, self.mem = output_storage, node, mem


def _save_checkpoints(states, checkpoints, index: int, t: int) -> None:
    """Each state's ``L`` values before step ``t``, as checkpoint ``index``."""
    for state, saved in zip(states, checkpoints):
        depth = saved.shape[1]
        for i in range(depth):
            saved[index, i] = state.read(t - depth + i)


def _checkpoints(mem: LoopMemory, previous, n: int, every: int, init):
    """The buffer of a state's checkpoints: for each ``every``-th step, the
    ``L`` values before it (last call's buffer when it fits)."""
    count = -(-n // every)
    return mem.buffer(previous, (count,) + tuple(init.shape), init.dtype)


class _Trajectory:
    """A stored state: every step's value, in the output buffer (last call's
    when it fits), after its ``L`` initial entries when the loop keeps them
    (``keeps_initial``: value ``j`` at ``L + j``); else ``read(j)`` of a step
    before the first is the initial buffer's entry."""

    def __init__(self, mem: LoopMemory, previous, n: int, init, keeps_initial: bool = False):
        self.init = init
        self.shape = tuple(init.shape[1:])
        self.offset = len(init) if keeps_initial else 0
        self.store = mem.buffer(previous, (self.offset + n,) + self.shape, init.dtype)
        if self.offset:
            self.store[:self.offset] = init

    def read(self, j: int):
        if j >= -self.offset:
            return self.store[self.offset + j, ...]
        return self.init[len(self.init) + j, ...]

    def write(self, t: int, value) -> None:
        self.store[self.offset + t] = value

    def trajectory(self, done: int):
        return self.store

    def last(self, done: int):
        return self.store[self.offset + done - 1] if done else self.init[-1]

    # rows for compiled steps (see the C runtime's src/loop.c)
    def first_row_step(self, tap: int) -> int:
        """The first step whose read at ``tap`` is a row of the store."""
        return max(0, -tap - self.offset)

    def read_rows(self, pos: int, tap: int) -> tuple:
        return (pos, self.store, self.offset + tap, 0)

    def write_rows(self, k: int) -> tuple:
        return (k, self.store, self.offset, 0)


class _Ring:
    """A state whose trajectory is not kept: its last ``L`` values in a ring
    of ``L`` entries, overwritten in place from step to step (value ``j``,
    initial entries included as ``-L..-1``, lives at ``j mod L``)."""

    #: a ring's trajectory is empty: no initial entries before it
    offset = 0

    def __init__(self, mem: LoopMemory, previous, n: int, init):
        self.shape = tuple(init.shape[1:])
        self.ring = mem.copy(init)
        self.empty = mem.empty((0,) + self.shape, init.dtype)

    def read(self, j: int):
        return self.ring[j % len(self.ring), ...]

    def write(self, t: int, value) -> None:
        self.ring[t % len(self.ring)] = value

    def trajectory(self, done: int):
        return self.empty

    def last(self, done: int):
        return self.ring[(done - 1) % len(self.ring)]

    # rows for compiled steps (see the C runtime's src/loop.c)
    @staticmethod
    def first_row_step(tap: int) -> int:
        return 0

    def read_rows(self, pos: int, tap: int) -> tuple:
        return (pos, self.ring, tap, len(self.ring))

    def write_rows(self, k: int) -> tuple:
        return (k, self.ring, 0, len(self.ring))


class LoopMemory:
    """Where one call of a loop keeps its buffers: host memory, or the device
    its inputs are on (the CUDA linker runs a loop on the device, its step
    compiled for the device: the states never leave it)."""

    def __init__(self, runtime=None):
        self.runtime = runtime

    @classmethod
    def of(cls, values) -> LoopMemory:
        """The memory of the first device array among ``values`` (host memory
        when there is none)."""
        for value in values:
            runtime = runtime_of(value)
            if runtime is not None:
                return cls(runtime)
        return cls()

    def empty(self, shape: tuple, dtype):
        if self.runtime is None:
            return np.empty(shape, dtype=dtype)
        return self.runtime.empty(shape, np.dtype(dtype))

    def zeros(self, shape: tuple, dtype):
        if self.runtime is None:
            return np.zeros(shape, dtype=dtype)
        out = self.runtime.empty(shape, np.dtype(dtype))
        out.fill(0)
        return out

    def copy(self, array):
        """A C-contiguous copy of ``array`` of its own."""
        if self.runtime is None:
            return np.array(array, copy=True, order="C")
        out = self.runtime.empty(tuple(array.shape), array.dtype)
        self.runtime.copy_into(out, array)
        return out

    def buffer(self, previous, shape: tuple, dtype):
        """Last call's output buffer when it fits (shape, dtype, a whole
        C-contiguous array of its own, in this memory), else a new one."""
        dtype = np.dtype(dtype)
        if self.runtime is None:
            fits = isinstance(previous, np.ndarray) and previous.flags.writeable
        else:
            fits = self.runtime.is_device_array(previous)
        if (fits and tuple(previous.shape) == tuple(shape) and previous.dtype == dtype
                and previous.flags.c_contiguous and previous.base is None):
            return previous
        return self.empty(shape, dtype)


def scan_node(inner_inputs: list, inner_outputs: list, n_steps, sequences: list,
              initial_buffers: list, non_sequences: list, *, state_taps, n_nitsot: int,
              as_while: bool = False, exact_length: bool = True,
              truncate_gradient: int = -1, labels=None, checkpoint_every: int = 0) -> list:
    """Build a scan node over the given inner graph (the module doc's layout)
    and return its outputs.  The inner graph is copied: its inputs and outputs
    may be used elsewhere."""
    equiv = clone_get_equiv(inner_inputs, inner_outputs)
    inner = FunctionGraph([equiv[v] for v in inner_inputs],
                          [equiv.get(v, v) for v in inner_outputs])
    op = Scan(inner, len(sequences), state_taps, n_nitsot, as_while, exact_length,
              truncate_gradient, labels, checkpoint_every=checkpoint_every)
    node = op.make_node(n_steps, *sequences, *initial_buffers, *non_sequences)
    return list(node.outputs)
