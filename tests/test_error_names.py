"""Run-time errors name the user's graph, not the compiled one (issue 32,
item 4): they lead with the op the user wrote (``add``, not
``add_inplace[0<-0]``; a fused ``Composite`` as its expression over the
user's variables) and the user's names for its inputs; a C kernel's name
(``tn_k0``) and the compiled op come last, in brackets."""

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.describe import user_call


def _error(mode, out, *inputs):
    f = tn.function(list(inputs), out, mode=mode)
    values = [np.ones((3, 3)) if v.ndim == 2 else np.ones(4 if v.name == "y" else 3)
              for v in inputs]
    with pytest.raises(ValueError) as info:
        f(*values)
    return str(info.value), list(getattr(info.value, "__notes__", ()))


def _note(notes) -> str:
    """The note naming the failed computation."""
    found = [n for n in notes if n.startswith("tenure: raised while")]
    assert found, notes
    return found[0]


def test_a_broadcast_error_in_a_fused_inplace_step_names_the_user_op(mode):
    A, w, y = tn.matrix("A"), tn.vector("w"), tn.vector("y")
    message, notes = _error(mode, tn.dot(A, w) + y, A, w, y)   # add_inplace after the rewrites
    assert not message.startswith("tn_k"), message
    assert "add_inplace" not in message.split("[compiled as")[0], message
    if mode.linker in ("c", "cuda"):   # the message is tenure's own; the step is in place
        assert message.startswith("add(dot(A, w), y): "), message
        assert "[compiled as add_inplace[0<-0]" in message, message
    note = _note(notes)
    assert note.startswith("tenure: raised while computing add(dot(A, w), y)") or \
        note.startswith("tenure: raised while lowering dot(A, w), add(dot(A, w), y)"), note
    assert "tn_k" not in note.split("[")[0] and "inplace" not in note.split("[")[0], note


def test_an_error_inside_a_composite_names_the_expression_in_user_variables(mode):
    x, y = tn.vector("x"), tn.vector("y")
    message, notes = _error(mode, tn.exp(x) * 2 + y, x, y)
    assert not message.startswith(("tn_k", "Composite{")), message
    if mode.linker != "py" and mode.linker != "check":
        assert message.startswith("exp(x) * 2 + y: "), message
        assert message.endswith("]") and "compiled as Composite{exp(i0) * 2 + i1}" in message
    note = _note(notes)
    assert "exp(x) * 2 + y" in note and note.index("exp(x) * 2 + y") < note.find("Composite"), note


def test_an_inplace_composite_over_an_intermediate_reads_as_the_users_expression(mode):
    A, w, y = tn.matrix("A"), tn.vector("w"), tn.vector("y")
    message, notes = _error(mode, tn.exp(tn.dot(A, w)) * 2 + y, A, w, y)
    assert not message.startswith(("tn_k", "Composite{")), message
    if mode.linker != "py" and mode.linker != "check":
        assert message.startswith("exp(dot(A, w)) * 2 + y: "), message
    assert "exp(dot(A, w)) * 2 + y" in _note(notes)


def test_user_call_renders_rewritten_nodes_in_user_terms():
    x, y = tn.vector("x"), tn.vector("y")
    assert user_call((x + y).owner) == "add(x, y)"
    f = tn.function([x, y], tn.exp(x) * 2 + y, mode=tn.Mode(linker="py"))
    (node,) = f.fgraph.toposort()
    assert str(node.op) == "Composite{exp(i0) * 2 + i1}"
    assert user_call(node) == "exp(x) * 2 + y"


def test_a_shape_error_in_an_update_names_the_update_in_user_terms(mode):
    """Refused before any step ran (the update would write the shared
    storage in place): the message and the note lead with ``add(s, v)``, the
    note says whose update it is, the in-place name comes last."""
    v = tn.vector("v")
    s = tn.shared(np.zeros(3), name="s")
    f = tn.function([v], [], updates=[(s, s + v)], mode=mode)
    with pytest.raises(ValueError) as info:
        f(np.ones(4))
    message, notes = str(info.value), list(getattr(info.value, "__notes__", ()))
    assert "add_inplace" not in message.split("[compiled as")[0], message
    assert message.startswith("add(s, v)") or "add(s, v)" in " ".join(notes), (message, notes)
    assert any("in the update of shared variable 's'" in n for n in notes), notes
    assert not any(n.split("[compiled as")[0].count("add_inplace") for n in notes), notes
    np.testing.assert_array_equal(s.get_value(), np.zeros(3))
