"""debugprint: text rendering of variables, lists of variables and compiled functions."""

import io
import re

import numpy as np
import pytest

import tenure as tn
from tenure.symbolic.ops import scalar as ps
from tenure.symbolic.ops.elemwise import Elemwise

ID = re.compile(r"\[id ([A-Z]+)\]")


def _ids(line):
    return ID.findall(line)


def test_debugprint_variable_shows_ops_types_and_tree():
    x = tn.matrix("x")
    y = tn.vector("y", dtype="float32")
    out = tn.exp(x) + y
    text = tn.debugprint(out, file="str")
    lines = text.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("add [id ")
    assert "<float64(?, ?)>" in lines[0]
    assert "exp" in lines[1] and lines[1].startswith(" ├─ ")
    assert "x [id" in lines[2] and "<float64(?, ?)>" in lines[2]
    assert lines[2].startswith(" │   └─ ")
    assert lines[3].startswith(" └─ ") and "y [id" in lines[3] and "<float32(?,)>" in lines[3]
    # every line has an id, and they are distinct for distinct variables
    ids = [_ids(line)[0] for line in lines]
    assert len(set(ids)) == 4


def test_debugprint_file_str_returns_text_and_prints_nothing(capsys):
    x = tn.vector("x")
    text = tn.debugprint(x * 2, file="str")
    assert isinstance(text, str) and "mul" in text
    assert capsys.readouterr().out == ""


def test_debugprint_defaults_to_stdout(capsys):
    x = tn.vector("x")
    result = tn.debugprint(tn.exp(x))
    assert result is None
    out = capsys.readouterr().out
    assert out == tn.debugprint(tn.exp(x), file="str")
    assert "exp" in out and "x [id" in out


def test_debugprint_to_a_stream():
    x = tn.vector("x")
    buf = io.StringIO()
    assert tn.debugprint(tn.sqrt(x), file=buf) is None
    assert "sqrt" in buf.getvalue() and "x [id" in buf.getvalue()


def test_debugprint_shared_subgraph_printed_once_with_reuse_marker():
    a, b = tn.vector("a"), tn.vector("b")
    s = tn.exp(a + b)
    out = s * s
    lines = tn.debugprint(out, file="str").splitlines()
    exp_lines = [line for line in lines if "exp" in line]
    assert len(exp_lines) == 2
    assert _ids(exp_lines[0]) == _ids(exp_lines[1])  # the same id both times
    assert "···" not in exp_lines[0] and exp_lines[1].rstrip().endswith("···")
    # the subgraph below it is printed only once
    assert sum("add" in line for line in lines) == 1
    assert len(lines) == 6  # mul, exp, add, a, b, exp ···


def test_debugprint_equal_but_distinct_subgraphs_are_not_merged():
    a, b = tn.vector("a"), tn.vector("b")
    out = (a + b) * (a + b)
    lines = tn.debugprint(out, file="str").splitlines()
    adds = [line for line in lines if "add" in line]
    assert len(adds) == 2 and _ids(adds[0]) != _ids(adds[1])
    assert not any("···" in line for line in lines)


def test_debugprint_roots_reuse_ids():
    x = tn.vector("x")
    out = tn.exp(x) + x
    lines = tn.debugprint(out, file="str").splitlines()
    x_lines = [line for line in lines if re.search(r"\bx \[id", line)]
    assert len(x_lines) == 2 and _ids(x_lines[0]) == _ids(x_lines[1])


def test_debugprint_list_shares_ids_across_outputs():
    x = tn.vector("x")
    e = tn.exp(x)
    text = tn.debugprint([e + 1, e * 2], file="str")
    lines = text.splitlines()
    assert lines[0].startswith("add") and any(line.startswith("mul") for line in lines)
    exp_lines = [line for line in lines if "exp" in line]
    assert len(exp_lines) == 2 and _ids(exp_lines[0]) == _ids(exp_lines[1])
    assert exp_lines[1].rstrip().endswith("···")
    assert tn.debugprint([], file="str") == ""


def test_debugprint_names_constants_and_shared():
    x = tn.vector("x")
    w = tn.shared(np.ones(3), name="w")
    text = tn.debugprint(x * w + 2.5, file="str")
    assert "shared w" in text
    assert "2.5" in text
    named = tn.exp(x)
    named.name = "ex"
    assert "'ex'" in tn.debugprint(named + 1, file="str")


