"""Rendering of graphs: :func:`debugprint` (text) and :func:`graph_picture` (Graphviz).

:func:`debugprint`: each line shows a variable: the op that computes it (or its
name, for roots), an id (so shared subgraphs print once and are referred to
after), its type, and the memory marks of the op: ``v={out: [in]}`` for views,
``d={out: [in]}`` for outputs written into an input's buffer.

:func:`graph_picture` draws the same graph -- for a compiled function, the
graph after rewrites -- with the optional ``graphviz`` package (the
``[plot]`` extra), imported only when it is called.  Apply nodes are
boxes labelled with their op and output types; roots are inputs (ellipses),
shared variables (yellow cylinders) and constants (small grey boxes).  Memory
is marked: an op with a ``destroy_map`` has a red outline and says "in place",
and the input it overwrites comes in on a bold red edge labelled "destroyed";
an op with a ``view_map`` has a dashed blue outline and says "view".  A
function's outputs are green house shapes ("lent" for ``Out(borrow=True)``),
and each update is a purple edge labelled "update" from its value to the
shared variable it assigns.  A fused ``Composite`` is one node showing its
scalar expression, or with ``expand_composites=True`` a cluster holding its
inner scalar graph.  A legend cluster explains the marks.  The path's suffix
chooses the output: ``.svg``, ``.png``, ``.pdf`` (rendered by Graphviz's
``dot`` program: a RuntimeError saying how to install it when it is missing)
or ``.dot`` / ``.gv`` (the DOT source, no ``dot`` needed).  Drawing is
linear in the size of the graph.
"""

from __future__ import annotations

import io
import os
import pathlib
import shutil
import sys
from typing import Protocol, runtime_checkable

from tenure.symbolic.fgraph import FunctionGraph
from tenure.symbolic.graph import Constant, Variable, io_toposort
from tenure.symbolic.ops.composite import Composite
from tenure.symbolic.shared import SharedVariable


@runtime_checkable
class CompiledGraph(Protocol):
    """What printing needs of a compiled function (a
    :class:`tenure.function.Function` is one): printing sits below the
    function layer, so it recognises one by these attributes instead of
    importing it.  ``fgraph``'s inputs are the ``inputs`` specs' variables,
    then ``shared_vars``; its outputs are the ``outputs`` specs' variables,
    then the update values, the ``k``-th assigning
    ``shared_vars[update_shared_index[k]]``."""

    fgraph: FunctionGraph
    inputs: list
    outputs: list
    shared_vars: list
    update_shared_index: list


def _id_letters(n: int) -> str:
    letters = ""
    n += 1
    while n:
        n, rem = divmod(n - 1, 26)
        letters = chr(ord("A") + rem) + letters
    return letters


class _Printer:
    def __init__(self, stream, stop_at: set):
        self.stream = stream
        self.ids: dict = {}
        self.stop_at = stop_at

    def _id(self, key) -> str:
        if key not in self.ids:
            self.ids[key] = _id_letters(len(self.ids))
        return self.ids[key]

    def tree(self, root: Variable, label: str = "") -> None:
        """Print ``root`` and what it is computed from, depth first.

        An explicit stack rather than recursion: graphs can be deeper than
        Python's recursion limit.
        """
        stack = [(root, "", "", label)]
        while stack:
            var, prefix, child_prefix, suffix = stack.pop()
            inputs = self._line(var, prefix, suffix)
            for i in reversed(range(len(inputs))):
                last = i == len(inputs) - 1
                stack.append((inputs[i], child_prefix + (" └─ " if last else " ├─ "),
                              child_prefix + ("    " if last else " │  "), ""))

    def _line(self, var: Variable, prefix: str, suffix: str) -> list:
        """Write one variable's line; return the inputs still to print below it."""
        node = var.owner
        if node is None or var in self.stop_at:
            if isinstance(var, Constant):
                text = f"{var}"
            else:
                kind = "shared " if type(var).__name__ == "SharedVariable" else ""
                text = f"{kind}{var.name or '<' + str(var.type) + '>'}"
            type_text = (f"Python {type(var.weak_value).__name__}"
                         if getattr(var, "weak", False) else str(var.type))
            self.stream.write(f"{prefix}{text} [id {self._id(var)}] <{type_text}>{suffix}\n")
            return []
        seen = node in self.ids
        out = f".{var.index}" if len(node.outputs) > 1 else ""
        marks = "".join(
            f" {tag}={dict(mapping)}" for tag, mapping in (("v", node.op.view_map),
                                                         ("d", node.op.destroy_map)) if mapping)
        name = f" '{var.name}'" if var.name else ""
        self.stream.write(f"{prefix}{node.op}{out} [id {self._id(node)}]{name} "
                          f"<{var.type}>{marks}{suffix}{' ···' if seen else ''}\n")
        return [] if seen else list(node.inputs)


