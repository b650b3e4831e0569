"""Integer array indexing in the C runtime (tenure/linkers/c/advanced.py,
src/advanced.c): ``AdvancedSubtensor`` and ``AdvancedIncSubtensor`` with
arrays on the leading axes run as interpreter steps, with perform's values,
accumulation order, in-place behaviour and errors."""

import numpy as np
import pytest

import tenure as tn
from tenure import demo
from tenure.symbolic.ops.creation import Arange
from tenure.symbolic.ops.indexing import AdvancedSubtensor
from tenure.symbolic.ops.subtensor_update import AdvancedIncSubtensor
from tests.linkers.c.pairs import assert_identical, kinds_by_op
from tests.test_leaks import LIMIT as LEAK_LIMIT
from tests.test_leaks import growth_per_call

pytestmark = pytest.mark.usefixtures("cc_or_skip")

C = tn.Mode(linker="c")
PY = tn.Mode(linker="py")


def both(inputs, outputs):
    return (tn.function(inputs, outputs, mode=C, on_unused_input="ignore"),
            tn.function(inputs, outputs, mode=PY, on_unused_input="ignore"))


X = np.arange(60.0).reshape(5, 4, 3)
ROWS = np.array([4, 0, -1, 0, 2])        # negative and repeated
COLS = np.array([1, 3, 0, 1, 1])


def cases(x, i, j):
    """(expression, the op class it makes) over x (5, 4, 3), i and j int vectors."""
    return [
        (x[i], AdvancedSubtensor),
        (x[i, j], AdvancedSubtensor),
        (x[i, :, :], AdvancedSubtensor),
        (x[i[:, None], j[None, :]], AdvancedSubtensor),      # broadcast index arrays
        (tn.inc_subtensor(x[i, j], 1.5), AdvancedIncSubtensor),        # repeats add up
        (tn.set_subtensor(x[i, j], x[0, 0]), AdvancedIncSubtensor),    # the last write wins
        (tn.inc_subtensor(x[i], x[0]), AdvancedIncSubtensor),          # a broadcast value
        (tn.inc_subtensor(x[i, j], tn.arange(3.0)), AdvancedIncSubtensor),
    ]


@pytest.mark.parametrize("k", range(8))
def test_gathers_and_scatters_are_c_steps_with_perform_s_values(k):
    x = tn.tensor("x", shape=(None, None, None))
    i, j = tn.vector("i", dtype="int64"), tn.vector("j", dtype="int32")
    expr, op = cases(x, i, j)[k]
    f, ref = both([x, i, j], expr)
    assert kinds_by_op(f)[op] == {"advanced"}
    args = X, ROWS, COLS.astype("int32")
    assert_identical(f(*args), ref(*args))
    assert np.array_equal(args[0], np.arange(60.0).reshape(5, 4, 3))   # the input untouched


def test_an_update_in_place_reads_a_value_that_views_what_it_writes():
    """``y[0]`` is a view of ``y``, which the update overwrites in place:
    it is read from a copy, as perform does."""
    x = tn.matrix("x")
    i = tn.vector("i", dtype="int64")
    y = x * 2.0
    out = tn.inc_subtensor(y[i], y[0])
    f, ref = both([x, i], out)
    assert any(isinstance(n.op, AdvancedIncSubtensor) and n.op.inplace
               for n in f.fgraph.apply_nodes)
    args = np.arange(12.0).reshape(4, 3), np.array([0, 0, 3, 0])
    assert_identical(f(*args), ref(*args))


def test_other_patterns_stay_performs():
    x = tn.matrix("x")
    i = tn.vector("i", dtype="int64")
    for expr in (x[1, i], x[1:3, i], x[i, 1:], x[None, i]):
        f = tn.function([x, i], expr, mode=C)
        assert kinds_by_op(f)[AdvancedSubtensor] == {"py"}, expr.owner.op


