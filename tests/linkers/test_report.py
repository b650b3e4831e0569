"""Function.memory_report: per-node buffers, predicted and measured peaks, no side effects."""

import numpy as np

import tenure as tn
from tenure import In, Out

PLAIN = tn.Mode(rewrites="none")


def kinds(report):
    return [(r.op.split("{")[0], r.kind) for r in report.records]


def test_new_buffers_and_peaks_of_a_plain_chain():
    x = tn.vector("x")
    f = tn.function([x], tn.exp(x) * 2, mode=PLAIN)
    report = f.memory_report(np.zeros(1_000_000), print_report=False)
    assert kinds(report) == [("exp", "new"), ("mul", "new")]
    assert [r.nbytes for r in report.records] == [8_000_000, 8_000_000]
    # exp's result is still alive while mul writes its own: two arrays at once.
    assert report.predicted_peak == 16_000_000
    assert abs(report.measured_peak - report.predicted_peak) < 0.1 * report.predicted_peak
    assert report.held_between_calls == 0


def test_views_in_place_and_reused_buffers_are_told_apart():
    x = tn.matrix("x")
    f = tn.function([In(x, borrow=True, mutable=True)], Out(tn.exp(x).T, borrow=True))
    report = f.memory_report(np.zeros((3, 4)), print_report=False)
    by_kind = {r.kind for r in report.records}
    assert "in place" in by_kind and "view" in by_kind
    in_place = next(r for r in report.records if r.kind == "in place")
    assert in_place.source == "x"

    g = tn.function([x], Out(tn.exp(x) * 2, borrow=True))
    g(np.zeros((3, 4)))  # the borrowed output's buffer is kept from now on
    report = g.memory_report(np.zeros((3, 4)), print_report=False)
    assert report.records[-1].kind == "reused"
    assert report.held_between_calls == 3 * 4 * 8


def test_the_report_changes_nothing():
    x = tn.vector("x")
    w = tn.shared(np.ones(4), name="w")
    f = tn.function([In(x, borrow=True, mutable=True)], tn.exp(x).sum(),
                    updates=[(w, w - 0.5 * x)])
    assert any(n.op.destroy_map for n in f.fgraph.apply_nodes)
    arg = np.arange(4.0)
    f.memory_report(arg, print_report=False)
    np.testing.assert_array_equal(arg, np.arange(4.0))
    np.testing.assert_array_equal(w.get_value(), np.ones(4))


def test_printed_table_and_rows(capsys):
    x = tn.vector("x")
    f = tn.function([x], tn.sin(x) + 1, mode=PLAIN)
    report = f.memory_report(x=np.zeros(10))
    printed = capsys.readouterr().out
    assert "predicted peak" in printed and "measured peak" in printed and "sin" in printed
    rows = report.rows()
    assert rows[0]["shape"] == (10,) and rows[0]["dtype"] == "float64"
    assert str(report) == printed.rstrip("\n")