def debugprint(obj, file=None) -> str | None:
    """Print a graph: a variable, a list of variables or a compiled :class:`Function`.

    With ``file="str"`` the text is returned instead of printed.  Nodes that
    appear more than once are printed in full the first time and shown with
    ``···`` afterwards.  For a function, update expressions are labelled with
    the shared variable they assign.
    """
    stream = io.StringIO() if file == "str" else (file or sys.stdout)
    stop_at: set = set()
    if isinstance(obj, CompiledGraph):
        fgraph = obj.fgraph
        roots = list(fgraph.outputs)
        stop_at = set(fgraph.inputs)
        n_out = len(obj.outputs)
        labels = [""] * n_out + [f" -> update of {obj.shared_vars[j]}"
                                 for j in obj.update_shared_index]
    elif isinstance(obj, Variable):
        roots, labels = [obj], [""]
    elif isinstance(obj, (list, tuple)) and all(isinstance(v, Variable) for v in obj):
        roots, labels = list(obj), [""] * len(obj)
    else:
        raise TypeError(f"debugprint: expected a variable, a list of variables or a Function, "
                        f"got {type(obj).__name__}")
    printer = _Printer(stream, stop_at)
    for var, label in zip(roots, labels):
        printer.tree(var, label)
    if file == "str":
        return stream.getvalue()
    return None


# ----------------------------------------------------------------------------
# graph_picture: the graph drawn with Graphviz

#: path suffix -> the format Graphviz's ``dot`` renders
_RENDERED_FORMATS = {".svg": "svg", ".png": "png", ".pdf": "pdf"}
#: path suffixes written as DOT source, which needs no ``dot`` program
_SOURCE_SUFFIXES = (".dot", ".gv")
#: Bounds on dot's effort: ``nslimit`` caps the network-simplex passes that
#: place nodes across, ``mclimit`` scales the crossing-reduction passes.  A
#: training graph's long edges (a weight read by the forward and the backward
#: pass) add thousands of virtual nodes: on a 270-node one dot took 5.6 s
#: unbounded, 1.3 s with these.  ``newrank`` ranks the whole graph at once
#: (clusters included): on a 202-step training graph of shape arithmetic
#: and long edges, 2.7 s instead of 4.4 s.
_GRAPH_ATTRS = {"fontsize": "10", "nslimit": "0.2", "mclimit": "0.5", "newrank": "true"}
#: how many characters of an op name, a fused expression or a constant a label shows
_LABEL_CHARS = 40

_NODE_STYLES = {
    "apply": dict(shape="box", style="rounded,filled", fillcolor="white", fontsize="10"),
    "view": dict(style="rounded,dashed,filled", color="blue", fillcolor="aliceblue"),
    "in place": dict(color="red", penwidth="2", fillcolor="mistyrose"),
    "input": dict(shape="ellipse", style="filled", fillcolor="lightblue", fontsize="10"),
    "shared": dict(shape="cylinder", style="filled", fillcolor="gold", fontsize="10"),
    "constant": dict(shape="box", style="filled", color="gray60", fillcolor="gray92",
                     fontsize="8", height="0.2", width="0.2", margin="0.03"),
    "output": dict(shape="invhouse", style="filled", fillcolor="palegreen", fontsize="10"),
    "lent output": dict(shape="invhouse", style="filled,dashed", fillcolor="khaki",
                        fontsize="10"),
    "inner input": dict(shape="circle", fontsize="8", width="0.3", margin="0"),
    "scalar": dict(shape="ellipse", fontsize="9", height="0.3"),
}

