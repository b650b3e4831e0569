"""The runtime's loop driver (``run_steps``, ``src/loop.c``): the rows each
step reads and writes, ``until``, a result of the wrong shape, a step that
raises, and a step that keeps its argument.

The step here is a Python function with a compiled step's call signature:
the driver calls whatever it is given, so what it passes and keeps can be
watched.  Loops over real compiled steps are tested in
``tests/symbolic/ops/test_scan.py`` on every linker."""

import numpy as np
import pytest

import tenure as tn
from tenure import In, Out
from tenure.linkers.c import runtime


@pytest.fixture(scope="module")
def run_steps():
    return runtime.load_runtime().run_steps


def call(run_steps, step, args, reads, writes, cond=-1, first=0, stop=None, storage=None,
         on_error=None):
    stop = len(reads[0][1]) if stop is None else stop
    return run_steps(step, [] if storage is None else storage, (), np.zeros(1, np.intp),
                     on_error or (lambda exc: None), None, list(args), reads, writes, cond,
                     first, stop)


def test_a_running_sum_reads_and_writes_rows(run_steps):
    xs = np.arange(1.0, 7.0)
    sums = np.zeros(7)            # sums[0]: the initial value; step t writes sums[t + 1]

    def step(storage, args, table, py_steps, status):
        x, s = args
        return [np.asarray(x + s)]

    got = call(run_steps, step, [None, None], ((0, xs, 0, 0), (1, sums, 0, 0)),
               ((0, sums, 1, 0),))
    assert got == (6, False, -1, None)
    np.testing.assert_array_equal(sums[1:], np.cumsum(xs))


def test_a_ring_wraps_its_rows(run_steps):
    """A state of two taps in a ring of two rows: Fibonacci."""
    ring = np.array([0.0, 1.0])   # value j lives at j mod 2; the initial values are -2 and -1
    seen = []

    def step(storage, args, table, py_steps, status):
        a, b = args
        seen.append((float(a), float(b)))
        return [np.asarray(a + b)]

    got = call(run_steps, step, [None, None], ((0, ring, -2, 2), (1, ring, -1, 2)),
               ((0, ring, 0, 2),), stop=8)
    assert got[:2] == (8, False)
    assert [b for _, b in seen] == [1, 1, 2, 3, 5, 8, 13, 21]
    assert sorted(ring.tolist()) == [21.0, 34.0]


def test_until_stops_after_the_step_that_gave_true(run_steps):
    xs = np.arange(10.0)
    out = np.zeros(10)

    def step(storage, args, table, py_steps, status):
        (x,) = args
        return [np.asarray(2 * x), np.asarray(x >= 3)]

    got = call(run_steps, step, [None], ((0, xs, 0, 0),), ((0, out, 0, 0),), cond=1)
    assert got == (4, True, -1, None)
    np.testing.assert_array_equal(out[:4], [0, 2, 4, 6])
    assert not out[4:].any()


