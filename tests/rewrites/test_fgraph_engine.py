"""FunctionGraph (clients, features, validated changes with rollback) and the
rewrite engine (registry, phases, queries)."""

import numpy as np
import pytest

import tenure as tn
from tenure.rewrites import engine
from tenure.rewrites.engine import Query, register_node_rewrite, rewrite_graph
from tenure.symbolic.fgraph import OUTPUT, Feature, FunctionGraph, InconsistencyError


def small_graph():
    x = tn.vector("x")
    a = tn.exp(x)
    b = a * 2
    c = a + b
    return x, a, b, c, FunctionGraph([x], [c])


class Recorder(Feature):
    def __init__(self, refuse=None):
        self.events = []
        self.refuse = refuse

    def on_attach(self, fgraph):
        self.events.append("attach")

    def on_detach(self, fgraph):
        self.events.append("detach")

    def on_import(self, fgraph, node, reason):
        self.events.append(("import", str(node.op)))

    def on_prune(self, fgraph, node, reason):
        self.events.append(("prune", str(node.op)))

    def on_change_input(self, fgraph, client, i, old, new, reason):
        self.events.append(("change", i, reason))

    def validate(self, fgraph):
        if self.refuse and self.refuse(fgraph):
            raise InconsistencyError("refused by the test feature")


class TestFunctionGraph:
    def test_clients(self):
        x, a, b, c, fg = small_graph()
        assert sorted(i for _, i in fg.clients[a]) == [0, 0]  # read by mul and add
        assert fg.clients[c] == [(OUTPUT, 0)]
        assert {n.op.scalar_op.name for n in fg.apply_nodes} == {"exp", "mul", "add"}

    def test_missing_input_is_named(self):
        x, y = tn.vector("x"), tn.vector("y")
        with pytest.raises(ValueError, match="y is needed"):
            FunctionGraph([x], [x + y])

    def test_replace_prunes_what_nothing_reads_and_notifies(self):
        x, a, b, c, fg = small_graph()
        rec = Recorder()
        fg.attach_feature(rec)
        fg.replace(b, tn.sin(a), reason="test")
        assert b not in fg.variables
        assert ("prune", "mul") in rec.events and ("import", "sin") in rec.events
        assert ("change", 1, "test") in rec.events
        assert {n.op.scalar_op.name for n in fg.apply_nodes} == {"exp", "sin", "add"}
        fg.remove_feature(rec)
        assert rec.events[-1] == "detach"

    def test_replace_checks_types(self):
        x, a, b, c, fg = small_graph()
        with pytest.raises(TypeError, match="cannot replace"):
            fg.replace(b, tn.matrix("m"))
        with pytest.raises(ValueError, match="not in this graph"):
            fg.replace(tn.vector("other"), x)

    def test_refused_change_is_rolled_back(self):
        x, a, b, c, fg = small_graph()
        fg.attach_feature(Recorder(refuse=lambda g: any(
            getattr(n.op, "scalar_op", None) is not None and n.op.scalar_op.name == "sin"
            for n in g.apply_nodes)))
        nodes_before = set(fg.apply_nodes)
        clients_before = {v: list(cs) for v, cs in fg.clients.items()}
        assert not fg.replace_all_validate([(b, tn.sin(a))], reason="try")
        assert set(fg.apply_nodes) == nodes_before
        assert b in fg.variables and c.owner.inputs[1] is b
        assert {v: sorted(map(str, cs)) for v, cs in fg.clients.items() if cs} == \
            {v: sorted(map(str, cs)) for v, cs in clients_before.items() if cs}
        assert fg.replace_all_validate([(b, tn.cos(a))])  # an accepted one goes through

    def test_compiled_result_after_replacements(self):
        x, a, b, c, fg = small_graph()
        fg.replace(b, tn.sin(a))
        f = tn.function([x], fg.outputs[0])
        np.testing.assert_allclose(f(np.zeros(2)), [1 + np.sin(1.0)] * 2)


class TestEngine:
    def test_unknown_phase_and_duplicate_names(self):
        with pytest.raises(ValueError, match="unknown phase"):
            register_node_rewrite("nowhere")(lambda fg, node: None)
        with pytest.raises(ValueError, match="already registered"):
            register_node_rewrite("canonicalize", name="merge")(lambda fg, node: None)

    def test_every_rewrite_is_named_phased_and_tagged(self):
        rewrites = engine.registered_rewrites()
        assert {"merge", "constant_folding", "fuse_elemwise", "elemwise_inplace", "gemm",
                "log1p"} <= set(rewrites)
        for r in rewrites.values():
            assert r.phase in engine.PHASES and r.kind in ("node", "graph")

    def test_query_selection(self):
        rewrites = engine.registered_rewrites()
        default = Query()
        assert default.selects(rewrites["fuse_elemwise"])
        assert not Query(exclude=frozenset({"fusion"})).selects(rewrites["fuse_elemwise"])
        assert not Query(exclude=frozenset({"inplace"})).selects(rewrites["elemwise_inplace"])
        only = Query(include=frozenset({"merge"}), only_included=True)
        assert only.selects(rewrites["merge"]) and not only.selects(rewrites["fuse_elemwise"])

    def test_mode_rejects_unknown_names(self):
        with pytest.raises(ValueError, match="unknown rewrite name or tag 'fusoin'"):
            tn.Mode(exclude=["fusoin"])
        with pytest.raises(TypeError, match="must be a list of names"):
            tn.Mode(exclude="fusion")
        with pytest.raises(ValueError, match="rewrites must be one of"):
            tn.Mode(rewrites="fast")

    def test_presets(self):
        x = tn.vector("x")
        expr = tn.exp(x) * 1
        assert tn.function([x], expr, mode="fast_compile").rewrites_applied == []
        assert tn.function([x], expr, mode=tn.Mode(rewrites="none")).rewrites_applied == []
        assert "mul_by_one" in tn.function([x], expr).rewrites_applied
        assert tn.function([x], expr, mode=tn.Mode(rewrites="none", include=["mul_by_one"])
                           ).rewrites_applied == ["mul_by_one"]
        # PyTensor's names for the presets (its tests pass mode="FAST_RUN")
        assert tn.function([x], expr, mode="FAST_COMPILE").rewrites_applied == []
        assert "mul_by_one" in tn.function([x], expr, mode="FAST_RUN").rewrites_applied

    def test_rewrites_that_never_settle_are_stopped(self, monkeypatch):
        x = tn.vector("x")
        fg = FunctionGraph([x], [tn.exp(x)])

        def flip(fgraph, node):  # exp -> sin -> exp -> ... forever
            op = getattr(node.op, "scalar_op", None)
            if op is not None and op.name in ("exp", "sin"):
                return [(tn.sin if op.name == "exp" else tn.exp)(node.inputs[0])]
            return None

        monkeypatch.setattr(engine, "MAX_PASSES", 5)
        rewrite = engine.Rewrite("flip", "canonicalize", flip, frozenset({"default"}), "node")
        monkeypatch.setitem(engine._REGISTRY, "flip", rewrite)
        with pytest.raises(RuntimeError, match="did not settle after 5 passes"):
            rewrite_graph(fg, Query(include=frozenset({"flip"}), only_included=True))