# Edge labels are ``xlabel``s: placed after the layout, they do not double the
# ranks as ``label``s do (which made dot several times slower on large graphs).
_EDGE_STYLES = {
    "destroyed": dict(xlabel="destroyed", color="red", fontcolor="red", penwidth="2.5",
                      style="bold"),
    "view": dict(xlabel="view", color="blue", fontcolor="blue", style="dashed"),
    # constraint=false: an update points back up at a root, and must not bend the layout
    "update": dict(xlabel="update", color="purple", fontcolor="purple", penwidth="2",
                   style="bold", constraint="false"),
}

_LEGEND_NODES = (
    ("in place", ["in place", "(writes into an input)"], ("apply", "in place")),
    ("view", ["view", "(aliases an input)"], ("apply", "view")),
    ("input", ["input"], ("input",)),
    ("shared", ["shared variable"], ("shared",)),
    ("constant", ["constant"], ("constant",)),
    ("output", ["output"], ("output",)),
    ("lent output", ["lent output", "Out(borrow=True)"], ("lent output",)),
)

#: the legend is a small graph using every mark: a shared variable updated in place, a view
_LEGEND_EDGES = (
    ("shared", "in place", "destroyed"),
    ("constant", "in place", None),
    ("in place", "shared", "update"),
    ("input", "view", "view"),
    ("in place", "output", None),
    ("view", "lent output", None),
)


class _Scene:
    """What to draw: named roots, labelled results and updates (value, shared variable)."""

    def __init__(self, roots, results, updates, stop_at=()):
        self.roots = roots        # (variable, name, extra label lines)
        self.results = results    # (variable, label, lent)
        self.updates = updates    # (update value, the shared variable it assigns)
        self.stop_at = set(stop_at)


def _function_scene(f) -> _Scene:
    """The compiled graph of ``f``: its inputs, shared variables, outputs and updates."""
    fg = f.fgraph
    n_in, n_out = len(f.inputs), len(f.outputs)
    roots = [(var, spec.name or f"input {i}",
              ["mutable"] if spec.mutable else ["borrowed"] if spec.borrow else [])
             for i, (var, spec) in enumerate(zip(fg.inputs[:n_in], f.inputs))]
    roots += [(var, var.name or f"shared {j}", []) for j, var in enumerate(fg.inputs[n_in:])]
    results = [(var, f"output {k}", spec.borrow)
               for k, (var, spec) in enumerate(zip(fg.outputs[:n_out], f.outputs))]
    updates = [(fg.outputs[n_out + k], fg.inputs[n_in + j])
               for k, j in enumerate(f.update_shared_index)]
    return _Scene(roots, results, updates, stop_at=fg.inputs)


def _scene_of(obj) -> _Scene:
    if isinstance(obj, CompiledGraph):
        return _function_scene(obj)
    if isinstance(obj, Variable):
        obj = [obj]
    if isinstance(obj, (list, tuple)) and all(isinstance(v, Variable) for v in obj):
        return _Scene([], [(v, f"output {k}", False) for k, v in enumerate(obj)], [])
    raise TypeError(f"graph_picture: expected a variable, a list of variables or a Function, "
                    f"got {type(obj).__name__}")