def test_a_result_of_the_wrong_shape_stops_the_loop_and_is_handed_back(run_steps):
    xs = np.arange(5.0)
    out = np.zeros((5, 2))

    def step(storage, args, table, py_steps, status):
        (x,) = args
        return [np.full(3 if x == 3 else 2, float(x))]

    t, fired, bad_write, value = call(run_steps, step, [None], ((0, xs, 0, 0),),
                                      ((0, out, 0, 0),))
    assert (t, fired, bad_write) == (3, False, 0)
    np.testing.assert_array_equal(value, [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(out[:3], [[0, 0], [1, 1], [2, 2]])
    assert not out[3:].any()


def test_a_step_that_keeps_its_argument_keeps_the_row_it_was_given(run_steps):
    """The driver moves one view from row to row, except where a step kept it."""
    xs = np.arange(6.0).reshape(6, 1)
    out = np.zeros((6, 1))
    kept, ids = [], set()

    def step(storage, args, table, py_steps, status):
        (x,) = args
        ids.add(id(x))
        if x[0] in (1.0, 4.0):
            kept.append(x)
        return [x * 10]

    call(run_steps, step, [None], ((0, xs, 0, 0),), ((0, out, 0, 0),))
    np.testing.assert_array_equal(out[:, 0], np.arange(6.0) * 10)
    assert [float(x[0]) for x in kept] == [1.0, 4.0]
    assert len(ids) < 6, "one view is meant to serve the steps nobody kept it in"


def test_a_view_held_by_the_steps_storage_is_still_moved(run_steps):
    xs = np.arange(4.0)
    out = np.zeros(4)
    storage = [None]
    ids = set()

    def step(storage_, args, table, py_steps, status):
        storage_[0] = args[0]     # as a compiled step's input slot holds it
        ids.add(id(args[0]))
        return [args[0] + 1]

    call(run_steps, step, [None], ((0, xs, 0, 0),), ((0, out, 0, 0),), storage=storage)
    np.testing.assert_array_equal(out, xs + 1)
    assert len(ids) == 1


def test_a_step_that_raises_is_reported_then_propagates(run_steps):
    xs = np.arange(4.0)
    out = np.zeros(4)
    reported = []

    def step(storage, args, table, py_steps, status):
        if args[0] == 2:
            raise ZeroDivisionError("step 2 failed")
        return [args[0] * 1]

    with pytest.raises(ZeroDivisionError, match="step 2 failed"):
        call(run_steps, step, [None], ((0, xs, 0, 0),), ((0, out, 0, 0),),
             on_error=reported.append)
    assert [type(e) for e in reported] == [ZeroDivisionError]
    np.testing.assert_array_equal(out, [0, 1, 0, 0])


@pytest.mark.parametrize("entry", [
    (5, np.zeros(3), 0, 0),              # no such argument
    (0, np.zeros(3), 1, 0),              # rows past the end
    (0, np.zeros(3), 0, 4),              # a ring longer than its array
    (0, np.float64(1.0), 0, 0),          # not an array
    (0, np.zeros(3), 0),                 # too short
])
def test_a_bad_read_is_refused_before_any_step(run_steps, entry):
    def step(*args):
        raise AssertionError("no step may run")

    with pytest.raises(ValueError, match="run_steps: bad read entry"):
        call(run_steps, step, [None], (entry,), (), stop=3)


def test_results_that_are_not_c_contiguous_arrays_are_copied_as_numpy_assigns(run_steps):
    """A strided result, another dtype's and a NumPy scalar (a perform's) take
    the general copy; a scalar for a row of one value fits it."""
    xs = np.arange(12.0).reshape(3, 2, 2)
    rows, sums = np.zeros((3, 2, 2)), np.zeros(3, dtype=np.float32)

    def step(storage, args, table, py_steps, status):
        (x,) = args
        return [x.T, np.float64(x.sum())]

    got = call(run_steps, step, [None], ((0, xs, 0, 0),), ((0, rows, 0, 0), (1, sums, 0, 0)))
    assert got == (3, False, -1, None)
    np.testing.assert_array_equal(rows, xs.transpose(0, 2, 1))
    np.testing.assert_array_equal(sums, xs.sum(axis=(1, 2)))


def test_a_compiled_step_runs_steps_only_for_arguments_its_gate_takes():
    """``Function.run_steps``: a C step runs a range of steps in the driver; it
    answers None (the loop calls the step itself) for rows its input gate
    would convert, and on the Python executor, which has no driver."""
    x, s = tn.scalar("x", dtype="float64"), tn.scalar("s", dtype="float64")

    def compiled(linker):
        return tn.function([In(x, borrow=True), In(s, borrow=True)], Out(x + s, borrow=True),
                           mode=tn.Mode(linker=linker))

    xs, sums = np.arange(1.0, 6.0), np.zeros(6)
    reads, writes = ((0, xs, 0, 0), (1, sums, 0, 0)), ((0, sums, 1, 0),)
    step = compiled("c")
    assert step.run_steps([None, None], reads, writes, -1, 0, 5) == (5, False, -1, None)
    np.testing.assert_array_equal(sums[1:], np.cumsum(xs))
    other = ((0, xs.astype(np.float32), 0, 0), (1, sums, 0, 0))
    assert step.run_steps([None, None], other, writes, -1, 0, 5) is None
    assert compiled("py").run_steps([None, None], reads, writes, -1, 0, 5) is None