@pytest.mark.parametrize("build, args, error", [
    (lambda x, i, j: x[i, j], (np.ones((3, 4)), np.array([0, 3]), np.array([0, 1])),
     IndexError),                                                   # out of bounds
    (lambda x, i, j: x[i, j], (np.ones((3, 4)), np.array([0, 1]), np.array([0, 1, 2])),
     IndexError),                                                   # arrays don't broadcast
    (lambda x, i, j: tn.inc_subtensor(x[i, j], 1.0),
     (np.ones((3, 4)), np.array([0, 1]), np.array([0, 1, 2])), IndexError),
    (lambda x, i, j: tn.inc_subtensor(x[i, j], tn.ones(3)),
     (np.ones((3, 4)), np.array([0, 1]), np.array([0, 1])), ValueError),   # the value's shape
    (lambda x, i, j: tn.set_subtensor(x[i, j], tn.ones(3)),
     (np.ones((3, 4)), np.array([0, 1]), np.array([0, 1])), ValueError),
    (lambda x, i, j: tn.inc_subtensor(x[i, j], 1.0),
     (np.ones((3, 4)), np.array([0, -4]), np.array([0, 1])), IndexError),
])
def test_errors_are_perform_s(build, args, error):
    x = tn.matrix("x")
    i, j = tn.vector("i", dtype="int64"), tn.vector("j", dtype="int64")
    messages = []
    for mode in (C, PY):
        f = tn.function([x, i, j], build(x, i, j), mode=mode)
        with pytest.raises(error) as info:
            f(*args)
        messages.append(str(info.value).splitlines()[0])
    assert messages[0] == messages[1]


@pytest.mark.parametrize("args", [(0, 7, 1), (7, 0, -2), (-3, 3, 2), (0.5, 3.0, 0.25), (5, 2, 1)])
def test_arange_is_numpy_s(args):
    a, b, s = (tn.scalar(n, dtype="float64" if isinstance(args[0], float) else "int64")
               for n in "abs")
    f, ref = both([a, b, s], tn.arange(a, b, s))
    assert kinds_by_op(f)[Arange] == {"shape"}
    values = [np.array(v) for v in args]
    assert_identical(f(*values), ref(*values))


def test_arange_with_a_zero_step_raises_perform_s_error():
    n = tn.scalar("n", dtype="int64")
    f = tn.function([n], tn.arange(0, 5, n), mode=C)
    with pytest.raises(ValueError, match="arange: step must not be 0"):
        f(np.array(0))


def test_the_demo_step_has_no_python_steps():
    """Issue 33: the demo's training step -- its cross-entropy's integer
    indexing and the ranges it indexes rows with included -- runs every
    step in C, and takes the compiled call path."""
    rng = np.random.default_rng(0)
    _, train, _ = demo.build_model(rng, 2, 16, 3, 0.1, mode=tn.Mode(linker="c"))
    assert "py" not in train._thunk.graph.kinds, kinds_by_op(train)
    _, ref, _ = demo.build_model(np.random.default_rng(0), 2, 16, 3, 0.1,
                                 mode=tn.Mode(linker="py"))
    X, y = demo.make_spirals(np.random.default_rng(1), 20)
    for _ in range(3):
        np.testing.assert_allclose(train(X, y), ref(X, y), rtol=1e-12)
    assert train._fast_call is not None


def test_the_demo_step_keeps_nothing_per_call():
    """The shape and indexing steps release what they make: the demo's step,
    every one of its steps in C, holds no more memory after many calls."""
    _, train, _ = demo.build_model(np.random.default_rng(0), 2, 16, 3, 0.1,
                                   mode=tn.Mode(linker="c"))
    X, y = demo.make_spirals(np.random.default_rng(1), 20)
    # (NumPy's caches behind np.add.at fill for a few thousand calls: 0.4
    # bytes a call over the first 6,000, then 0.01)
    growth = growth_per_call(train, (X, y), warm_up=4_000, calls=4_000, windows=3)
    assert min(growth) < LEAK_LIMIT, growth