def test_debugprint_multi_output_index():
    from tenure.symbolic.graph import Apply, Op
    from tenure.symbolic.types import TensorType

    class Two(Op):
        def make_node(self, x):
            return Apply(self, [x], [TensorType("float64", ())(), TensorType("int64", ())()])

    x = tn.scalar("x")
    first, second = Two()(x)
    text = tn.debugprint(second, file="str")
    assert text.startswith("Two.1 [id") and "<int64()>" in text


def test_debugprint_view_marks():
    x = tn.matrix("x")
    text = tn.debugprint(x.T, file="str")
    first = text.splitlines()[0]
    assert "v={0: [0]}" in first
    assert "d=" not in text
    assert "v=" not in tn.debugprint(x + 1, file="str")


def test_debugprint_destroy_marks():
    a, b = tn.vector("a"), tn.vector("b")
    out = Elemwise(ps.add, {0: 1})(a, b)
    first = tn.debugprint(out, file="str").splitlines()[0]
    assert "d={0: [1]}" in first
    assert "inplace" in first


def test_debugprint_function_shows_outputs_and_updates(mode):
    x = tn.vector("x")
    w = tn.shared(np.zeros(2), name="w")
    # The graph as written (rewrites would drop the 1-d transpose).
    f = tn.function([x], [tn.exp(x), x.T], updates=[(w, w + x)],
                    mode=tn.Mode(linker=mode.linker, rewrites="none"))
    text = tn.debugprint(f, file="str")
    lines = text.splitlines()
    assert lines[0].startswith("exp [id")
    roots = [line for line in lines if not line.startswith(" ")]
    assert len(roots) == 3
    assert "v={0: [0]}" in roots[1]
    assert roots[2].startswith("add") and roots[2].rstrip().endswith("-> update of w")
    assert sum("-> update of" in line for line in lines) == 1
    assert "shared w" in text
    # the function's input keeps one id everywhere it appears
    x_ids = {tuple(_ids(line)) for line in lines if re.search(r"\bx \[id", line)}
    assert len(x_ids) == 1


def test_debugprint_function_shared_subgraph_between_outputs(mode):
    x = tn.vector("x")
    e = tn.exp(x)
    f = tn.function([x], [e + 1, e * 2], mode=mode)
    lines = tn.debugprint(f, file="str").splitlines()
    exp_lines = [line for line in lines if "exp" in line]
    assert len(exp_lines) == 2 and _ids(exp_lines[0]) == _ids(exp_lines[1])
    assert exp_lines[1].rstrip().endswith("···")


def test_debugprint_function_destroy_marks(mode):
    a, b = tn.vector("a"), tn.vector("b")
    out = Elemwise(ps.mul, {0: 0})(a, b)
    f = tn.function([tn.In(a, borrow=True, mutable=True), b], out, mode=mode)
    first = tn.debugprint(f, file="str").splitlines()[0]
    assert first.startswith("mul_inplace") and "d={0: [0]}" in first


def test_debugprint_update_to_an_input(mode):
    x = tn.vector("x")
    w = tn.shared(np.zeros(2), name="w")
    f = tn.function([x], [], updates=[(w, x)], mode=mode)
    text = tn.debugprint(f, file="str")
    assert text.splitlines() == [text.splitlines()[0]]
    assert text.startswith("x [id") and text.rstrip().endswith("-> update of w")


def test_debugprint_two_updates_with_the_same_expression(mode):
    x = tn.vector("x")
    w1 = tn.shared(np.zeros(2), name="w1")
    w2 = tn.shared(np.zeros(2), name="w2")
    y = x * 2
    f = tn.function([x], [], updates=[(w1, y), (w2, y)], mode=mode)
    lines = [line for line in tn.debugprint(f, file="str").splitlines()
             if not line.startswith(" ")]
    assert len(lines) == 2
    assert "-> update of w1" in lines[0]
    assert "-> update of w2" in lines[1]


@pytest.mark.parametrize("bad", [None, 3, "x", {"a": 1}, np.zeros(2)])
def test_debugprint_bad_argument_is_a_type_error(bad):
    with pytest.raises(TypeError) as info:
        tn.debugprint(bad, file="str")
    assert type(bad).__name__ in str(info.value)


def test_debugprint_list_with_a_non_variable_is_a_type_error():
    x = tn.vector("x")
    with pytest.raises(TypeError, match="list"):
        tn.debugprint([x, 3], file="str")


def test_debugprint_deep_graph():
    x = tn.scalar("x")
    y = x
    for _ in range(1500):
        y = y + 1.0
    text = tn.debugprint(y, file="str")
    assert text.count("add [id") == 1500
