"""The rewrite engine: named rewrites in phases, a query to select them, and
the walkers that apply them.

A *node rewrite* is a small function ``fn(fgraph, node)`` returning the
replacements for ``node``'s outputs (a list, one variable or ``None`` per
output) or ``None`` when it does not apply.  A *graph rewrite* is
``fn(fgraph)`` that changes the graph itself and returns whether it did.
Both are registered under a name in a phase, with tags::

    @register_node_rewrite("canonicalize", tags=("algebra",))
    def mul_by_one(fgraph, node): ...

Phases run in :data:`PHASES` order; node rewrites of a phase are applied to
every node until none fires any more.  A :class:`Query` (what
``tn.Mode(include=..., exclude=...)`` holds) picks rewrites by name or tag, so
``tn.Mode(exclude=["fusion"])`` compiles without fusion, which is how one
bisects a rewrite bug.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tenure.symbolic.fgraph import FunctionGraph

#: the phases, in the order they run ("rows" joins the regions "fuse" has
#: settled: :mod:`tenure.rewrites.row_fusion`)
PHASES = ("canonicalize", "stabilize", "specialize", "fuse", "rows", "inplace", "memory")

#: a safety net against rewrites that undo each other forever
MAX_PASSES = 100


@dataclass
class Rewrite:
    name: str
    phase: str
    fn: Callable
    tags: frozenset[str]
    kind: str  # "node" or "graph"

    def labels(self) -> frozenset[str]:
        """What a query can select this rewrite by: its name, phase and tags."""
        return self.tags | {self.name, self.phase}


_REGISTRY: dict[str, Rewrite] = {}


def _register(kind: str, phase: str, name: str | None, tags: Iterable[str], default: bool):
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}")

    def decorate(fn):
        rewrite_name = name or fn.__name__
        if rewrite_name in _REGISTRY and _REGISTRY[rewrite_name].fn is not fn:
            raise ValueError(f"a rewrite named {rewrite_name!r} is already registered")
        all_tags = set(tags) | ({"default"} if default else set())
        _REGISTRY[rewrite_name] = Rewrite(rewrite_name, phase, fn, frozenset(all_tags), kind)
        return fn

    return decorate


def register_node_rewrite(phase: str, name: str | None = None, tags: Iterable[str] = (),
                          default: bool = True):
    """Register ``fn(fgraph, node) -> replacements | None`` in ``phase``.

    ``default=False`` keeps it off unless a query includes it by name or tag.
    """
    return _register("node", phase, name, tags, default)


def register_graph_rewrite(phase: str, name: str | None = None, tags: Iterable[str] = (),
                           default: bool = True):
    """Register ``fn(fgraph) -> bool`` (whether it changed the graph) in ``phase``."""
    return _register("graph", phase, name, tags, default)


def registered_rewrites() -> dict[str, Rewrite]:
    """Every registered rewrite, by name (importing the rewrite modules first)."""
    _load_rewrite_modules()
    return dict(_REGISTRY)


def _load_rewrite_modules() -> None:
    # The modules register their rewrites when imported.
    from tenure.rewrites import (broadcast, canonicalize, fusion, increments,  # noqa: F401
                                 inplace, remat, shape_lift, specialize, stabilize)
    from tenure.rewrites import row_fusion  # noqa: F401
    from tenure.rewrites import random_inplace  # noqa: F401
    from tenure.rewrites import dask_specialize  # noqa: F401
    from tenure.rewrites import scan_checkpoint, scan_memory  # noqa: F401
    from tenure.rewrites import ifelse  # noqa: F401


@dataclass(frozen=True)
class Query:
    """Which rewrites to run.

    A rewrite runs when it is tagged ``"default"`` or selected by ``include``,
    and none of its labels (name, phase, tags) is in ``exclude``.
    ``only_included=True`` ignores the defaults (``fast_compile`` uses it).
    """

    include: frozenset[str] = field(default_factory=frozenset)
    exclude: frozenset[str] = field(default_factory=frozenset)
    only_included: bool = False

    def selects(self, rewrite: Rewrite) -> bool:
        labels = rewrite.labels()
        if labels & self.exclude:
            return False
        if labels & self.include:
            return True
        return "default" in rewrite.tags and not self.only_included

    def rewrites(self, phase: str) -> list[Rewrite]:
        """The selected rewrites of ``phase``, in registration order."""
        return [r for r in registered_rewrites().values()
                if r.phase == phase and self.selects(r)]

    def check_names(self) -> None:
        """Unknown names in include/exclude are typos: say so."""
        known = set().union(*(r.labels() for r in registered_rewrites().values()), PHASES,
                            {"default", "fast_compile"})
        unknown = sorted((self.include | self.exclude) - known)
        if unknown:
            raise ValueError(f"Mode: unknown rewrite name or tag {', '.join(map(repr, unknown))}"
                             f"; known: {', '.join(sorted(known))}")


def rewrite_graph(fgraph: FunctionGraph, query: Query) -> list[str]:
    """Run every selected rewrite on ``fgraph``, phase by phase.

    Returns the names of the rewrites that changed something, in order (for
    tests and for printing what happened).
    """
    applied: list[str] = []
    for phase in PHASES:
        rewrites = query.rewrites(phase)
        if rewrites:
            _run_phase(fgraph, rewrites, applied)
    return applied


def _run_phase(fgraph: FunctionGraph, rewrites: list[Rewrite], applied: list[str]) -> None:
    node_rewrites = [r for r in rewrites if r.kind == "node"]
    graph_rewrites = [r for r in rewrites if r.kind == "graph"]
    for _ in range(MAX_PASSES):
        changed = False
        for rewrite in graph_rewrites:
            if rewrite.fn(fgraph):
                applied.append(rewrite.name)
                changed = True
        if node_rewrites and _node_pass(fgraph, node_rewrites, applied):
            changed = True
        if not changed:
            return
    raise RuntimeError(f"rewrites did not settle after {MAX_PASSES} passes: "
                       f"{', '.join(r.name for r in rewrites)}")


def _node_pass(fgraph: FunctionGraph, rewrites: list[Rewrite], applied: list[str]) -> bool:
    """One walk over the nodes (inputs first), trying every rewrite on each."""
    changed = False
    for node in fgraph.toposort():
        for rewrite in rewrites:
            if node not in fgraph.apply_nodes:
                break  # replaced by an earlier rewrite in this walk
            result = rewrite.fn(fgraph, node)
            if result is None or result is False:
                continue
            replacements = result if isinstance(result, (list, tuple)) else [result]
            if len(replacements) != len(node.outputs):
                raise ValueError(f"rewrite {rewrite.name} returned {len(replacements)} "
                                 f"replacements for {len(node.outputs)} outputs of {node}")
            # Outputs nobody reads need no replacement (and may be pruned as
            # soon as the others are replaced).
            pairs = [(old, new) for old, new in zip(node.outputs, replacements)
                     if new is not None and new is not old and fgraph.clients.get(old)]
            if not pairs:
                continue
            for old, new in pairs:
                # Keep names readable in printed graphs; never rename a root
                # (an input or shared variable the user may see).
                if new.name is None and old.name is not None and new.owner is not None:
                    new.name = old.name
            if fgraph.replace_all_validate(pairs, reason=rewrite.name):
                applied.append(rewrite.name)
                changed = True
    return changed
