"""Random streams (tenure/random.py) and the RandomVariable op
(tenure/symbolic/ops/random.py), on every linker the op suite runs on (py,
check, c, and cuda on the emulated device).

The numbers are checked against a reference written here element by element
(Python integers and the math module) over NumPy's own Philox stream at the
state's key and counter, so "the same on every linker" means "the same as
this reference" on each of them.  Uniform and bernoulli draws are NumPy's
``random()``; normal draws agree to a few ulps (log, sin and cos of each
platform: NumPy's SIMD ones may differ from libm's), everything else exactly."""

import math
import pickle
import shlex
import subprocess
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import tenure as tn
from tenure import Out
from tenure.linkers.c import compiler, runtime
from tenure.linkers.c import random as c_random
from tenure.linkers.c.runtime import has_numpy_random
from tenure.random import NotDifferentiableError, RandomStream
from tenure.symbolic.device import cuda_runtime
from tenure.symbolic.ops.random import RandomVariable, initial_state
from tests.helpers import assert_same_normal


class reference:
    """The draws of stream ``stream`` (seeded ``seed``) after ``draw`` draws."""

    def __init__(self, seed, stream=0, draw=0):
        self.key = initial_state(seed, stream)[:2]
        self.draw = draw

    def words(self, count, attempt=0, block=0):
        counter = [block, 0, self.draw, attempt]
        return np.random.Philox(key=self.key, counter=counter).random_raw(count)

    def generator(self):
        """NumPy's generator at the draw's counter (binomial, choice, ...)."""
        return np.random.Generator(np.random.Philox(key=self.key, counter=[0, 0, self.draw, 0]))

    def random(self, size, dtype=np.float64):
        return self.generator().random(size, dtype=dtype)

    def uniform(self, low=0.0, high=1.0, size=None, dtype=np.float64):
        low, high = np.asarray(low, dtype), np.asarray(high, dtype)
        shape = np.broadcast_shapes(low.shape, high.shape) if size is None else size
        return self.random(shape, dtype) * (high - low) + low

    def standard_normal(self, size):
        n = int(np.prod(size))
        w = self.words(2 * ((n + 1) // 2))
        z = []
        for i in range(n):
            u1 = ((int(w[i - i % 2]) >> 11) + 1) * 2.0 ** -53
            u2 = (int(w[i - i % 2 + 1]) >> 11) * 2.0 ** -53
            r = math.sqrt(-2.0 * math.log(u1))
            z.append(r * (math.sin if i % 2 else math.cos)(6.283185307179586 * u2))
        return np.array(z).reshape(size)

    def normal(self, loc=0.0, scale=1.0, size=None, dtype=np.float64):
        loc, scale = np.asarray(loc, dtype), np.asarray(scale, dtype)
        shape = np.broadcast_shapes(loc.shape, scale.shape) if size is None else size
        return self.standard_normal(shape).astype(dtype) * scale + loc

    def integers(self, low, high, size):
        n = int(np.prod(size))
        span = high - low
        first = self.words(n)
        out = []
        for i in range(n):
            word, attempt = int(first[i]), 0
            while (word * span) % 2 ** 64 < (2 ** 64 - span) % span:
                attempt += 1
                word = int(self.words(4, attempt, i // 4)[i % 4])
            out.append(low + (word * span >> 64))
        return np.array(out, dtype=np.int64).reshape(size)


def state_of(draw_var):
    """The shared state a draw reads."""
    return draw_var.owner.inputs[0]


# -- reproducibility ---------------------------------------------------------------


def test_same_seed_gives_numpys_philox_numbers_on_every_linker(mode):
    srng = RandomStream(1234)
    x = srng.normal(2.0, 3.0, size=(4, 5))
    u = srng.uniform(-1.0, 5.0, size=7)
    f = tn.function([], [x, u], mode=mode)
    for call in range(3):
        got_x, got_u = f()
        assert_same_normal(got_x, reference(1234, 0, call).normal(2.0, 3.0, (4, 5)), loc=2.0)
        np.testing.assert_array_equal(got_u, reference(1234, 1, call).uniform(-1.0, 5.0, 7))


def test_successive_calls_advance_and_functions_share_the_stream(mode):
    srng = RandomStream(7)
    x = srng.uniform(size=3)
    f = tn.function([], x, mode=mode)
    g = tn.function([], x * 2, mode=mode)
    a, b = f(), f()
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(g(), 2 * reference(7, 0, 2).random(3))
    np.testing.assert_array_equal(state_of(x).get_value()[2], 3)


def test_seed_reseeds_every_stream(mode):
    srng = RandomStream(1)
    x, y = srng.normal(size=2), srng.integers(0, 100, size=4)
    f = tn.function([], [x, y], mode=mode)
    first = f()
    f()
    srng.seed(1)
    again = f()
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    srng.seed(2)
    other = f()
    assert_same_normal(other[0], reference(2, 0, 0).normal(size=2))
    assert not np.array_equal(other[0], first[0])
    # a new stream object of the same seed gives the same numbers
    fresh = RandomStream(1)
    np.testing.assert_array_equal(tn.function([], fresh.normal(size=2), mode=mode)(), first[0])


def test_streams_of_one_object_differ(mode):
    srng = RandomStream(3)
    f = tn.function([], [srng.uniform(size=5), srng.uniform(size=5)], mode=mode)
    a, b = f()
    assert not np.array_equal(a, b)


def test_no_default_updates_updates_and_givens_override_the_default_update(mode):
    srng = RandomStream(5)
    x = srng.normal(size=3)
    state = state_of(x)
    frozen = tn.function([], x, mode=mode, no_default_updates=True)
    np.testing.assert_array_equal(frozen(), frozen())
    kept = tn.function([], x, mode=mode, updates=[(state, state)])
    np.testing.assert_array_equal(kept(), kept())
    assert state.get_value()[2] == 0
    # givens: draw from another state (a replayed one), which is not updated
    replay = tn.shared(initial_state(5, 0), shape=(3,), name="replay")
    from_replay = tn.function([], x, mode=mode, givens={state: replay})
    assert_same_normal(from_replay(), reference(5).normal(size=3))
    assert_same_normal(from_replay(), reference(5).normal(size=3))
    assert state.get_value()[2] == 0 and replay.get_value()[2] == 0


def test_a_pickled_function_continues_the_same_sequence(mode):
    srng = RandomStream(11)
    f = tn.function([], [srng.normal(size=4), srng.bernoulli(0.5, size=6),
                         srng.choice(5, size=3, replace=False)], mode=mode)
    f()
    g = pickle.loads(pickle.dumps(f))
    expected = [reference(11, 0, 1).normal(size=4),
                reference(11, 1, 1).random(6) < 0.5,
                reference(11, 2, 1).generator().choice(5, size=3, replace=False)]
    for got in (g(), f()):                 # the original is unaffected by g's call
        assert_same_normal(got[0], expected[0])
        for a, b in zip(got[1:], expected[1:]):
            np.testing.assert_array_equal(a, b)
    assert_same_normal(g()[0], reference(11, 0, 2).normal(size=4))


# -- distributions -------------------------------------------------------------------


def test_moments_of_every_distribution(mode):
    srng = RandomStream(2024)
    n = 20_000
    draws = [srng.normal(2.0, 3.0, size=n), srng.uniform(-1.0, 3.0, size=n),
             srng.binomial(10, 0.3, size=n), srng.bernoulli(0.25, size=n),
             srng.integers(-3, 4, size=n), srng.choice(4, size=n, p=[0.1, 0.2, 0.3, 0.4]),
             srng.permutation(50), srng.choice(np.arange(10.0, 20.0), size=10, replace=False)]
    normal, uniform, binom, bern, ints, choice, perm, sample = tn.function(
        [], draws, mode=mode)()
    # loose bounds: several standard errors at these seeds, never flaky
    assert abs(normal.mean() - 2.0) < 0.1 and abs(normal.std() - 3.0) < 0.1
    assert uniform.min() >= -1.0 and uniform.max() < 3.0 and abs(uniform.mean() - 1.0) < 0.05
    assert binom.dtype == np.int64 and abs(binom.mean() - 3.0) < 0.1
    assert set(np.unique(bern)) == {0, 1} and abs(bern.mean() - 0.25) < 0.02
    assert set(np.unique(ints)) == set(range(-3, 4))
    np.testing.assert_allclose(np.bincount(choice, minlength=4) / n, [0.1, 0.2, 0.3, 0.4],
                               atol=0.02)
    np.testing.assert_array_equal(np.sort(perm), np.arange(50))
    assert sample.dtype == np.float64 and len(set(sample)) == 10
    assert set(sample) == set(np.arange(10.0, 20.0))


def test_dtypes(mode):
    srng = RandomStream(0)
    f = tn.function([], [srng.normal(size=3, dtype="float32"),
                         srng.uniform(size=3, dtype="float16"),
                         srng.integers(5, size=3, dtype="int8"),
                         srng.bernoulli(0.5, size=3, dtype="bool")], mode=mode)
    assert [r.dtype for r in f()] == [np.float32, np.float16, np.int8, np.bool_]
    g = tn.function([], RandomStream(0).normal(size=3, dtype="float32"), mode=mode)
    assert_same_normal(g(), reference(0).standard_normal(3).astype(np.float32))


def test_integers_float32_and_bernoulli_match_the_reference(mode):
    srng = RandomStream(21)
    low, high = -2 ** 62, 2 ** 62 + 12345         # about half the words are rejected
    p = np.array([0.1, 0.5, 0.9])
    f = tn.function([], [srng.integers(low, high, size=(3, 7)),
                         srng.integers(-5, 5, size=9, dtype="int8"),
                         srng.uniform(-2.0, np.float32(3.5), size=(2, 9), dtype="float32"),
                         srng.bernoulli(p, size=(4, 3), dtype="float32"),
                         srng.normal(np.float32(1.0), 0.5, size=5, dtype="float32")],
                    mode=mode)
    for call in range(2):
        big, small, u32, coins, z32 = f()
        np.testing.assert_array_equal(big, reference(21, 0, call).integers(low, high, (3, 7)))
        np.testing.assert_array_equal(small, reference(21, 1, call).integers(-5, 5, 9))
        assert small.dtype == np.int8
        np.testing.assert_array_equal(u32, reference(21, 2, call).uniform(
            -2.0, np.float32(3.5), (2, 9), np.float32))
        np.testing.assert_array_equal(coins, (reference(21, 3, call).random((4, 3)) < p)
                                      .astype(np.float32))
        assert_same_normal(z32, reference(21, 4, call).normal(1.0, 0.5, 5, np.float32), loc=1.0)


def test_a_draws_elements_do_not_depend_on_its_size(mode):
    """Element i is a function of the state and i alone: what lets a device
    thread, or the C runtime's loop, compute any element by itself."""
    for dist, args in [("normal", ()), ("uniform", ()), ("integers", (0, 1000))]:
        small = tn.function([], getattr(RandomStream(5), dist)(*args, size=3), mode=mode)()
        large = tn.function([], getattr(RandomStream(5), dist)(*args, size=(90, 100)),
                            mode=mode)()
        np.testing.assert_array_equal(large.ravel()[:3], small)
        if dist == "normal":     # past the reference's first chunks too
            assert_same_normal(large, reference(5).normal(size=(90, 100)))


def test_the_c_linker_draws_in_c_what_it_can():
    srng = RandomStream(2)
    draws = [srng.normal(size=3), srng.uniform(size=3, dtype="float32"),
             srng.bernoulli(0.5, size=3, dtype="bool"), srng.integers(9, size=3, dtype="uint16"),
             srng.binomial(1, 0.5, size=3, dtype="int8"),
             srng.uniform(size=3, dtype="float16"), srng.binomial(4, 0.5, size=3),
             srng.permutation(4)]
    assert has_numpy_random()        # NumPy's wheels ship its C distributions
    assert c_step_kinds(draws) == ["random"] * 5 + ["py"] + ["random"] * 2


def c_step_kinds(draws):
    """How the C linker runs each of ``draws``: "random" (the runtime) or "py"."""
    f = tn.function([], draws, mode=tn.Mode(linker="c"))
    f()
    kinds = {(step.node.op.dist, step.node.op.dtype): kind for kind, step in
             zip(f._thunk.graph.kinds, f._thunk.plan.steps)
             if isinstance(step.node.op, RandomVariable)}
    return [kinds[d.owner.op.dist, d.dtype] for d in draws]


def test_without_numpys_random_library_the_sequential_draws_run_perform(monkeypatch):
    """A NumPy without libnpyrandom: binomial, choice and permutation are the
    op's perform (the counter-indexed draws stay in C), and the runtime's
    source compiles without the library."""
    monkeypatch.setattr(c_random, "has_numpy_random", lambda: False)
    srng = RandomStream(2)
    draws = [srng.binomial(4, 0.5, size=3), srng.choice(5, size=2), srng.permutation(4),
             srng.normal(size=3)]
    assert c_step_kinds(draws) == ["py", "py", "py", "random"]
    recipe = compiler.make_recipe(("-DTN_NO_NPYRANDOM", "-fsyntax-only"))
    source = Path(tempfile.mkdtemp()) / "runtime.c"
    source.write_text(runtime.runtime_source())
    subprocess.run([*shlex.split(recipe.command), *recipe.args, "-fsyntax-only",
                    "-DTN_NO_NPYRANDOM", str(source)], check=True, capture_output=True)


def test_a_loops_sequential_draws_run_in_c_without_python(monkeypatch):
    """A loop drawing binomial, permutation and choice at every step: under
    the C linker no step calls the op's perform (issue 34: no Python per
    iteration), and the numbers are the Python linker's."""
    def loop(srng):
        def step(acc):
            return (acc + srng.binomial(5, 0.5, size=3) + srng.permutation(3)
                    + srng.choice(4, size=3))
        return tn.scan(step, outputs_info=tn.zeros(3, dtype="int64"), n_steps=50)
    (out_c, updates_c), (out_py, updates_py) = loop(RandomStream(5)), loop(RandomStream(5))
    in_c = tn.function([], out_c, updates=updates_c, mode=tn.Mode(linker="c"))
    want = tn.function([], out_py, updates=updates_py, mode=tn.Mode(linker="py"))()
    performed = []
    perform = RandomVariable.perform
    monkeypatch.setattr(RandomVariable, "perform",
                        lambda self, *args: performed.append(self) or perform(self, *args))
    np.testing.assert_array_equal(in_c(), want)
    assert performed == []


@pytest.mark.parametrize("dist", ["binomial", "choice", "permutation"])
def test_the_sequential_draws_are_numpys_generator_on_every_linker(mode, dist):
    """binomial (other than one trial), choice and permutation are NumPy's
    Generator at the draw's counter, on every linker: in C through NumPy's
    own distributions, every path of choice (with and without replacement
    and probabilities, Floyd's sampling and the tail shuffle) included."""
    srng = RandomStream(21)
    n, p = tn.vector("n", dtype="int64"), tn.vector("p")
    weights = np.array([0.1, 0.0, 0.3, 0.2, 0.4])
    cases = {      # built for `dist` alone: each draw is the stream numbered by its place
        "binomial": lambda: [
            (srng.binomial(7, 0.3, size=(3, 4)), lambda g: g.binomial(7, 0.3, (3, 4))),
            (srng.binomial(1000, 0.8, size=6, dtype="int32"),
             lambda g: g.binomial(1000, 0.8, 6).astype(np.int32)),
            (srng.binomial(n, p), lambda g: g.binomial([3, 60, 1, 0], [0.5, 0.2, 0.9, 0.3])),
            (srng.binomial(n, 0.4, size=(2, 4)), lambda g: g.binomial([3, 60, 1, 0], 0.4, (2, 4))),
        ],
        "choice": lambda: [
            (srng.choice(10, size=(2, 3)), lambda g: g.choice(10, (2, 3))),
            (srng.choice(np.arange(5.0), size=7, p=weights),
             lambda g: g.choice(np.arange(5.0), 7, p=weights)),
            (srng.choice(30, size=6, replace=False), lambda g: g.choice(30, 6, replace=False)),
            (srng.choice(np.arange(30.0, 60.0), size=(2, 3), replace=False),
             lambda g: g.choice(np.arange(30.0, 60.0), (2, 3), replace=False)),
            (srng.choice(20_000, size=500, replace=False),
             lambda g: g.choice(20_000, 500, replace=False)),
            (srng.choice(5, size=3, replace=False, p=weights),
             lambda g: g.choice(5, 3, replace=False, p=weights)),
            (srng.choice(np.array([True, False]), size=()),
             lambda g: np.asarray(g.choice(np.array([True, False]), ()))),
            (srng.choice(2 ** 40, size=4, replace=False),
             lambda g: g.choice(2 ** 40, 4, replace=False)),
        ],
        "permutation": lambda: [
            (srng.permutation(9), lambda g: g.permutation(9)),
            (srng.permutation(np.arange(12, dtype=np.int8).reshape(4, 3)),
             lambda g: g.permutation(np.arange(12, dtype=np.int8).reshape(4, 3))),
            (srng.permutation(0), lambda g: g.permutation(0)),
        ],
    }[dist]()
    f = tn.function([n, p], [draw for draw, _ in cases], mode=mode, on_unused_input="ignore")
    for call in range(2):
        got = f(np.array([3, 60, 1, 0]), np.array([0.5, 0.2, 0.9, 0.3]))
        for stream, (value, (_, numpy_draw)) in enumerate(zip(got, cases)):
            want = numpy_draw(reference(21, stream, call).generator())
            assert value.dtype == want.dtype and value.shape == want.shape, (stream, value, want)
            np.testing.assert_array_equal(value, want, err_msg=f"draw {stream}")


def test_a_binomial_of_one_trial_draws_the_bernoulli_numbers(mode):
    """binomial(1, p) -- the Theano tutorials' dropout and corruption mask --
    is drawn as bernoulli(p) is, on every linker (in C and on the device too),
    with n given as a constant or as an input of ones; other n are NumPy's
    binomial over the same stream."""
    srng = RandomStream(12)
    n = tn.vector("n", dtype="int64")
    p = np.array([0.2, 0.5, 0.9])
    f = tn.function([n], [srng.binomial(1, 0.3, size=(4, 5), dtype="float32"),
                          srng.binomial(n, p, size=(2, 3)), srng.binomial(n, 0.5, size=3)],
                    mode=mode)
    for call in range(2):
        constant_n, input_n, other_n = f(np.array([1, 1, 1]))
        np.testing.assert_array_equal(
            constant_n, (reference(12, 0, call).random((4, 5)) < 0.3).astype(np.float32))
        np.testing.assert_array_equal(input_n, reference(12, 1, call).random((2, 3)) < p)
        np.testing.assert_array_equal(other_n, reference(12, 2, call).random(3) < 0.5)
    _, twos, _ = f(np.array([2, 2, 2]))
    np.testing.assert_array_equal(twos, reference(12, 1, 2).generator().binomial(2, p, (2, 3)))
    q = tn.scalar("q")
    with pytest.raises(ValueError, match=r"binomial: parameter 'p' must be a probability in "
                                         r"\[0, 1\], got 1\.5"):
        tn.function([q], srng.binomial(1, q, size=2), mode=mode)(1.5)


def test_symbolic_size(mode):
    srng = RandomStream(9)
    n = tn.scalar("n", dtype="int64")
    x = srng.normal(size=(n, 2))
    assert x.type.shape == (None, 2)
    f = tn.function([n], x, mode=mode)
    assert f(5).shape == (5, 2)
    assert_same_normal(f(3), reference(9, 0, 1).normal(size=(3, 2)))
    v = tn.vector("v")
    like = tn.function([v], srng.uniform(size=v.shape), mode=mode)
    assert like(np.zeros(6)).shape == (6,)


def test_parameters_broadcast(mode):
    srng = RandomStream(4)
    loc = tn.vector("loc")
    scale = tn.matrix("scale")
    x = srng.normal(loc, scale)
    y = srng.normal(loc, 1.0, size=(4, 2, 3))
    f = tn.function([loc, scale], [x, y], mode=mode)
    locs, scales = np.array([0.0, 10.0, 100.0]), np.array([[1.0], [0.0]])
    a, b = f(locs, scales)
    assert a.shape == (2, 3) and b.shape == (4, 2, 3)
    assert_same_normal(a, reference(4, 0).normal(locs, scales), loc=locs)
    np.testing.assert_array_equal(a[1], locs)                 # scale 0: exactly loc
    assert_same_normal(b, reference(4, 1).normal(locs, 1.0, size=(4, 2, 3)), loc=locs)


# -- gradients -------------------------------------------------------------------------


def test_grad_of_normal_and_uniform_is_reparameterized(mode):
    srng = RandomStream(6)
    loc, scale = tn.vector("loc"), tn.scalar("scale")
    x = srng.normal(loc, scale, size=(5, 3))
    low, high = tn.scalar("low"), tn.vector("high")
    u = srng.uniform(low, high, size=(5, 3))
    cost = (x * x).sum() + (u * u).sum()
    grads = tn.grad(cost, [loc, scale, low, high])
    f = tn.function([loc, scale, low, high], [x, u] + grads, mode=mode)
    args = (np.array([1.0, -2.0, 0.5]), 1.5, -1.0, np.array([1.0, 2.0, 3.0]))
    xv, uv, gloc, gscale, glow, ghigh = f(*args)
    z = (xv - args[0]) / args[1]
    t = (uv - args[2]) / (args[3] - args[2])
    np.testing.assert_allclose(gloc, (2 * xv).sum(axis=0))
    np.testing.assert_allclose(gscale, (2 * xv * z).sum())
    np.testing.assert_allclose(glow, (2 * uv * (1 - t)).sum())
    np.testing.assert_allclose(ghigh, (2 * uv * t).sum(axis=0))


def test_grad_through_other_draws_is_a_clear_error():
    srng = RandomStream(0)
    p = tn.scalar("p")
    draw = srng.binomial(10, p, size=3, dtype="float64")
    with pytest.raises(NotDifferentiableError,
                       match=r"binomial draw .* \(p\).*normal and uniform"):
        tn.grad(draw.sum(), p)
    a = tn.vector("a")
    with pytest.raises(NotDifferentiableError, match=r"choice draw .* \(a\)"):
        tn.grad(srng.choice(a, size=2).sum(), a)
    # an integer draw has no differentiable path at all
    with pytest.raises(tn.DisconnectedInputError):
        tn.grad(tn.cast(srng.bernoulli(p, size=3), "float64").sum(), p)


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("build, args, message", [
    (lambda s, v: s.normal(0.0, v, size=3), (-1.0,), r"normal: parameter 'scale' must be "
                                                     r"finite and >= 0, got -1\.0"),
    (lambda s, v: s.uniform(0.0, v, size=3), (-1.0,), r"uniform: parameter 'high' must be "
                                                      r">= low, got -1\.0"),
    (lambda s, v: s.bernoulli(v, size=3), (1.5,), r"bernoulli: parameter 'p' must be a "
                                                  r"probability in \[0, 1\], got 1\.5"),
    (lambda s, v: s.binomial(5, v, size=3), (-0.1,), r"binomial: parameter 'p' .* got -0\.1"),
    (lambda s, v: s.normal(size=(tn.cast(v, "int64"),)), (-2.0,),
     r"normal: size must hold lengths >= 0, got size\[0\] = -2"),
    (lambda s, v: s.normal(tn.zeros((tn.cast(v, "int64"),)), size=3), (2.0,),
     r"normal: parameter 'loc' of shape \(2,\) does not broadcast to size \(3,\)"),
    (lambda s, v: s.choice(3, size=(tn.cast(v, "int64"),), replace=False), (4.0,),
     r"choice: size \(4,\) asks for 4 samples without replacement from parameter 'a', which "
     r"has only 3"),
    (lambda s, v: s.binomial(tn.cast(v, "int64"), 0.5, size=3), (-1.0,),
     r"binomial: parameter 'n' must be >= 0, got -1(\n|$)"),
    (lambda s, v: s.binomial(3, tn.stack([0.5, v])), (2.0,),
     r"binomial: parameter 'p' must be a probability in \[0, 1\], got 2\.0"),
    (lambda s, v: s.choice(tn.cast(v, "int64"), size=2), (0.0,),
     r"choice: parameter 'a' must be a positive integer \(the population size\), got 0(\n|$)"),
    (lambda s, v: s.choice(3, size=2, p=tn.stack([0.5, 0.5, v])), (0.5,),
     r"choice: parameter 'p' must sum to 1, got a sum of 1\.5(\n|$)"),
    (lambda s, v: s.choice(3, size=2, p=tn.stack([0.5, 0.5, v])), (-0.5,),
     r"choice: parameter 'p' must be a probability in \[0, 1\], got -0\.5"),
    (lambda s, v: s.choice(3, size=2, p=tn.stack([0.5, v])), (0.5,),
     r"choice: parameter 'p' must have one probability per element of a \(shape \(3,\)\), "
     r"got shape \(2,\)"),
    (lambda s, v: s.choice(3, size=2, replace=False, p=tn.stack([1.0, 0.0, v])), (0.0,),
     r"choice: size \(2,\) asks for 2 samples without replacement, but parameter 'p' gives "
     r"only 1 element\(s\) a nonzero probability"),
    (lambda s, v: s.choice(tn.zeros((tn.cast(v, "int64"),)), size=2), (0.0,),
     r"choice: parameter 'a' must not be empty when samples are taken"),
    (lambda s, v: s.permutation(tn.cast(v, "int64")), (-3.0,),
     r"permutation: parameter 'x' must be a length >= 0 \(or an array\), got -3(\n|$)"),
])
def test_a_bad_parameter_names_it_and_changes_no_state(mode, build, args, message):
    srng = RandomStream(8)
    v = tn.scalar("v")
    other = tn.shared(np.zeros(3), name="other")
    draw = build(srng, v)
    f = tn.function([v], draw, mode=mode, updates=[(other, other + 1)],
                    on_unused_input="ignore")
    state = state_of(draw)
    before = state.get_value()
    with pytest.raises(ValueError, match=message):
        f(*args)
    np.testing.assert_array_equal(state.get_value(), before)
    np.testing.assert_array_equal(other.get_value(), np.zeros(3))


def test_an_error_after_the_draw_leaves_the_state_unchanged(mode):
    srng = RandomStream(8)
    x = tn.vector("x")
    draw = srng.normal(size=3)
    f = tn.function([x], draw + x, mode=mode)
    f(np.zeros(3))
    before = state_of(draw).get_value()
    with pytest.raises(ValueError):
        f(np.zeros(4))
    np.testing.assert_array_equal(state_of(draw).get_value(), before)
    assert_same_normal(f(np.zeros(3)), reference(8, 0, 1).normal(size=3))


def test_errors_when_building():
    srng = RandomStream(0)
    with pytest.raises(ValueError, match=r"normal: parameter 'loc' of shape \(2,\) does not "
                                         r"broadcast to size \(3,\)"):
        srng.normal(np.zeros(2), size=3)
    with pytest.raises(ValueError, match=r"normal: parameter 'scale' must be finite and >= 0, "
                                         r"got -1\.0"):
        srng.normal(0.0, -1.0)
    with pytest.raises(ValueError, match=r"binomial: parameter 'n' must be >= 0, got -3"):
        srng.binomial(-3, 0.5)
    with pytest.raises(TypeError, match="normal: dtype must be a float dtype, got int64"):
        srng.normal(dtype="int64")
    with pytest.raises(TypeError, match="integers: parameter 'high' must be an integer"):
        srng.integers(0, 2.5)
    with pytest.raises(TypeError, match=r"normal: size shape\[0\]: expected an int"):
        srng.normal(size=(1.5,))
    with pytest.raises(TypeError, match="RandomStream: seed must be a non-negative int"):
        RandomStream("x")
    with pytest.raises(ValueError, match="RandomStream.seed: seed must be a non-negative int"):
        RandomStream(0).seed(-1)
    with pytest.raises(TypeError, match="permutation: takes no size"):
        srng._draw("permutation", (3,), size=2)


# -- memory ---------------------------------------------------------------------------


def test_the_state_advances_in_place(mode):
    srng = RandomStream(1)
    x = srng.uniform(size=4)
    f = tn.function([], x, mode=mode)
    assert any(isinstance(node.op, RandomVariable) and node.op.inplace
               for node in f.fgraph.apply_nodes)
    state = state_of(x)
    f()
    buffer = state.get_value(borrow=True, return_internal_type=True)
    f()
    assert state.get_value(borrow=True, return_internal_type=True) is buffer
    assert state.get_value()[2] == 2
    # without the rewrite: the same numbers, a new state each call
    plain = tn.function([], x, mode=tn.Mode(linker=mode.linker, exclude=["random_state_inplace"]))
    assert not any(getattr(node.op, "inplace", False) for node in plain.fgraph.apply_nodes)
    np.testing.assert_array_equal(plain(), reference(1, 0, 2).random(4))
    np.testing.assert_array_equal(f(), reference(1, 0, 3).random(4))


@pytest.mark.shares_buffers
@pytest.mark.parametrize("dist", ["normal", "binomial"])
def test_a_borrowed_draw_allocates_nothing_per_call(mode, dist):
    if mode.linker == "check":
        pytest.skip("the checking linker copies every node's inputs and outputs by design")
    n = 1_000_000
    srng = RandomStream(3)
    draw = getattr(srng, dist)
    params = (1.0, 2.0) if dist == "normal" else (20, 0.3)
    f = tn.function([], Out(draw(*params, size=n), borrow=True), mode=mode)
    fresh = tn.function([], draw(*params, size=n), mode=mode)

    def peak_per_call(fn):
        fn(), fn()
        tracemalloc.start()
        try:
            peaks = []
            for _ in range(3):
                tracemalloc.reset_peak()
                before = tracemalloc.get_traced_memory()[0]
                fn()
                peaks.append(tracemalloc.get_traced_memory()[1] - before)
        finally:
            tracemalloc.stop()
        return max(peaks)

    assert peak_per_call(fresh) >= n * 8                 # a fresh output each call
    assert peak_per_call(f) < n * 8 / 20                 # into last call's buffer
    if dist == "normal":
        assert_same_normal(f()[:1000], reference(3, 0, 5).normal(1.0, 2.0, 1000), loc=1.0)
    else:
        np.testing.assert_array_equal(f(), reference(3, 0, 5).generator().binomial(20, 0.3, n))


ELEMENTS = np.linspace(-1.0, 1.0, 1000, dtype=np.float32)
WEIGHTS = np.arange(1.0, 1001.0) / np.arange(1.0, 1001.0).sum()
BORROWED_DRAWS = {
    "permutation": (lambda srng: srng.permutation(1_000_000),
                    lambda g: g.permutation(1_000_000)),
    "choice of a range": (lambda srng: srng.choice(1000, size=1_000_000),
                          lambda g: g.choice(1000, 1_000_000)),
    "choice of elements": (lambda srng: srng.choice(ELEMENTS, size=1_000_000),
                           lambda g: g.choice(ELEMENTS, 1_000_000)),
    "weighted choice": (lambda srng: srng.choice(1000, size=1_000_000, p=WEIGHTS),
                        lambda g: g.choice(1000, 1_000_000, p=WEIGHTS)),
    "weighted choice of elements, no replacement": (
        lambda srng: srng.choice(ELEMENTS, size=(500,), replace=False, p=WEIGHTS),
        lambda g: g.choice(ELEMENTS, 500, replace=False, p=WEIGHTS)),
    "weighted choice among many": (      # a cdf beyond the stack's: allocated
        lambda srng: srng.choice(5000, size=1_000_000, p=np.full(5000, 1 / 5000)),
        lambda g: g.choice(5000, 1_000_000, p=np.full(5000, 1 / 5000))),
}


@pytest.mark.parametrize("dist", sorted(BORROWED_DRAWS))
def test_a_borrowed_permutation_or_choice_allocates_nothing_per_call_in_c(dist):
    """The C runtime shuffles a permutation in the draw's own buffer, and
    writes a choice's samples into it as they come (of an array: its
    elements, through no array of indices); what a way of choosing needs
    besides (a weighted choice's cdf) is of the population's size, and on
    the stack up to a few thousand elements."""
    draw, numpy_draw = BORROWED_DRAWS[dist]
    f = tn.function([], Out(draw(RandomStream(3)), borrow=True), mode=tn.Mode(linker="c"))
    f(), f()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        got = f()
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak < max(got.nbytes / 20, 4096), peak
    np.testing.assert_array_equal(got, numpy_draw(reference(3, 0, 2).generator()))


def test_a_borrowed_draw_allocates_no_device_memory_per_call(mode):
    if mode.linker != "cuda":
        pytest.skip("device memory: the cuda linker")
    runtime = cuda_runtime(emulated=mode.cuda_emulation)
    srng = RandomStream(3)
    x = srng.uniform(size=1000)
    f = tn.function([], Out(x, borrow=True), mode=mode)
    f(), f()
    with runtime.track() as usage:
        f()
    assert usage.n_allocations == 0, usage
    np.testing.assert_array_equal(f(), reference(3, 0, 3).random(1000))


def test_the_dask_linker_refuses_by_name():
    pytest.importorskip("dask")
    from tenure.linkers.dask.lower import LoweringError
    srng = RandomStream(0)
    with pytest.raises(LoweringError, match=r"no lowering for RandomVariable\{normal"):
        tn.function([], srng.normal(size=3), mode=tn.Mode(linker="dask", compute=True))


def test_a_large_draw_on_several_threads_gives_the_same_numbers():
    """The C runtime splits a large draw between threads (element i depends
    on i alone): the numbers are the Python linker's."""
    def draws(srng):
        return [srng.normal(1.0, 2.0, size=(7, 9000)), srng.uniform(size=50_001, dtype="float32"),
                srng.integers(-2 ** 62, 2 ** 62 + 3, size=40_000)]
    with tn.config.change_flags(openmp_elemwise_minsize=1000, openmp_threads=2):
        got = tn.function([], draws(RandomStream(31)), mode=tn.Mode(linker="c"))()
    want = tn.function([], draws(RandomStream(31)), mode=tn.Mode(linker="py"))()
    assert_same_normal(got[0], want[0], loc=1.0)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_array_equal(g, w)