def _suffix_of(path) -> str | None:
    """The lower-case suffix of ``path`` (None for no path), or a ValueError."""
    if path is None:
        return None
    try:
        suffix = pathlib.Path(os.fspath(path)).suffix.lower()
    except TypeError:
        raise TypeError(f"graph_picture: path must be a str, a path or None, got "
                        f"{type(path).__name__}") from None
    if suffix not in _RENDERED_FORMATS and suffix not in _SOURCE_SUFFIXES:
        raise ValueError(f"graph_picture: cannot tell the format of {os.fspath(path)!r}: the "
                         f"path must end in {', '.join(_RENDERED_FORMATS)} (rendered with "
                         f"Graphviz's dot program) or {', '.join(_SOURCE_SUFFIXES)} (the DOT "
                         f"source)")
    return suffix


def _import_graphviz():
    try:
        import graphviz
    except ImportError as exc:
        raise ImportError("graph_picture needs the graphviz Python package: pip install "
                          "graphviz (or pip install -e \".[plot]\" in tenure's source "
                          "tree); rendering .svg, .png or .pdf also needs Graphviz's dot "
                          "program") from exc
    return graphviz


def _no_dot_error(path) -> RuntimeError:
    return RuntimeError(
        f"graph_picture: rendering {os.fspath(path)!r} needs Graphviz's `dot` program, which "
        "is not on PATH.  Install Graphviz: Debian/Ubuntu `sudo apt install graphviz`, "
        "macOS `brew install graphviz`, conda `conda install graphviz` (a .dot or .gv path "
        "writes the DOT source, which needs no `dot`)")


