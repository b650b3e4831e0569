"""Pickling and deep-copying compiled functions and shared variables, on every linker.

A function pickles as the graph it was compiled from (with its mode and
flags) and compiles again when loaded; the C linker then loads its module
from the disk cache.  Shared variables pickled together with a function stay
connected to it.  This file runs on the C linker in every run
(conftest.SUITES["c"]); its graphs are few and small.
"""

import copy
import pickle

import numpy as np
import tenure as tn
from tenure import In, Out


def build(mode):
    """One small function with everything that must survive: an update, a
    default update, a default argument, a borrowed output, a name and flags."""
    x = tn.vector("x")
    y = tn.scalar("y")
    w = tn.shared(np.arange(3.0), name="w")
    n = tn.shared(np.float64(0.0), name="n")
    n.default_update = n + 1
    f = tn.function([In(x, borrow=True), In(y, value=2.0)], [Out(x * w + y + n, borrow=True)],
                    updates=[(w, w + x)], mode=mode, name="f", trust_input=True)
    return f, w, n


ONES = np.ones(3)


class TestPickle:
    def test_function_pickled_with_its_shared_variables(self, mode):
        f, w, n = build(mode)
        g, w2, n2 = pickle.loads(pickle.dumps((f, w, n)))
        assert (g.name, g.trust_input, g.mode.linker) == ("f", True, mode.linker)
        assert [spec.borrow for spec in g.outputs] == [True]
        np.testing.assert_array_equal(g(ONES)[0], [2.0, 3.0, 4.0])
        np.testing.assert_array_equal(w2.get_value(), [1.0, 2.0, 3.0])
        assert n2.get_value() == 1.0
        np.testing.assert_array_equal(g(ONES, np.array(0.0))[0], [2.0, 3.0, 4.0])
        # The originals are untouched, and still work with f.
        np.testing.assert_array_equal(w.get_value(), [0.0, 1.0, 2.0])
        assert n.get_value() == 0.0
        np.testing.assert_array_equal(f(ONES)[0], [2.0, 3.0, 4.0])
        np.testing.assert_array_equal(w.get_value(), [1.0, 2.0, 3.0])

    def test_function_alone_brings_its_own_shared_variables(self, mode):
        f, w, _ = build(mode)
        g = pickle.loads(pickle.dumps(f))
        np.testing.assert_array_equal(g(ONES)[0], [2.0, 3.0, 4.0])
        np.testing.assert_array_equal(g(ONES)[0], [4.0, 5.0, 6.0])
        np.testing.assert_array_equal(w.get_value(), [0.0, 1.0, 2.0])
        (g_w,) = [v for v in g.shared_vars if v.name == "w"]
        np.testing.assert_array_equal(g_w.get_value(), [2.0, 3.0, 4.0])

    def test_deepcopy(self, mode):
        f, w, n = build(mode)
        g = copy.deepcopy(f)  # like a pickle round trip: its own shared variables
        np.testing.assert_array_equal(g(ONES)[0], [2.0, 3.0, 4.0])
        np.testing.assert_array_equal(w.get_value(), [0.0, 1.0, 2.0])
        h, w3 = copy.deepcopy((f, w))
        h(ONES)
        np.testing.assert_array_equal(w3.get_value(), [1.0, 2.0, 3.0])
        np.testing.assert_array_equal(w.get_value(), [0.0, 1.0, 2.0])
        assert n.get_value() == 0.0

    def test_flags_of_the_compile_survive(self, mode):
        # The updates are stored as compiled: no default update appears on load.
        x = tn.vector("x")
        n = tn.shared(np.float64(0.0), name="n")
        n.default_update = n + 1
        f = tn.function([x], x * 2 + n, mode=mode, no_default_updates=True)
        g, n2 = pickle.loads(pickle.dumps((f, n)))
        g(ONES)
        assert n2.get_value() == 0.0
        assert n2.default_update is not None  # the attribute itself is kept

    def test_unpickled_shared_variable_is_live(self, mode):
        # Live shared variables are what keeps another one from adopting
        # their storage: an unpickled one must be live too.
        w = pickle.loads(pickle.dumps(tn.shared(np.zeros(3), name="w")))
        other = tn.shared(w.get_value(borrow=True), borrow=True)
        assert not np.may_share_memory(other.get_value(borrow=True), w.get_value(borrow=True))
        x = tn.vector("x")
        f = tn.function([x], [], updates=[(w, w + x)], mode=mode)
        f(ONES)
        np.testing.assert_array_equal(other.get_value(), [0.0, 0.0, 0.0])


def test_c_function_loads_from_the_disk_cache(cc_or_skip, monkeypatch):
    from tenure.linkers.c import cache, compiler
    from tenure.linkers.c.linker import CThunk
    f, w, _ = build(tn.Mode(linker="c"))
    data = pickle.dumps((f, w))
    cache._forget_loaded()  # as if in a new process: read the disk

    def no_compile(*args, **kwargs):
        raise AssertionError("the compiler ran for a cached graph")

    monkeypatch.setattr(compiler, "compile_shared_library", no_compile)
    g, w2 = pickle.loads(data)
    assert isinstance(g._thunk, CThunk) and g._thunk.graph.name == f._thunk.graph.name
    np.testing.assert_array_equal(g(ONES)[0], [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(w2.get_value(), [1.0, 2.0, 3.0])
