"""graph_picture: the compiled graph drawn with Graphviz, memory marked.

The DOT source is checked through a small parser (nodes with their
attributes, edges with theirs), so the tests say what is connected to what
and how it is drawn, not how the text is laid out.  Rendering needs
Graphviz's ``dot`` program: those tests skip without it (and fail in CI,
which installs it).
"""

import re
import shutil
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.ops.composite import Composite
from tests.helpers import need, need_module

graph_picture = tn.printing.graph_picture


@pytest.fixture
def graphviz():
    return need_module("graphviz", 'pip install -e ".[plot]"')


@pytest.fixture
def dot_program(graphviz):
    need(shutil.which("dot") is not None,
         "Graphviz's dot program is not installed (apt install graphviz)")


# ----------------------------------------------------------------------------
# Reading the DOT source back

_ID = r'(?:"(?:[^"\\]|\\.)*"|[^\s\[\]]+)'
_NODE = re.compile(rf"^\s*({_ID}) \[(.*)\]$")
_EDGE = re.compile(rf"^\s*({_ID}) -> ({_ID})(?: \[(.*)\])?$")
_ATTR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s"]+)')


def _unquote(text):
    if text.startswith('"'):
        return text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return text


def _attrs(text):
    return {key: _unquote(value) for key, value in _ATTR.findall(text or "")}


class Dot:
    """Nodes ``{id: attrs}`` and edges ``[(tail, head, attrs)]`` of a DOT source,
    and the clusters ``{name: set of node ids}``."""

    def __init__(self, source):
        self.nodes, self.edges, self.clusters = {}, [], {}
        current = []
        for line in source.splitlines():
            stripped = line.strip()
            if stripped.startswith("subgraph "):
                current.append(stripped.split()[1])
                self.clusters[current[-1]] = set()
            elif stripped == "}" and current:
                current.pop()
            elif match := _EDGE.match(line):
                self.edges.append((_unquote(match[1]), _unquote(match[2]), _attrs(match[3])))
            elif match := _NODE.match(line):
                ident = _unquote(match[1])
                if ident in ("graph", "node", "edge"):
                    continue
                self.nodes[ident] = _attrs(match[2])
                for name in current:
                    self.clusters[name].add(ident)

    def label(self, ident):
        return self.nodes[ident].get("label", ident).replace("\\n", "\n")

    def find(self, *words, outside_legend=True):
        """The ids of the nodes whose label contains every word."""
        legend = self.clusters.get("cluster_legend", set()) if outside_legend else set()
        return [i for i in self.nodes if i not in legend
                and all(w in self.label(i) for w in words)]

    def one(self, *words):
        found = self.find(*words)
        assert len(found) == 1, (words, [self.label(i) for i in found])
        return found[0]

    def named(self, name):
        """The one node (outside the legend) whose label's first line is ``name``."""
        found = [i for i in self.find(name) if self.label(i).split("\n")[0] == name]
        assert len(found) == 1, (name, found)
        return found[0]

    def edges_between(self, tail, head):
        return [attrs for t, h, attrs in self.edges if t == tail and h == head]


def _svg_texts(path):
    """``{title: [texts]}`` of an SVG that dot drew: a node's title is its id,
    an edge's ``tail->head``."""
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    drawn = {}
    for group in root.iter():
        if not group.tag.endswith("g") or group.get("class") not in ("node", "edge"):
            continue
        title = next(c.text for c in group if c.tag.endswith("title"))
        drawn[title] = [c.text for c in group.iter() if c.tag.endswith("text")]
    return drawn


def _dot(obj, **kwargs):
    return Dot(graph_picture(obj, **kwargs).source)


def _destroyers(f):
    return [node for node in f.fgraph.apply_nodes if node.op.destroy_map]


def _update_function(mode):
    x = tn.vector("x")
    w = tn.shared(np.zeros(3), name="w")
    return tn.function([x], [], updates=[(w, w + x)], mode=mode)


# ----------------------------------------------------------------------------
# What is drawn


def test_in_place_update_marks_the_node_the_destroyed_input_and_the_update(graphviz, mode):
    f = _update_function(mode)
    assert [str(n.op) for n in _destroyers(f)] == ["add_inplace[0<-0]"]  # what is drawn
    dot = _dot(f)
    node = dot.one("add_inplace")
    assert "in place" in dot.label(node)
    assert dot.nodes[node]["color"] == "red"
    shared = dot.named("w")
    assert dot.nodes[shared]["shape"] == "cylinder"
    # the destroyed input: bold red, labelled
    (into,) = dot.edges_between(shared, node)
    assert into["xlabel"] == "destroyed" and into["color"] == "red" and "bold" in into["style"]
    # the update: from the value back to the shared variable it assigns
    (update,) = dot.edges_between(node, shared)
    assert update["xlabel"] == "update"
    # the other input is read, not destroyed
    (read,) = dot.edges_between(dot.named("x"), node)
    assert "xlabel" not in read and read.get("color") != "red"