def _shorten(text: str, limit: int = _LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _escape(text: str) -> str:
    """``text`` as the inside of a quoted DOT string (``\\n`` is added between lines)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _type_text(var: Variable) -> str:
    if getattr(var, "weak", False):
        return f"Python {type(var.weak_value).__name__}"
    return str(var.type)


def _fused_composite(op):
    """The :class:`Composite` fused into ``op`` (an elementwise op or a fused
    reduction), or None."""
    inner = getattr(op, "composite", None) or getattr(op, "scalar_op", None)
    return inner if isinstance(inner, Composite) else None


def _expression(composite) -> str:
    """``exp(i0) * 2 + i0`` from ``Composite{exp(i0) * 2 + i0}``."""
    name = composite.name
    return name[len("Composite{"):-1] if name.startswith("Composite{") else name


def _mapped_inputs(mapping: dict) -> set[int]:
    return {i for inputs in mapping.values() for i in inputs}


def _is_shared(var: Variable) -> bool:
    return isinstance(var, SharedVariable)


class _Picture:
    """Builds the Digraph: a node per apply node and per root, and an edge per
    use of a variable, from the node that computes it (its owner, or the root
    itself) to the node that reads it.  Every step is a dictionary look-up,
    so drawing is linear in the size of the graph."""

    def __init__(self, graphviz, scene: _Scene, expand_composites: bool):
        self.graphviz = graphviz
        self.dot = graphviz.Digraph("tenure", graph_attr=_GRAPH_ATTRS,
                                    edge_attr={"fontsize": "8"})
        self.scene = scene
        self.expand = expand_composites
        self.ids: dict = {}

    def label(self, lines) -> str:
        return self.graphviz.nohtml("\\n".join(_escape(line) for line in lines if line))

    def new_id(self, key, prefix: str) -> str:
        self.ids[key] = ident = f"{prefix}{len(self.ids)}"
        return ident

    def draw(self, nodes) -> None:
        for var, name, extra in self.scene.roots:
            self.root(var, name, extra)
        for node in nodes:
            self.apply(node)
        for k, (var, label, lent) in enumerate(self.scene.results):
            self.result(k, var, label, lent)
        for value, shared in self.scene.updates:
            self.dot.edge(self.source(value), self.root(shared), **_EDGE_STYLES["update"])

    # -- roots ------------------------------------------------------------------
    def root(self, var: Variable, name: str | None = None, extra=()) -> str:
        if var in self.ids:
            return self.ids[var]
        ident = self.new_id(var, "v")
        if isinstance(var, Constant):
            self.dot.node(ident, self.label([_shorten(str(var))]), tooltip=_type_text(var),
                          **_NODE_STYLES["constant"])
        elif _is_shared(var):
            self.dot.node(ident, self.label([name or var.name or "shared", _type_text(var)]),
                          **_NODE_STYLES["shared"])
        else:
            self.dot.node(ident, self.label([name or var.name or "input", _type_text(var),
                                             *extra]), **_NODE_STYLES["input"])
        return ident

    def source(self, var: Variable) -> str:
        """The node a variable's value comes from."""
        if var.owner is None or var in self.scene.stop_at:
            return self.root(var)
        return self.ids[var.owner]

    # -- apply nodes --------------------------------------------------------------
    def apply(self, node) -> None:
        ident = self.new_id(node, "n")
        composite = _fused_composite(node.op)
        expanded = composite is not None and self.expand
        lines = _apply_lines(node, composite, show_expression=not expanded)
        style = _apply_style(node.op)
        if expanded:
            targets = self.expanded_composite(ident, composite, lines, style)
        else:
            self.dot.node(ident, self.label(lines), **style)
            targets = [ident] * len(node.inputs)
        destroyed = _mapped_inputs(node.op.destroy_map)
        viewed = _mapped_inputs(node.op.view_map)
        for i, (var, target) in enumerate(zip(node.inputs, targets)):
            kind = "destroyed" if i in destroyed else "view" if i in viewed else None
            self.use(var, target, kind)

    def use(self, var: Variable, target: str, kind: str | None) -> None:
        attrs = dict(_EDGE_STYLES[kind]) if kind else {}
        owner = var.owner
        if owner is not None and len(owner.outputs) > 1 and var not in self.scene.stop_at:
            attrs["xlabel"] = " ".join(filter(None, [f"out {var.index}", attrs.get("xlabel")]))
        self.dot.edge(self.source(var), target, **attrs)

    def expanded_composite(self, ident: str, composite, lines, style) -> list[str]:
        """Draw the fused node as a cluster holding its scalar graph: an inner
        input per outer input, a node per step, the apply node last.  Returns
        the inner inputs, where the outer inputs' edges go."""
        with self.dot.subgraph(name=f"cluster_{ident}") as cluster:
            cluster.attr(label=self.label(["fused: " + _shorten(_expression(composite))]),
                         style="rounded,dashed", color="gray50", fontsize="9")
            inner = [f"{ident}_i{k}" for k in range(composite.nin)]
            for k, name in enumerate(inner):
                cluster.node(name, f"i{k}", **_NODE_STYLES["inner input"])
            steps: list[str] = []
            for j, (op, refs) in enumerate(composite.steps):
                step = f"{ident}_s{j}"
                cluster.node(step, self.label([op.name]), **_NODE_STYLES["scalar"])
                for r, (kind, value) in enumerate(refs):
                    if kind == "c":
                        const = f"{step}_c{r}"
                        cluster.node(const, self.label([_shorten(repr(value))]),
                                     **_NODE_STYLES["constant"])
                        cluster.edge(const, step)
                    else:
                        cluster.edge(inner[value] if kind == "i" else steps[value], step)
                steps.append(step)
            cluster.node(ident, self.label(lines), **style)
            cluster.edge(steps[-1], ident)
        return inner

    # -- results --------------------------------------------------------------------
    def result(self, k: int, var: Variable, label: str, lent: bool) -> None:
        ident = f"out{k}"
        kind = "lent output" if lent else "output"
        self.dot.node(ident, self.label([label, var.name, "lent (borrow=True)" if lent else ""]),
                      **_NODE_STYLES[kind])
        self.dot.edge(self.source(var), ident)

    # -- legend ---------------------------------------------------------------------
    def legend(self) -> None:
        with self.dot.subgraph(name="cluster_legend") as legend:
            legend.attr(label="legend", fontsize="9", style="rounded", color="gray70")
            for name, lines, styles in _LEGEND_NODES:
                style = {key: value for s in styles for key, value in _NODE_STYLES[s].items()}
                style["fontsize"] = "8"
                legend.node(f"legend {name}", self.label(lines), **style)
            for tail, head, kind in _LEGEND_EDGES:
                attrs = _EDGE_STYLES[kind] if kind else {}
                legend.edge(f"legend {tail}", f"legend {head}", **attrs)


def _apply_lines(node, composite, show_expression: bool) -> list:
    """An apply node's label: op, fused expression, output types, memory marks."""
    title = str(node.op)
    expression = None
    if composite is not None:
        title = title.replace(composite.name, "Composite")
        expression = _shorten(_expression(composite)) if show_expression else None
    types = ", ".join(f"{o.name}: {_type_text(o)}" if o.name else _type_text(o)
                      for o in node.outputs)
    marks = [mark for mark, mapping in (("in place", node.op.destroy_map),
                                        ("view", node.op.view_map)) if mapping]
    return [_shorten(title), expression, _shorten(types), ", ".join(marks)]


def _apply_style(op) -> dict:
    style = dict(_NODE_STYLES["apply"])
    if op.view_map:
        style.update(_NODE_STYLES["view"])
    if op.destroy_map:  # the red outline wins; a view that also writes stays dashed
        style.update(_NODE_STYLES["in place"])
    return style


def _write_picture(graphviz, dot, path, suffix: str) -> None:
    """Write exactly ``path``: the DOT source, or what ``dot`` renders."""
    if suffix in _SOURCE_SUFFIXES:
        pathlib.Path(path).write_text(dot.source, encoding="utf-8")
        return
    if shutil.which("dot") is None:
        raise _no_dot_error(path)
    try:
        data = dot.pipe(format=_RENDERED_FORMATS[suffix], quiet=True)
    except graphviz.ExecutableNotFound as exc:
        raise _no_dot_error(path) from exc
    except graphviz.CalledProcessError as exc:
        # dot's stderr can run to thousands of lines: its first line says what failed.
        stderr = exc.stderr
        stderr = (stderr.decode(errors="replace") if isinstance(stderr, bytes)
                  else str(stderr or "")).strip()
        first = stderr.splitlines()[0] if stderr else f"exit status {exc.returncode}"
        raise RuntimeError(f"graph_picture: Graphviz's dot failed to render "
                           f"{os.fspath(path)!r}: {first} (a .dot path writes the DOT source "
                           f"without rendering it)") from None
    pathlib.Path(path).write_bytes(data)


def graph_picture(obj, path=None, *, expand_composites: bool = False, legend: bool = True):
    """Draw a graph with Graphviz: a compiled :class:`Function` (its graph after
    rewrites, with its inputs, shared variables, outputs and updates), a
    variable or a list of variables (the graph that computes them).

    Memory is marked: ops that write into an input (``destroy_map``) have a
    red outline and say "in place", and the overwritten input's edge is bold
    red, labelled "destroyed"; views (``view_map``) are dashed and blue.
    Shared variables are yellow cylinders; each update is a purple edge
    labelled "update" to the shared variable it assigns; lent outputs
    (``Out(borrow=True)``) say so.  A fused ``Composite`` node shows its scalar
    expression; ``expand_composites=True`` draws its scalar graph inside a
    cluster instead.  ``legend=False`` leaves out the legend.

    ``path``: ``None`` writes nothing; a path ending in ``.svg``, ``.png`` or
    ``.pdf`` is rendered by Graphviz's ``dot`` program (RuntimeError saying how
    to install it when it is missing); ``.dot`` or ``.gv`` writes the DOT
    source.  The file written is exactly ``path``.  Returns the
    ``graphviz.Digraph`` in every case.  Needs the ``graphviz`` package
    (``pip install -e ".[plot]"`` in tenure's source tree).
    """
    scene = _scene_of(obj)
    suffix = _suffix_of(path)
    graphviz = _import_graphviz()
    picture = _Picture(graphviz, scene, expand_composites)
    picture.draw(io_toposort(scene.stop_at, [var for var, _, _ in scene.results]
                             + [value for value, _ in scene.updates]))
    if legend:
        picture.legend()
    if path is not None:
        _write_picture(graphviz, picture.dot, path, suffix)
    return picture.dot
