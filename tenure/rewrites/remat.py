"""Training under an activation-memory budget: recompute instead of keeping.

A training step computes the forward pass, then the backward pass reads the
forward intermediates again (a ReLU layer's gradient needs its output, a
weight's gradient needs the layer's input).  Those *saved activations* are
alive across the peak of the step.  ``tn.Mode(activation_memory_budget=f)``
keeps only some of them -- at most ``f`` of their bytes (a fraction), or at
most so many bytes (an int) -- and recomputes the others from kept values
right before the backward pass reads them.  The names follow PyTorch's
``torch._functorch.config.activation_memory_budget`` and
``activation_memory_budget_solver``.

The rewrite (``remat``, the last one of the ``memory`` phase; it does nothing
unless the FunctionGraph carries a :class:`MemoryBudget`):

1. **Sizes.**  Shapes from :class:`~tenure.rewrites.sizes.SizeModel`: shared
   variables by their current value, explicit inputs by their static shape.
   An unknown length an input shares with a weight in a matrix product
   (``x @ W``: ``x``'s columns) is taken from the weight; any other unknown
   length is :data:`NOMINAL_DIM`.  A budget in bytes needs every length
   known (a ``ValueError`` says which input lacks one).
2. **Candidates.**  The graph is scheduled with
   :func:`~tenure.rewrites.schedule.memory_schedule`; at its peak step ``P``
   the candidates are the buffers alive across ``P`` that a node of the graph
   produced before ``P``, that the node at ``P`` neither reads nor writes, that
   some node after ``P`` reads, and that are not (views of) results.  Their
   total size is ``B_saved``; a fraction ``f`` allows ``floor(f * B_saved)``
   bytes of them.  When everything fits, nothing changes.
3. **Choice.**  Each candidate's *chain* is what recomputing it takes: its
   producer and, recursively, the producers of inputs not available after
   ``P`` (available: graph inputs, constants, values read after ``P``; for this
   estimate every other candidate counts as kept).  A chain with a random,
   stateful or side-effecting op (one with ``recomputable = False``, or a
   true ``random`` / ``stateful`` / ``has_side_effects`` attribute), or with an
   in-place op overwriting a value from outside the chain, cannot be
   recomputed: that candidate is kept, its bytes counted first.  The others
   are a 0/1 knapsack (:mod:`~tenure.rewrites.knapsack`): weight = bytes,
   value = recomputation cost (:mod:`~tenure.rewrites.cost`), nudged so that
   between equally costly values the one read first after the peak is kept
   (:func:`_prefer_early_readers`); the chosen items are kept.
4. **Rewrite.**  For each dropped candidate (earliest first) its chain is
   cloned over the values actually kept, and every node after ``P`` that read
   the candidate reads the clone instead (nodes up to ``P`` keep the
   original, which therefore dies before the peak).  Each rewiring is
   validated (the DestroyHandler); a rejected one -- an in-place op that would
   have to run both before and after the recomputation -- is rolled back and
   that candidate kept.  The cloned nodes go in ``fgraph.recompute_nodes``,
   which the scheduler runs just in time, right before their first reader.

**Sharing clones.**  A chain that passes through another dropped candidate
``u`` uses ``u``'s recomputed value only when it is computed anyway at that
time (the chain's first reader falls between ``u``'s first and last reader
after ``P``); otherwise it recomputes ``u`` privately, as a temporary.
Sharing unconditionally would compute ``u`` at the first chain that needs it
and hold it until ``u``'s own last reader: in a backward pass, which reads
the layers in reverse, that rebuilds every dropped activation at the start
of the backward pass, and a budget of 0 would then save nothing.

**Reporting.**  ``fgraph.remat_report`` holds a :class:`RematReport`: every
candidate with its bytes, cost and fate, the capacity, ``B_saved``, the
solver and its :class:`~tenure.rewrites.knapsack.KnapsackSolution`, and the
predicted peak before and after.

No later rewrite merges the clones back into the originals: ``memory`` is the
last phase, and merging (``canonicalize``) runs before it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tenure.rewrites import knapsack
# scan_save_memory registers first, so it runs before remat in the memory
# phase: a loop state kept as a ring is no saved activation
from tenure.rewrites import scan_memory  # noqa: F401
from tenure.rewrites.cost import nodes_cost
from tenure.rewrites.engine import register_graph_rewrite
# NOMINAL_DIM: re-exported, the rewrite's documented assumption
from tenure.rewrites.sizes import NOMINAL_DIM, compile_time_shapes, nbytes  # noqa: F401
from tenure.symbolic.graph import Apply, Constant, Variable
from tenure.symbolic.inner_graph import OpWithInnerGraphs
from tenure.symbolic.types import TensorType


@dataclass(frozen=True)
class MemoryBudget:
    """What ``Mode(activation_memory_budget=..., activation_memory_budget_solver=...)``
    asks for: ``budget`` a fraction in [0, 1] (float) or a number of bytes
    (int) of saved activations to keep; ``solver`` a knapsack solver name."""

    budget: float | int
    solver: str = "dp"

    @property
    def is_fraction(self) -> bool:
        return isinstance(self.budget, float)

    def capacity(self, saved_bytes: int) -> int:
        """Bytes of saved activations that may be kept."""
        if self.is_fraction:
            return math.floor(self.budget * saved_bytes)
        return int(self.budget)


def require_known_sizes(budget: MemoryBudget, unknown: list) -> None:
    """A budget in bytes needs the sizes it is compared with: raise naming
    the ``unknown`` inputs (those whose shape is not known when compiling)."""
    if budget.is_fraction or not unknown:
        return
    names = ", ".join(f"{v} ({v.type})" for v in unknown)
    raise ValueError(
        f"activation_memory_budget={budget.budget!r} is a number of bytes, but the "
        f"sizes of the saved activations depend on input(s) {names} whose shape is not "
        "known when compiling; give them a static shape (e.g. tn.matrix('x', "
        "shape=(1024, 2))) or give the budget as a fraction of the saved bytes "
        "(e.g. activation_memory_budget=0.5)")


@dataclass(frozen=True)
class Candidate:
    """One saved activation: a buffer alive across the peak that the backward
    pass reads.

    ``variables``: the versions or views of the buffer read after the peak;
    ``nbytes``: its size; ``cost``: estimated seconds to recompute it (every
    other candidate kept); ``chain``: how many nodes that takes;
    ``recomputable``: whether it may be recomputed at all; ``kept``: the
    outcome; ``reason``: why (``"fits"``, ``"chosen"``, ``"dropped"``,
    ``"not recomputable: ..."``, ``"rewiring rejected: ..."``).
    """

    root: Variable
    variables: tuple[Variable, ...]
    nbytes: int
    cost: float
    chain: int
    recomputable: bool
    kept: bool
    reason: str


@dataclass
class RematReport:
    """What the ``remat`` rewrite found and did (``fgraph.remat_report``)."""

    budget: MemoryBudget
    peak_step: int = 0
    #: predicted peak of the memory schedule before / after the rewrite (bytes)
    peak_before: int = 0
    peak_after: int = 0
    #: total bytes of the candidates (``B_saved``) and the bytes allowed
    saved_bytes: int = 0
    capacity: int = 0
    candidates: tuple[Candidate, ...] = ()
    #: the knapsack's answer (None: not needed); its indices are positions in
    #: :attr:`knapsack_items`
    solution: knapsack.KnapsackSolution | None = None
    #: nodes added to recompute dropped values
    recompute_nodes: int = 0
    #: each loop's checkpoints, chosen before (``fgraph.loop_checkpoints``,
    #: :mod:`tenure.rewrites.scan_checkpoint`)
    loops: tuple = ()

    @property
    def solver(self) -> str:
        return self.budget.solver

    @property
    def kept_bytes(self) -> int:
        return sum(c.nbytes for c in self.candidates if c.kept)

    @property
    def knapsack_items(self) -> tuple[Candidate, ...]:
        """The candidates the solver chose among (the recomputable ones, in order)."""
        return tuple(c for c in self.candidates if c.recomputable)

    @property
    def dropped(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if not c.kept)

    def __str__(self) -> str:
        b = self.budget.budget
        what = f"{b:g} of saved activations" if self.budget.is_fraction else f"{b:,} bytes"
        lines = [f"activation memory budget {what} (solver {self.solver!r}): "
                 f"{len(self.candidates)} saved activation(s), {self.saved_bytes:,} bytes; "
                 f"capacity {self.capacity:,}; kept {self.kept_bytes:,} bytes; "
                 f"{len(self.dropped)} recomputed with {self.recompute_nodes} node(s)",
                 f"predicted peak {self.peak_before:,} -> {self.peak_after:,} bytes "
                 f"(peak step {self.peak_step})"]
        for c in sorted(self.candidates, key=lambda c: -c.nbytes):
            lines.append(f"  {'keep' if c.kept else 'drop'}  {c.nbytes:>14,} B  "
                         f"{c.cost * 1e3:9.3f} ms ({c.chain} node(s))  {c.root}  [{c.reason}]")
        lines += [str(loop) for loop in self.loops]
        return "\n".join(lines)


# ----------------------------------------------------------------------------
# Recomputability


def _op_recomputable(op) -> str:
    """Why ``op`` may not be run a second time ("" when it may).

    An op opts out with ``recomputable = False``; ops that say they are
    random, stateful or have side effects (attributes ``random``,
    ``stateful``, ``has_side_effects``, ``side_effects``) are never
    recomputed either: a second run would give another value, or act twice.
    Nor are ops running inner graphs (loops): their cost is hidden from the
    cost model, and a loop's stored states have their own rewrite
    (:mod:`tenure.rewrites.scan_checkpoint`).
    """
    if getattr(op, "recomputable", True) is False:
        return f"{op} is not recomputable"
    if isinstance(op, OpWithInnerGraphs):
        # A loop costs its step times its length, which the cost model does
        # not see; a loop's stored states are the loop_gradient rewrite's.
        return f"{op} runs inner graphs (a loop: its checkpoints are chosen apart)"
    for attr in ("random", "stateful", "has_side_effects", "side_effects"):
        if getattr(op, attr, False):
            return f"{op} is {attr.replace('_', ' ')}"
    return ""


def _node_problem(node: Apply, in_chain) -> str:
    """Why ``node`` cannot be part of a recomputation chain ("" when it can):
    its op, a non-tensor value, or an in-place write into a value from
    outside the chain (``in_chain(var)`` says whether ``var`` is made by it)."""
    why = _op_recomputable(node.op)
    if why:
        return why
    for var in node.inputs + node.outputs:
        if not isinstance(var.type, TensorType):
            return f"{node} handles {var} ({var.type}), which is not a tensor"
    for positions in node.op.destroy_map.values():
        for i in positions:
            if not in_chain(node.inputs[i]):
                return f"{node} overwrites {node.inputs[i]}, which is kept"
    return ""


# ----------------------------------------------------------------------------
# The rewrite


#: how much more a saved value read right after the peak is worth keeping than
#: an equally costly one read at the end of the step (a tie-breaker)
EARLY_READER_BONUS = 1e-3


def _prefer_early_readers(costs: list[float], first_read: list[int]) -> list[float]:
    """Knapsack values: the recomputation costs, nudged to keep the values read
    soonest after the peak when costs tie (layers of equal width).

    A kept value is held until its last reader; one read right after the peak
    (the last layer's activation, in a backward pass) is released first, so
    keeping it lowers the memory of the rest of the step, while a dropped one
    read early would be recomputed while everything kept is still alive --
    right at the peak.  On an 8-layer MLP at budget 0.5 this takes the
    predicted peak from 0.82x to 0.53x of the unbudgeted one.
    """
    latest = max(first_read, default=0) + 1
    return [cost * (1 + EARLY_READER_BONUS * (latest - step) / latest)
            for cost, step in zip(costs, first_read)]


@register_graph_rewrite("memory", name="remat", tags=("remat", "activation_memory_budget"))
def remat(fgraph) -> bool:
    """Keep the saved activations within ``fgraph.memory_budget`` by
    recomputing the others (see the module docstring).  Runs once per graph."""
    budget = getattr(fgraph, "memory_budget", None)
    if budget is None or getattr(fgraph, "remat_report", None) is not None:
        return False
    if not hasattr(fgraph, "recompute_nodes"):
        fgraph.recompute_nodes = set()
    report, changed = _Remat(fgraph, budget).run()
    report.loops = tuple(getattr(fgraph, "loop_checkpoints", ()))
    fgraph.remat_report = report
    return changed


class _Remat:
    def __init__(self, fgraph, budget: MemoryBudget):
        self.fgraph = fgraph
        self.budget = budget

    def run(self) -> tuple[RematReport, bool]:
        from tenure.rewrites.schedule import memory_profile, memory_schedule
        fg, budget = self.fgraph, self.budget
        report = RematReport(budget)
        shapes, unknown = compile_time_shapes(fg)
        self.shapes = shapes
        self.nbytes = {var: nbytes(var, shape) for var, shape in shapes.items()}
        order = memory_schedule(fg, self.nbytes)
        profile = memory_profile(fg, order, self.nbytes)
        report.peak_before = report.peak_after = profile.peak
        report.peak_step = peak = profile.peak_step
        self.roots = roots = profile.roots
        self.position = {node: i for i, node in enumerate(order)}
        self.inputs = set(fg.inputs)

        # -- the saved activations ------------------------------------------
        at_peak = set()
        if order:
            node = order[peak]
            at_peak = {roots.get(v, v) for v in node.inputs + node.outputs}
        results = {roots.get(v, v) for v in fg.outputs}
        #: variables read after the peak, and their readers (node, input position)
        self.later_readers: dict[Variable, list[tuple[Apply, int]]] = {}
        for node in order[peak + 1:]:
            for i, var in enumerate(node.inputs):
                self.later_readers.setdefault(var, []).append((node, i))
        read_later: dict[Variable, list[Variable]] = {}
        for var in self.later_readers:
            root = roots.get(var, var)
            if root.owner is not None and not isinstance(root, Constant):
                read_later.setdefault(root, []).append(var)
        live = profile.live_roots(peak) if order else set()
        found = [r for r in live if r in read_later and r not in at_peak and r not in results
                 and r.owner is not None and profile.first_use.get(r, peak) < peak]
        found.sort(key=lambda r: (profile.first_use[r], r.auto_id))
        report.saved_bytes = sum(self.nbytes.get(r) or 0 for r in found)
        report.capacity = budget.capacity(report.saved_bytes)
        if not found:
            return report, False
        require_known_sizes(budget, unknown)
        if report.saved_bytes <= report.capacity:
            report.candidates = tuple(
                self._candidate(r, read_later[r], kept=True, reason="fits") for r in found)
            return report, False

        # -- what to keep ------------------------------------------------------
        estimates = []
        for r in found:
            chain, why = self._chain(r, read_later[r])
            cost = nodes_cost(chain, shapes) if chain is not None else 0.0
            estimates.append((r, chain, cost, why))
        forced = [e for e in estimates if e[3]]
        free = [e for e in estimates if not e[3]]
        forced_bytes = sum(self.nbytes.get(r) or 0 for r, *_ in forced)
        room = max(0, report.capacity - forced_bytes)
        first_read = [self._reader_window(read_later[r])[0] for r, *_ in free]
        solution = knapsack.solve(_prefer_early_readers([cost for _, _, cost, _ in free],
                                                        first_read),
                                  [self.nbytes.get(r) or 0 for r, *_ in free],
                                  room, budget.solver)
        report.solution = solution
        chosen = {free[i][0] for i in solution.chosen}
        self.dropped = {r for r, *_ in free if r not in chosen}

        # -- the rewrite -------------------------------------------------------
        outcome: dict[Variable, str] = {}
        self.clones: dict[Variable, dict[Variable, Variable]] = {}  # root -> its clones
        self.window = {r: self._reader_window(read_later[r]) for r in found}
        self.made: set[Apply] = set()
        self.origin: dict[Variable, Variable] = {}  # recomputed variable -> original
        changed = False
        for r in found:
            if r not in self.dropped:
                continue
            ok, why = self._rewire(r, read_later[r])
            if ok:
                changed = True
                outcome[r] = "dropped"
            else:
                self.dropped.discard(r)
                outcome[r] = f"rewiring rejected: {why}"
        recompute = {n for n in self.made if n in fg.apply_nodes}
        fg.recompute_nodes = set(getattr(fg, "recompute_nodes", ())) | recompute
        report.recompute_nodes = len(recompute)
        cands = []
        for r, chain, cost, why in estimates:
            if why:
                reason, kept = f"not recomputable: {why}", True
            elif r in chosen:
                reason, kept = "chosen", True
            else:
                reason = outcome.get(r, "dropped")
                kept = r not in self.dropped
            cands.append(self._candidate(r, read_later[r], kept=kept, reason=reason,
                                         chain=chain, cost=cost, recomputable=not why))
        report.candidates = tuple(cands)
        if changed:
            after = dict(self.nbytes)
            for new, old in self.origin.items():
                after[new] = self.nbytes.get(old)
            report.peak_after = memory_profile(fg, memory_schedule(fg, after), after).peak
        return report, changed

    # -- pieces --------------------------------------------------------------
    def _candidate(self, root, variables, kept, reason, chain=None, cost=None,
                   recomputable=True) -> Candidate:
        if chain is None and cost is None:
            chain, why = self._chain(root, variables)
            recomputable = not why
        if cost is None:
            cost = nodes_cost(chain, self.shapes) if chain is not None else 0.0
        return Candidate(root, tuple(variables), self.nbytes.get(root) or 0, cost,
                         len(chain) if chain is not None else 0, recomputable, kept, reason)

    def _available(self, var: Variable, root: Variable, dropped=frozenset()) -> bool:
        """Whether ``var`` can be read after the peak without recomputing it,
        when recomputing (a buffer of) ``root`` and dropping ``dropped``."""
        if isinstance(var, Constant) or var in self.inputs:
            return True
        r = self.roots.get(var, var)
        return r is not root and var in self.later_readers and r not in dropped

    def _chain(self, root: Variable, variables) -> tuple[list[Apply] | None, str]:
        """The nodes that recompute ``variables`` (of buffer ``root``) from
        available values, inputs first, every other candidate kept; or
        ``(None, why)`` when they cannot be recomputed."""
        nodes: list[Apply] = []
        seen: set[Apply] = set()
        for var in variables:
            stack = [(var.owner, 0)]
            while stack:
                node, i = stack.pop()
                if node in seen:
                    continue
                if i < len(node.inputs):
                    stack.append((node, i + 1))
                    inp = node.inputs[i]
                    if not self._available(inp, root) and inp.owner not in seen:
                        stack.append((inp.owner, 0))
                else:
                    seen.add(node)
                    nodes.append(node)
        for node in nodes:
            why = _node_problem(node, lambda v: v.owner in seen)
            if why:
                return None, why
        return nodes, ""

    def _reader_window(self, variables) -> tuple[int, int]:
        steps = [self.position[n] for v in variables for n, _ in self.later_readers[v]]
        return min(steps), max(steps)

    def _rewire(self, root: Variable, variables) -> tuple[bool, str]:
        """Clone the chain of ``root`` over the values actually kept and make
        its readers after the peak read the clones.  Returns whether the
        DestroyHandler accepted it (and why not)."""
        fg = self.fgraph
        # Readers that are gone were themselves recomputed from a value an
        # earlier rewiring dropped: they read nothing any more.
        readers = {var: [(node, i) for node, i in self.later_readers[var]
                         if node in fg.apply_nodes and node.inputs[i] is var]
                   for var in variables}
        variables = [var for var in variables if readers[var]]
        if not variables:
            self.clones[root] = {}
            return True, ""
        first, _ = self.window[root]
        memo: dict[Variable, Variable] = {}
        private: set[Variable] = set()
        made: list[Apply] = []

        def resolve(var: Variable):
            """What the clone reads for ``var`` (None: not built yet)."""
            if var in memo:
                return memo[var]
            if self._available(var, root, self.dropped):
                return var
            r = self.roots.get(var, var)
            shared = self.clones.get(r)
            if r is not root and shared is not None and var in shared:
                lo, hi = self.window[r]
                if lo <= first <= hi:
                    return shared[var]  # computed anyway by then: no longer held
            return None

        for var in variables:
            stack = [var]
            while stack:
                current = stack[-1]
                if resolve(current) is not None:
                    stack.pop()
                    continue
                node = current.owner
                missing = [i for i in node.inputs if resolve(i) is None]
                if missing:
                    stack.extend(missing)
                    continue
                stack.pop()
                new_inputs = [resolve(i) for i in node.inputs]
                for positions in node.op.destroy_map.values():
                    for i in positions:
                        if new_inputs[i] not in private:
                            return False, (f"{node} would overwrite {new_inputs[i]}, which "
                                           "is not recomputed with it")
                why = _op_recomputable(node.op)
                if why:
                    return False, why
                new = Apply(node.op, new_inputs,
                            [type(o)(o.type, name=o.name) for o in node.outputs])
                made.append(new)
                for old, out in zip(node.outputs, new.outputs):
                    memo[old] = out
                    private.add(out)

        changes = [(node, i, memo[var]) for var in variables for node, i in readers[var]]

        def apply():
            for node, i, new in changes:
                fg.change_input(node, i, new, reason="remat")

        if not fg.try_changes(apply, reason="remat"):
            return False, "the DestroyHandler refused it (an in-place op would form a cycle)"
        self.made.update(made)
        self.origin.update((new, old) for old, new in memo.items())
        self.clones[root] = {var: memo[var] for var in variables}
        return True, ""