def test_mutable_input_overwritten_in_place_is_drawn_destroyed(graphviz, mode):
    x = tn.vector("x")
    f = tn.function([tn.In(x, mutable=True)], tn.exp(x), mode=mode)
    assert [str(n.op) for n in _destroyers(f)] == ["exp_inplace[0<-0]"]
    dot = _dot(f)
    source = dot.named("x")
    assert "mutable" in dot.label(source)
    (edge,) = dot.edges_between(source, dot.one("exp_inplace", "in place"))
    assert edge["xlabel"] == "destroyed"


def test_view_is_marked_and_a_lent_output_says_so(graphviz, mode):
    m = tn.matrix("m")
    f = tn.function([m], [tn.Out(m.T, borrow=True), m.sum(axis=0)], mode=mode)
    dot = _dot(f)
    view = dot.one("DimShuffle", "view")
    assert "dashed" in dot.nodes[view]["style"]
    (edge,) = dot.edges_between(dot.named("m"), view)
    assert edge["xlabel"] == "view" and "dashed" in edge["style"]
    total = dot.one("sum")
    assert "view" not in dot.label(total) and "in place" not in dot.label(total)
    lent, fresh = dot.named("output 0"), dot.named("output 1")
    assert "lent" in dot.label(lent) and "lent" not in dot.label(fresh)
    assert dot.edges_between(view, lent) and dot.edges_between(total, fresh)


def test_composite_is_one_node_showing_its_expression_by_default(graphviz, mode):
    x = tn.vector("x")
    f = tn.function([x], tn.exp(x) * 2 + x, mode=mode)
    (fused,) = [n for n in f.fgraph.apply_nodes]
    assert isinstance(fused.op.scalar_op, Composite)
    dot = _dot(f)
    node = dot.one("Composite", "exp(i0) * 2 + i0")
    assert dot.edges_between(dot.named("x"), node)
    assert not [c for c in dot.clusters if c != "cluster_legend"]
    assert not dot.find("exp\n") and not dot.find("mul")


def test_expand_composites_draws_the_scalar_graph_in_a_cluster(graphviz, mode):
    x = tn.vector("x")
    f = tn.function([x], [tn.exp(x) * 2 + x, tn.sin(x).sum()], mode=mode)
    dot = _dot(f, expand_composites=True)
    clusters = {name: ids for name, ids in dot.clusters.items() if name != "cluster_legend"}
    assert len(clusters) == 2  # the Composite and the fused reduction's Composite
    labels = {name: sorted(dot.label(i) for i in ids) for name, ids in clusters.items()}
    elemwise = next(name for name, found in labels.items() if "exp" in found)
    assert {"exp", "mul", "add", "i0", "2"} <= set(labels[elemwise])
    ids = clusters[elemwise]
    inner_input = next(i for i in ids if dot.label(i) == "i0")
    # the outer input feeds the inner input, which feeds exp and add
    assert dot.edges_between(dot.named("x"), inner_input)
    readers = {dot.label(h) for t, h, _ in dot.edges if t == inner_input}
    assert readers == {"exp", "add"}
    # the fused node itself is in the cluster and feeds the output
    fused = next(i for i in ids if dot.label(i).startswith("Composite"))
    assert dot.edges_between(fused, dot.named("output 0"))
    reduction = next(name for name, found in labels.items() if "sin" in found)
    assert any(label.startswith("sum") for label in labels[reduction])


def test_long_fused_expression_is_shortened(graphviz, mode):
    x = tn.vector("x")
    y = x
    for _ in range(12):
        y = tn.exp(tn.sin(y))
    f = tn.function([x], y, mode=mode)
    dot = _dot(f)
    (node,) = dot.find("Composite")
    expression = dot.label(node).split("\n")[1]
    assert expression.endswith("…") and len(expression) <= 40


def test_variables_draw_the_graph_that_computes_them(graphviz):
    x = tn.matrix("x")
    y = tn.vector("y", dtype="float32")
    out = tn.exp(x) + y
    dot = _dot(out)
    exp, add = dot.one("exp"), dot.one("add")
    assert dot.edges_between(dot.named("x"), exp)
    assert "float64(?, ?)" in dot.label(dot.named("x"))
    assert "float32(?,)" in dot.label(dot.named("y"))
    assert dot.edges_between(exp, add)
    assert dot.edges_between(dot.named("y"), add)
    assert dot.edges_between(add, dot.named("output 0"))
    # a list: an output node for each; what they share is drawn once
    dot = _dot([out, out.owner.inputs[0]])
    exp, add = dot.one("exp"), dot.one("add")
    assert dot.edges_between(add, dot.named("output 0"))
    assert dot.edges_between(exp, dot.named("output 1"))


