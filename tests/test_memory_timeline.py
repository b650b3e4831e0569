"""The memory timeline (tenure/linkers/timeline.py) and its picture
(tenure/memory_plot.py): the bands add up to the report's numbers exactly,
and each buffer is drawn as the plan holds it."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out
from tenure.linkers.timeline import KINDS, band_polygons, byte_ticks, format_bytes
from tests.helpers import need_module

PLOT_EXTRA = 'pip install -e ".[plot]"'

#: the buffers this file sees handed on are what freeing intermediates gives
pytestmark = pytest.mark.usefixtures("freeing_intermediates")


def training_step(mode, budget=None, batch=256):
    """A two-layer training step: gemms, a bias, in-place updates of three
    shared variables, a borrowed input and a borrowed output."""
    rng = np.random.default_rng(0)
    x, y = tn.matrix("x"), tn.matrix("y")
    w1 = tn.shared(rng.standard_normal((32, 128)) * 0.1, name="w1")
    b1 = tn.shared(np.zeros(128), name="b1")
    w2 = tn.shared(rng.standard_normal((128, 4)) * 0.1, name="w2")
    h = tn.tanh(x @ w1 + b1)
    loss = ((h @ w2 - y) ** 2).mean()
    params = [w1, b1, w2]
    grads = tn.grad(loss, params)
    mode = tn.Mode(linker=mode.linker, activation_memory_budget=budget)
    f = tn.function([In(x, borrow=True), y], Out(loss, borrow=True),
                    updates=[(p, p - 0.1 * g) for p, g in zip(params, grads)], mode=mode,
                    name=f"step (budget {budget})")
    return f, [rng.standard_normal((batch, 32)), rng.standard_normal((batch, 4))]


def chain(mode, n=20_000):
    """exp, sin, cos: with no rewrites, cos and mul take the dead buffers of
    exp and sin (the plan hands on buffers of 64 KiB and more)."""
    x = tn.vector("x")
    c = tn.cos(tn.sin(tn.exp(x)))
    f = tn.function([x], [(c * 2).sum(), tn.tanh(c)],
                    mode=tn.Mode(linker=mode.linker, rewrites="none"))
    return f, [np.ones(n)]


def segments(timeline, kind=None):
    return [(band, seg) for band in timeline.bands for seg in band.segments
            if kind is None or seg.kind == kind]


class TestBandsAddUp:
    def test_stack_is_the_predicted_bytes_at_every_step(self, mode):
        f, args = training_step(mode)
        report = f.memory_report(*args, print_report=False)
        timeline = f.memory_timeline(*args)
        assert [timeline.height(s) for s in range(len(timeline.steps))] == \
            list(report.predicted_by_step)
        assert timeline.predicted_peak == report.predicted_peak
        assert max(timeline.height(s) for s in range(len(timeline.steps))) == \
            report.predicted_peak
        assert timeline.steps == tuple(r.op for r in _first_records(report))

    def test_bands_never_overlap(self, mode):
        f, args = training_step(mode)
        timeline = f.memory_timeline(*args)
        for step in range(len(timeline.steps)):
            spans = sorted((b.lower[step - b.start], b.upper(step)) for b in timeline.bands
                           if b.start <= step <= b.stop)
            for (_, top), (bottom, _) in zip(spans, spans[1:]):
                assert top <= bottom, f"bands overlap at step {step}: {spans}"

    def test_held_region_is_inputs_and_shared_values(self, mode):
        f, args = training_step(mode)
        timeline = f.memory_timeline(*args)
        held = {b.name: b for b in timeline.bands if b.region == "held"}
        expected = {"x": args[0].nbytes, "y": args[1].nbytes}
        expected.update({v.name: v.get_value(borrow=True).nbytes for v in f.shared_vars})
        assert {name: held[name].nbytes for name in expected} == expected
        assert held["x"].segments[0].kind == "borrowed input"
        assert held["y"].segments[0].kind == "input"
        assert {held[v.name].segments[0].kind for v in f.shared_vars} == {"shared variable"}
        assert all(b.upper(b.start) <= 0 for b in held.values())

    def test_timeline_of_a_report_equals_the_function_s(self, mode):
        f, args = training_step(mode)
        report = f.memory_report(*args, print_report=False)
        kinds = ["borrowed input", "input"] + ["shared variable"] * 3
        rebuilt = report.timeline(kinds, ["lent output", "", "", ""])
        assert rebuilt.bands == f.memory_timeline(*args).bands


class TestKinds:
    def test_an_in_place_update_is_drawn_as_in_place(self, mode):
        f, args = training_step(mode)
        timeline = f.memory_timeline(*args)
        destroyers = {i for i, step in enumerate(f._thunk.plan_for(
            _values(f, args)).steps) if step.node.op.destroy_map}
        assert destroyers, "the training step has in-place steps"
        in_place = segments(timeline, "in place")
        assert {seg.start for _, seg in in_place} <= destroyers
        # the update of w2 overwrites w2's own storage: its band turns orange there
        w2 = next(b for b in timeline.bands if b.name == "w2")
        assert [s.kind for s in w2.segments] == ["shared variable", "in place"]
        assert timeline.steps[w2.segments[1].start].startswith("gemm")

    def test_a_lent_output(self, mode):
        f, args = training_step(mode)
        timeline = f.memory_timeline(*args)
        lent = segments(timeline, "lent output")
        assert [seg.variable for _, seg in lent] == [str(f.fgraph.outputs[0])]

    def test_handed_on_buffers_are_reused(self, mode):
        f, args = chain(mode)
        timeline = f.memory_timeline(*args)
        reused = [(band.name, seg.variable) for band, seg in segments(timeline, "reused")]
        assert reused == [("exp.0", "cos.0"), ("sin.0", "mul.0")]
        # an output is drawn as an output, however its buffer was made
        outputs = {seg.variable: seg.how for _, seg in segments(timeline, "output")}
        assert outputs == {"tanh.0": "reused", "sum{axis=(0,)}.0": "new"}
        assert len([b for b in timeline.bands if b.region == "call"]) == 3

    def test_a_buffer_waiting_for_its_taker_is_held_aside(self, mode):
        x = tn.vector("x")
        c = tn.exp(x) * tn.sin(x)   # the peak: three big buffers
        b = x * (c.sum() * 2)       # takes c's dead buffer, a step after c dies
        f = tn.function([x], b.sum(), mode=tn.Mode(linker=mode.linker, rewrites="none"))
        timeline = f.memory_timeline(np.ones(20_000))
        band = next(b for b in timeline.bands if len(b.segments) > 1)
        assert [(s.kind, s.start, s.stop) for s in band.segments] == \
            [("new", 2, 3), ("held aside", 4, 4), ("reused", 5, 6)]
        assert timeline.steps[2] == timeline.steps[5] == "mul"

    def test_workspace_of_a_step(self, mode):
        x = tn.matrix("x")
        f = tn.function([x], x.sum(axis=0), mode=tn.Mode(linker=mode.linker))
        value = np.ones((300, 200))
        plan = f._thunk.plan_for([value])
        timeline = f.memory_timeline(value)
        planned = {i: s.workspace for i, s in enumerate(plan.steps) if s.workspace}
        drawn = {seg.start: band.nbytes for band, seg in segments(timeline, "workspace")}
        assert drawn == planned

    def test_every_kind_has_a_colour(self, mode):
        f, args = training_step(mode)
        assert set(f.memory_timeline(*args).kinds()) <= set(KINDS)


def test_a_backup_copy_is_a_band(mode):
    """A call that keeps a copy of shared storage to undo a failure after its
    commit point draws it (see tenure/linkers/commit.py)."""
    a = tn.shared(np.zeros(100_000), name="a")
    b = tn.shared(np.zeros(()), name="b")
    i = tn.scalar("i", dtype="int64")
    a1 = a + 1
    f = tn.function([i], [], updates=[(a, a1), (b, b + a1[i])], mode=mode)
    report = f.memory_report(3, print_report=False)
    timeline = f.memory_timeline(3)
    backups = [band for band in timeline.bands if band.segments[0].kind == "backup"]
    assert sorted((band.name, band.nbytes) for band in backups) == \
        [("backup of a", 800_000), ("backup of b", 8)]
    for band in backups:
        assert (band.start, band.stop) == (report.backups[0], len(timeline.steps) - 1)
    assert [timeline.height(s) for s in range(len(timeline.steps))] == \
        list(report.predicted_by_step)


class TestBudgets:
    def test_a_budget_lowers_the_drawn_peak(self, mode):
        (f, args), (g, _) = training_step(mode, batch=2048), training_step(mode, 0.0, 2048)
        full, budgeted = f.memory_timeline(*args), g.memory_timeline(*args)
        assert budgeted.predicted_peak < full.predicted_peak
        assert budgeted.predicted_peak == g.memory_report(*args, print_report=False) \
            .predicted_peak


class TestPlot:
    def test_polygons_follow_the_bands(self, mode):
        need_module("matplotlib", PLOT_EXTRA)
        from matplotlib.collections import PolyCollection
        f, args = training_step(mode)
        timeline = f.memory_timeline(*args)
        figure = tn.plot_memory(timeline)
        (ax,) = figure.axes
        (collection,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
        polygons = band_polygons(timeline)
        assert len(collection.get_paths()) == len(polygons)
        expected = [KINDS[seg.kind] for _, _, seg in polygons]
        got = ["#%02x%02x%02x" % tuple(round(c * 255) for c in rgba[:3])
               for rgba in collection.get_facecolors()]
        assert got == expected
        # each polygon's top edge at each step is the band's upper edge
        for path, (_, band, seg) in zip(collection.get_paths(), polygons):
            ys = path.vertices[:, 1]
            assert ys.max() == max(band.upper(s) for s in range(seg.start, seg.stop + 1))
        peaks = [line.get_ydata()[0] for line in ax.get_lines()]
        assert timeline.predicted_peak in peaks and timeline.measured_peak in peaks

    def test_two_plans_side_by_side_on_one_scale(self, mode, tmp_path):
        need_module("matplotlib", PLOT_EXTRA)
        (f, args), (g, _) = training_step(mode), training_step(mode, 0.0)
        figure = tn.plot_memory([f, g], args, tmp_path / "both.png", labels=["none", "0.0"])
        assert [ax.get_title() for ax in figure.axes] == ["none", "0.0"]
        assert figure.axes[0].get_ylim() == figure.axes[1].get_ylim()
        assert (tmp_path / "both.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def test_svg_is_written(self, mode, tmp_path):
        need_module("matplotlib", PLOT_EXTRA)
        f, args = training_step(mode)
        tn.plot_memory(f, args, tmp_path / "plan.svg")
        root = ElementTree.parse(tmp_path / "plan.svg").getroot()
        assert root.tag.endswith("svg")
        assert "predicted peak" in (tmp_path / "plan.svg").read_text()

    def test_the_call_changes_nothing_visible(self, mode):
        need_module("matplotlib", PLOT_EXTRA)
        f, args = training_step(mode)
        before = [v.get_value() for v in f.shared_vars]
        given = [a.copy() for a in args]
        tn.plot_memory(f, args)
        for v, old in zip(f.shared_vars, before):
            np.testing.assert_array_equal(v.get_value(), old)
        for a, old in zip(args, given):
            np.testing.assert_array_equal(a, old)

    def test_keyword_inputs(self, mode):
        need_module("matplotlib", PLOT_EXTRA)
        f, (x, y) = training_step(mode)
        figure = tn.plot_memory(f, {"x": x, "y": y})
        assert figure.axes


class TestErrors:
    def test_without_matplotlib_the_error_names_the_extra(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "matplotlib", None)
        x = tn.vector("x")
        f = tn.function([x], x * 2)
        with pytest.raises(ImportError, match=r"pip install matplotlib .*\.\[plot\]"):
            tn.plot_memory(f, [np.ones(3)])

    def test_bad_suffix(self):
        x = tn.vector("x")
        f = tn.function([x], x * 2)
        with pytest.raises(ValueError, match=r"\.png, \.svg, \.pdf"):
            tn.plot_memory(f, [np.ones(3)], "plan.jpeg")

    def test_bad_functions_and_inputs(self):
        x = tn.vector("x")
        f = tn.function([x], x * 2)
        with pytest.raises(TypeError, match="compiled function or a Timeline, got int"):
            tn.plot_memory(3, [np.ones(3)])
        with pytest.raises(ValueError, match="empty list"):
            tn.plot_memory([], [np.ones(3)])
        with pytest.raises(TypeError, match="inputs must be a list"):
            tn.plot_memory(f, 3)
        with pytest.raises(ValueError, match="2 labels for 1 functions"):
            tn.plot_memory(f, [np.ones(3)], labels=["a", "b"])


def test_byte_ticks_are_round():
    assert [format_bytes(t) for t in byte_ticks(0, 5 << 20)] == \
        ["0 B", "1.0 MiB", "2.0 MiB", "3.0 MiB", "4.0 MiB", "5.0 MiB"]
    assert byte_ticks(-250, 300) == [-200, -100, 0, 100, 200, 300]
    assert format_bytes(-1536) == "1.5 KiB"


def _values(f, args):
    return [spec.variable.type.filter(a) for spec, a in zip(f.inputs, args)] + \
        [c.value for c in f._containers]


def _first_records(report):
    """One record per step (the first output's)."""
    seen, result = set(), []
    for record in report.records:
        if record.step not in seen:
            seen.add(record.step)
            result.append(record)
    return result
