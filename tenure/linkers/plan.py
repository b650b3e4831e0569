"""The execution plan shared by every linker: schedule, slots, lifetimes, buffers.

A :class:`Plan` is linker-independent (plain ints, tuples and graph objects;
no arrays).  It fixes

- the *schedule*: a topological order of the apply nodes in which every
  destructive op runs after all other readers of the buffer it overwrites
  (and of that buffer's views).  Given the sizes of the variables, the order
  is the one :func:`tenure.rewrites.schedule.memory_schedule` picks among the
  valid ones to lower the peak;
- a *slot* (an index into a flat storage list) for every variable.  Slots
  depend on the graph only, never on the schedule, so every plan of one
  graph shares one storage layout;
- for each step, the slots whose variable is dead after it (last reader ran),
  so a linker can free intermediates early (``config.allow_gc``);
- given sizes, the *buffer assignment*: a *buffer* is what a step output that
  is neither a view nor an in-place result (no ``view_map`` /
  ``destroy_map`` entry) allocates; every variable viewing or overwriting it
  shares it.  Once all of them are dead, the buffer may be handed to a later
  output of exactly the same byte size (:attr:`Step.reuse`) instead of being
  freed -- when keeping it aside until then does not raise the planned peak.

Inputs, constants and outputs are never freed by the plan: inputs belong to
the caller or to shared variables, constants to the graph, outputs to whoever
receives them.  Their buffers, and the buffers outputs are views of or were
written into, are never handed to another variable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tenure.linkers.commit import writes_shared_storage
from tenure.rewrites.destroy import buffer_roots, destroy_orderings
from tenure.rewrites.schedule import memory_schedule, plain_schedule
from tenure.rewrites.sizes import SizeModel, placeholder
from tenure.rewrites.sizes import nbytes as _nbytes
from tenure.symbolic.graph import Apply, Constant, Variable
from tenure.symbolic.inner_graph import register_inner_planner


def schedule(fgraph) -> list[Apply]:
    """A topological order that also runs every reader of a buffer before the
    node that overwrites it (the schedule without sizes).  Raises
    ``InconsistencyError`` when that is impossible."""
    return plain_schedule(fgraph)


def memory_order(fgraph, nbytes: dict[Variable, int | None]) -> list[Apply]:
    """A valid schedule that lowers peak memory for these sizes, checked to
    respect data dependencies and the destroy orderings."""
    order = list(memory_schedule(fgraph, nbytes))
    check_order(fgraph, order)
    return order


def compile_time_order(fgraph, runs_python=None) -> list[Apply]:
    """A schedule lowering peak memory for the sizes known before any call
    (shared values, static shapes, :data:`~tenure.rewrites.sizes.NOMINAL_DIM`
    for the rest), for a linker that fixes one schedule when compiling (the C
    linker); the plain schedule when the sizes cannot be evaluated.  With
    ``runs_python(node)`` (which steps the linker runs as Python), those
    steps go before the commit point where they can at little cost in memory
    (:func:`python_steps_before_commit`)."""
    from tenure.rewrites.sizes import compile_time_shapes, nbytes
    try:
        shapes, _ = compile_time_shapes(fgraph)
    except Exception:  # noqa: BLE001 -- an order without sizes, not a failed compile
        return schedule(fgraph)
    order = memory_order(fgraph, {var: nbytes(var, shape) for var, shape in shapes.items()})
    if runs_python is not None:
        order = python_steps_before_commit(fgraph, order, runs_python, shapes)
    return order


#: how much higher the planned peak may be for Python steps to move before
#: the commit point: a gradient kept alive a few steps longer (the logits'
#: gradient of an MLP, 0.6% of its step's peak), not a layer's activations
MOVE_PEAK_SLACK = 1.02


def python_steps_before_commit(fgraph, order: list[Apply], runs_python,
                               shapes: dict | None = None) -> list[Apply]:
    """``order`` with the steps that ``runs_python(node)`` says run Python
    moved before the commit point (the first write into shared storage),
    with the steps they need from there on, where the graph allows it and
    the planned peak for ``shapes`` is at most :data:`MOVE_PEAK_SLACK` times
    higher: a C linker calls a schedule with a Python step after its commit
    point through its Python call path (Ctrl-C must be able to stop such a
    call there), and such steps -- a bias gradient's ``SumTo`` -- rarely
    need the writes.  A step that reads what a write made (directly or not)
    stays."""
    position = {node: i for i, node in enumerate(order)}
    first = next((i for i, node in enumerate(order) if writes_shared_storage(node)), None)
    if first is None:
        return order
    after_writes: set = set()     # the writes and every step reading their results
    for node in order[first:]:
        if writes_shared_storage(node) or any(inp.owner in after_writes for inp in node.inputs):
            after_writes.add(node)
    moving: set = set()
    stack = [n for n in order[first:] if n not in after_writes and runs_python(n)]
    while stack:
        node = stack.pop()
        if node in moving or position[node] < first:
            continue
        moving.add(node)
        stack.extend(inp.owner for inp in node.inputs if inp.owner is not None)
    if not moving:
        return order
    moved = (order[:first] + [n for n in order[first:] if n in moving]
             + [n for n in order[first:] if n not in moving])
    try:
        check_order(fgraph, moved)   # (a moved step may overwrite what a later one reads)
    except ValueError:
        return order
    if shapes is not None and (make_plan(fgraph, True, shapes, order=moved).peak()
                               > MOVE_PEAK_SLACK * make_plan(fgraph, True, shapes,
                                                             order=order).peak()):
        return order
    return moved


def check_order(fgraph, order: list[Apply]) -> None:
    """Raise ``ValueError`` unless ``order`` runs every node of ``fgraph`` once,
    after the nodes computing its inputs and after every reader of a buffer
    it overwrites."""
    position = {node: i for i, node in enumerate(order)}
    if len(position) != len(order) or set(position) != fgraph.apply_nodes:
        raise ValueError("schedule: the order does not run every node of the graph exactly once")
    for node, i in position.items():
        for inp in node.inputs:
            if inp.owner is not None and position.get(inp.owner, -1) >= i:
                raise ValueError(f"schedule: {node} runs before {inp.owner}, which computes "
                                 f"its input {inp}")
    for destroyer, readers in destroy_orderings(fgraph.apply_nodes).items():
        for reader in readers:
            if position[reader] > position[destroyer]:
                raise ValueError(f"schedule: {destroyer} overwrites a buffer that {reader} "
                                 "still reads after it")


@dataclass
class Step:
    node: Apply
    inputs: tuple[int, ...]    # slots read
    outputs: tuple[int, ...]   # slots written
    frees: tuple[int, ...]     # slots dead after this step
    #: per output: the slot of the dead buffer this output is computed into
    #: (``None``: a buffer of its own, or a view / in-place result)
    reuse: tuple[int | None, ...] = ()
    #: bytes ``perform`` allocates temporarily beyond its outputs (planned)
    workspace: int = 0
    #: ``(slot, bytes)`` of the buffers this step allocates (reused ones excluded)
    allocates: tuple[tuple[int, int], ...] = ()
    #: ``(slot, bytes)`` of the buffers released after it (dead and not handed on)
    releases: tuple[tuple[int, int], ...] = ()


@dataclass
class Plan:
    inputs: tuple[int, ...]            # slots of fgraph.inputs, in order
    outputs: tuple[int, ...]           # slots of fgraph.outputs, in order
    constants: dict[int, object]       # slot -> constant value
    steps: list[Step]
    n_slots: int
    variables: list[Variable]          # slot -> variable
    allow_gc: bool = True
    #: slot -> slot of the variable owning its buffer (itself for new buffers,
    #: inputs and constants)
    roots: tuple[int, ...] = ()
    #: buffers (root slots) that may be handed on once dead: new buffers that
    #: are not returned, viewed by a result, or kept between calls
    donatable: frozenset[int] = frozenset()
    #: output slots whose buffer is kept between calls (borrowed outputs)
    kept: frozenset[int] = frozenset()
    #: slot -> planned shape (``None``: unknown); ``None`` when planned without sizes
    shapes: tuple | None = None
    #: slot -> planned bytes (``None``: unknown); ``None`` when planned without sizes
    nbytes: tuple | None = None
    #: root slots whose dead buffer a later step takes (keep them aside when freed)
    donors: frozenset[int] = frozenset()
    #: how the planned peak is made up, for reports: see :meth:`live_bytes`
    notes: dict = field(default_factory=dict)

    @property
    def sized(self) -> bool:
        return self.nbytes is not None

    def reused_from(self) -> dict[int, int]:
        """``{slot: donor slot}`` for every output computed into a dead buffer."""
        return {o: d for step in self.steps for o, d in zip(step.outputs, step.reuse)
                if d is not None}

    def live_bytes(self, held=frozenset(), unit: int = 1) -> list[int]:
        """Bytes of planned buffers alive during each step (the step's own
        outputs included, what dies after it included).  ``held``: slots whose
        buffer already exists when the call starts (a borrowed output's, or
        every intermediate's without ``allow_gc``): they allocate nothing.
        ``unit``: the allocator's granularity, each buffer rounded up to a
        multiple of it (CuPy's pool hands out multiples of 512 bytes)."""
        def size(b: int) -> int:
            return -(-b // unit) * unit

        live, current = [], 0
        for step in self.steps:
            current += sum(size(b) for s, b in step.allocates if s not in held)
            live.append(current)
            current -= sum(size(b) for s, b in step.releases if s not in held)
        return live

    def step_peaks(self, held=frozenset(), unit: int = 1) -> list[int]:
        """Planned bytes at each step: live buffers (in ``unit``, see
        :meth:`live_bytes`) plus the step's workspace."""
        return [live + step.workspace
                for live, step in zip(self.live_bytes(held, unit), self.steps)]

    def peak(self, held=frozenset()) -> int:
        """The planned peak of one call (see :meth:`step_peaks`)."""
        return max(self.step_peaks(held), default=0)


def slot_layout(fgraph) -> tuple[dict[Variable, int], list[Variable]]:
    """Slots for every variable of ``fgraph``: inputs first, then in the graph's
    deterministic topological order (independent of any schedule)."""
    slot_of: dict[Variable, int] = {}
    variables: list[Variable] = []

    def add(var: Variable) -> None:
        if var not in slot_of:
            slot_of[var] = len(variables)
            variables.append(var)

    for var in fgraph.inputs:
        add(var)
    for node in fgraph.toposort():
        for var in node.inputs:
            add(var)
        for var in node.outputs:
            add(var)
    for var in fgraph.outputs:
        add(var)
    return slot_of, variables


def step_workspace(node: Apply, shapes: dict) -> int:
    """``node.op.workspace_bytes`` for the planned shapes (0 when a shape is
    unknown or the op cannot say)."""
    in_shapes = [shapes.get(v) for v in node.inputs]
    out_shapes = [shapes.get(v) for v in node.outputs]
    if any(s is None for s in out_shapes):
        return 0
    try:
        return int(node.op.workspace_bytes(node, in_shapes, out_shapes) or 0)
    except Exception:  # noqa: BLE001 -- a model that cannot evaluate predicts nothing
        return 0


def make_plan(fgraph, allow_gc: bool = True, shapes: dict | None = None, keep=(),
              order: list[Apply] | None = None, reuse: bool = True,
              min_reuse_bytes: int = 0, workspace_of=None) -> Plan:
    """Schedule ``fgraph`` and assign storage slots, lifetimes and buffers.

    ``shapes``: ``{variable: shape or None}`` (from
    :class:`~tenure.rewrites.sizes.SizeModel`) for one set of input shapes;
    with it the schedule lowers the peak for those sizes and dead buffers are
    handed to later outputs of the same byte size.  ``keep``: indices of
    ``fgraph.outputs`` whose buffers are kept between calls (never given a
    dead buffer: they have last call's).  ``order``: a schedule to use as is
    (checked).  ``reuse=False``: assign no buffers; ``min_reuse_bytes``:
    hand on no buffer smaller than this.  ``workspace_of(node, shapes) ->
    bytes``: the temporaries a step needs besides its outputs (default
    :func:`step_workspace`, the ``perform``'s; a linker running its own code
    for a node passes its own).
    """
    slot_of, variables = slot_layout(fgraph)
    nb: dict[Variable, int | None] = {}
    if shapes is not None:
        nb = {var: _nbytes(var, shapes.get(var)) for var in variables}
    if order is None:
        order = memory_order(fgraph, nb) if shapes is not None else schedule(fgraph)
    else:
        order = list(order)
        check_order(fgraph, order)
    n = len(order)

    constants = {slot_of[v]: v.data for v in variables if isinstance(v, Constant)}
    kept_vars = {fgraph.outputs[i] for i in keep}
    kept = frozenset(slot_of[v] for v in kept_vars)

    # Lifetimes: a variable dies after its last reader (an unread output at once).
    never_freed = set(fgraph.inputs) | set(fgraph.outputs)
    last_reader: dict[Variable, int] = {}
    for i, node in enumerate(order):
        for inp in node.inputs:
            last_reader[inp] = i
    death: dict[Variable, int] = {}
    frees_at: list[list[int]] = [[] for _ in range(n)]
    if allow_gc:
        for i, node in enumerate(order):
            for var in node.inputs:
                if (last_reader.get(var) == i and var not in never_freed
                        and not isinstance(var, Constant) and var not in death):
                    death[var] = i
            for var in node.outputs:
                if var not in last_reader and var not in never_freed:
                    death[var] = i
        for var, i in death.items():
            frees_at[i].append(slot_of[var])

    # Buffers: each variable's root, the groups sharing a root, when a group dies.
    root_of = buffer_roots(order, fgraph.inputs)
    members: dict[Variable, list[Variable]] = {}
    for node in order:
        for out in node.outputs:
            members.setdefault(root_of[out], []).append(out)
    protected = {root_of.get(v, v) for v in fgraph.outputs}
    new_roots = [r for r in members if r.owner is not None and root_of[r] is r]
    donatable_roots = [r for r in new_roots if r not in protected]
    group_death: dict[Variable, int] = {}
    for r in donatable_roots:
        deaths = [death.get(m) for m in members[r]]
        if None not in deaths:
            group_death[r] = max(deaths)
    dying_after: list[list[Variable]] = [[] for _ in range(n)]
    for r, d in group_death.items():
        dying_after[d].append(r)

    shape_of: dict = shapes or {}
    workspace_of = workspace_of or step_workspace
    workspace = [workspace_of(node, shape_of) for node in order] if shapes is not None \
        else [0] * n

    # The peak without reuse: what holding a dead buffer aside must not exceed.
    totals = list(workspace)
    if shapes is not None:
        current = 0
        for i, node in enumerate(order):
            current += sum(nb.get(out) or 0 for out in node.outputs if root_of[out] is out)
            totals[i] += current
            current -= sum(nb.get(r) or 0 for r in dying_after[i])
    limit = max(totals, default=0)

    reuse_of: dict[Variable, Variable] = {}   # recipient root -> donor root
    donors: set[Variable] = set()
    if shapes is not None and allow_gc and reuse:
        pool: dict[int, list[tuple[int, Variable]]] = {}   # bytes -> (death step, root)
        for i, node in enumerate(order):
            for out in node.outputs:
                size = nb.get(out)
                if (root_of[out] is not out or out in kept_vars or not size
                        or size < min_reuse_bytes):
                    continue
                candidates = pool.get(size)
                if not candidates:
                    continue
                # The most recently dead buffer is held aside the shortest time;
                # if holding it would raise the peak, holding an older one would too.
                died, donor = candidates[-1]
                if any(totals[t] + size > limit for t in range(died + 1, i)):
                    continue
                candidates.pop()
                for t in range(died + 1, i):
                    totals[t] += size
                reuse_of[out] = donor
                donors.add(donor)
            for r in dying_after[i]:
                size = nb.get(r)
                if size:
                    pool.setdefault(size, []).append((i, r))

    steps = []
    for i, node in enumerate(order):
        out_slots = tuple(slot_of[v] for v in node.outputs)
        allocates = tuple((slot_of[v], nb[v]) for v in node.outputs
                          if root_of[v] is v and nb.get(v) and v not in reuse_of)
        releases = tuple((slot_of[r], nb[r]) for r in dying_after[i]
                         if nb.get(r) and r not in donors)
        steps.append(Step(node, tuple(slot_of[v] for v in node.inputs), out_slots,
                          tuple(sorted(frees_at[i])),
                          tuple(slot_of[reuse_of[v]] if v in reuse_of else None
                                for v in node.outputs),
                          workspace[i], allocates, releases))
    roots = tuple(slot_of.get(root_of.get(v, v), slot_of[v]) for v in variables)
    plan = Plan(
        inputs=tuple(slot_of[v] for v in fgraph.inputs),
        outputs=tuple(slot_of[v] for v in fgraph.outputs),
        constants=constants, steps=steps, n_slots=len(variables), variables=variables,
        allow_gc=allow_gc, roots=roots,
        donatable=frozenset(slot_of[r] for r in donatable_roots), kept=kept,
        donors=frozenset(slot_of[r] for r in donors))
    if shapes is not None:
        plan.shapes = tuple(shapes.get(v) for v in variables)
        plan.nbytes = tuple(nb.get(v) for v in variables)
        plan.notes["peak_without_reuse"] = limit
    return plan


def reuse_possible(plan: Plan, kept=None) -> bool:
    """Whether some plan of this graph could hand a dead buffer on: it frees
    intermediates, has a buffer that may be handed on, and another output
    that could take it (not one of the ``kept`` slots, by default
    ``plan.kept``).  When not, sizes cannot change the plan's buffers and a
    linker need not plan per input shape."""
    if not plan.allow_gc or not plan.donatable:
        return False
    kept = plan.kept if kept is None else frozenset(kept)
    takers = [s for step in plan.steps for s in step.outputs
              if plan.roots[s] == s and s not in kept]
    return len(takers) >= 2


def inner_graph_peak(fgraph, input_shapes: list) -> int:
    """The planned peak of one run of ``fgraph`` (an op's inner graph: a
    loop's step) for inputs of ``input_shapes``: what the op adds to its
    workspace (:func:`tenure.symbolic.inner_graph.inner_graph_peak`)."""
    values = [placeholder(var, shape) for var, shape in zip(fgraph.inputs, input_shapes)]
    return make_plan(fgraph, shapes=SizeModel(fgraph).shapes(values)).peak()


register_inner_planner(inner_graph_peak)