def test_constants_are_small_and_shared_variables_distinct(graphviz):
    x = tn.vector("x")
    s = tn.shared(np.ones(3), name="s")
    dot = _dot(x * 3.5 + s)
    constant = dot.one("3.5")
    assert float(dot.nodes[constant]["fontsize"]) < float(dot.nodes[dot.one("mul")]["fontsize"])
    assert dot.nodes[dot.named("s")]["shape"] == "cylinder"
    assert dot.nodes[dot.named("x")]["shape"] != "cylinder"


def test_legend_explains_the_marks_and_can_be_left_out(graphviz):
    x = tn.vector("x")
    dot = _dot(tn.exp(x))
    legend = dot.clusters["cluster_legend"]
    labels = " ".join(dot.label(i) for i in legend)
    for word in ("in place", "view", "shared variable", "constant", "lent output"):
        assert word in labels
    marks = {attrs.get("xlabel") for t, h, attrs in dot.edges if t in legend}
    assert {"destroyed", "view", "update"} <= marks
    assert "cluster_legend" not in _dot(tn.exp(x), legend=False).clusters


def test_returns_a_digraph_without_rendering(graphviz, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x = tn.vector("x")
    picture = graph_picture(tn.exp(x))
    assert isinstance(picture, graphviz.Digraph)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------
# Writing files


def test_svg_is_written_at_exactly_the_path(dot_program, tmp_path, mode):
    f = _update_function(mode)
    path = tmp_path / "graph.svg"
    picture = graph_picture(f, path)
    assert list(tmp_path.iterdir()) == [path]
    assert "add_inplace" in picture.source
    dot = Dot(picture.source)
    node, shared = dot.one("add_inplace"), dot.named("w")
    drawn = _svg_texts(path)
    assert drawn[node] == ["add_inplace[0<-0]", "float64(?,)", "in place"]
    assert drawn[f"{shared}->{node}"] == ["destroyed"]
    assert drawn[f"{node}->{shared}"] == ["update"]


def test_png_and_pdf_are_rendered(dot_program, tmp_path):
    x = tn.vector("x")
    graph_picture(tn.exp(x), str(tmp_path / "graph.png"))
    graph_picture(tn.exp(x), tmp_path / "graph.PDF")
    assert (tmp_path / "graph.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert (tmp_path / "graph.PDF").read_bytes().startswith(b"%PDF")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.PDF", "graph.png"]


def test_labels_with_quotes_and_backslashes_render(dot_program, tmp_path):
    x = tn.vector('say "hi" \\ there')
    path = tmp_path / "graph.svg"
    picture = graph_picture(tn.exp(x), path)
    drawn = _svg_texts(path)
    assert drawn[Dot(picture.source).named('say "hi" \\ there')][0] == 'say "hi" \\ there'


def test_dot_source_needs_no_dot_program(graphviz, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    x = tn.vector("x")
    for name in ("graph.dot", "graph.gv"):
        picture = graph_picture(tn.exp(x), tmp_path / name)
        assert (tmp_path / name).read_text(encoding="utf-8") == picture.source
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.dot", "graph.gv"]


def test_missing_dot_program_says_how_to_install_it(graphviz, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    x = tn.vector("x")
    with pytest.raises(RuntimeError, match="apt install graphviz") as info:
        graph_picture(tn.exp(x), tmp_path / "graph.svg")
    message = str(info.value)
    assert "dot" in message and "brew install graphviz" in message
    assert "conda install graphviz" in message
    assert list(tmp_path.iterdir()) == []


def test_dot_vanishing_before_the_render_is_the_same_clear_error(graphviz, tmp_path,
                                                                 monkeypatch):
    # shutil.which finds a dot that is gone by the time graphviz runs it
    monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: "/gone/dot")
    monkeypatch.setenv("PATH", str(tmp_path))
    x = tn.vector("x")
    with pytest.raises(RuntimeError, match="apt install graphviz"):
        graph_picture(tn.exp(x), tmp_path / "graph.png")
    assert list(tmp_path.iterdir()) == []


def test_missing_graphviz_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "graphviz", None)  # import graphviz now fails
    x = tn.vector("x")
    with pytest.raises(ImportError, match=re.escape('pip install graphviz')):
        graph_picture(tn.exp(x))


# ----------------------------------------------------------------------------
# Bad input


def test_bad_object_is_a_type_error(graphviz):
    with pytest.raises(TypeError, match="graph_picture.*Function.*got int"):
        graph_picture(3)
    with pytest.raises(TypeError, match="got list"):
        graph_picture([tn.vector("x"), 3])


def test_unknown_suffix_is_a_value_error_naming_the_accepted_ones(graphviz, tmp_path):
    x = tn.vector("x")
    with pytest.raises(ValueError, match=r"\.jpgx") as info:
        graph_picture(tn.exp(x), tmp_path / "graph.jpgx")
    for suffix in (".svg", ".png", ".pdf", ".dot", ".gv"):
        assert suffix in str(info.value)
    with pytest.raises(ValueError):
        graph_picture(tn.exp(x), tmp_path / "graph")
    assert list(tmp_path.iterdir()) == []
