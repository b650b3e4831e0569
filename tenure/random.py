"""Random streams: ``tn.random.RandomStream(seed)``, PyTensor's name and idiom.

Each draw method (``uniform``, ``normal``, ``binomial``, ``bernoulli``,
``integers``, ``choice``, ``permutation``) makes a new *stream*: a shared
variable holding a Philox generator state (a ``uint64`` vector: key and
draw counter, see :mod:`tenure.symbolic.ops.random`) whose
``default_update`` is the state after the draw.  A function that computes
the draw therefore advances the state on every call with no user code;
``updates=[(state, ...)]``, ``givens={state: ...}`` or
``no_default_updates`` override it.  ``seed(s)`` reseeds every stream the
object made.

The same seed gives the same numbers on every linker (the draw is a pure
function of the state) and after pickling a function; a call that raises
changes no state.
"""

from __future__ import annotations

import numbers

import numpy as np

from tenure.symbolic.ops.random import (STATE_LENGTH, NotDifferentiableError, RandomVariable,
                                        initial_state, random_variable)
from tenure.symbolic.shared import SharedVariable, shared

__all__ = ["NotDifferentiableError", "RandomStream", "RandomVariable"]


def _check_seed(seed, what: str):
    if seed is None:
        return int(np.random.SeedSequence().entropy)
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (numbers.Integral, np.integer)):
        raise TypeError(f"{what}: seed must be a non-negative int or None, got "
                        f"{type(seed).__name__} {seed!r}")
    if seed < 0:
        raise ValueError(f"{what}: seed must be a non-negative int or None, got {seed}")
    return int(seed)


class RandomStream:
    """Symbolic random draws from seeded Philox streams.

    ``seed``: a non-negative int (the same seed gives the same numbers), or
    None for fresh entropy.  Every draw method returns a symbolic draw and
    makes a stream whose state (a shared variable, in :attr:`state_updates`
    with its new value) advances each time a function computes the draw.
    Parameters broadcast like NumPy's; ``size`` (an int, a tuple of ints or
    0-d integer variables, or an integer vector of known length) may be
    symbolic; ``dtype`` defaults to ``config.floatX`` for ``uniform`` and
    ``normal`` and to ``int64`` for the others.
    """

    def __init__(self, seed: int | None = None):
        self.default_seed = _check_seed(seed, "RandomStream")
        #: the seed the streams were last seeded with
        self.current_seed = self.default_seed
        #: ``(state, the draw's new state)`` per stream made, in order
        self._streams: list[tuple[SharedVariable, object]] = []

    @property
    def states(self) -> list[SharedVariable]:
        """The shared state of every stream made, in order."""
        return [state for state, _ in self._streams]

    @property
    def state_updates(self) -> list[tuple[SharedVariable, object]]:
        """``(state, new state)`` per stream made, in order (as PyTensor's).
        The new state is the state's ``default_update``: the draw's, or for
        a stream drawn inside a loop the loop's final state (``tn.scan``
        sets it), so these updates advance a stream as the draw does; the
        draw's new state where the default update was removed."""
        return [(state, new if state.default_update is None else state.default_update)
                for state, new in self._streams]

    def seed(self, seed: int | None = None) -> None:
        """Reseed every stream made so far (and those made later) with
        ``seed`` (None: fresh entropy): stream ``i`` restarts from the state
        a new ``RandomStream(seed)``'s ``i``-th stream starts from."""
        self.current_seed = _check_seed(seed, "RandomStream.seed")
        for i, state in enumerate(self.states):
            state.set_value(initial_state(self.current_seed, i))

    def updates(self) -> list:
        """``state_updates`` as a list of pairs (for ``function(updates=...)``
        where default updates are turned off)."""
        return list(self.state_updates)

    def _draw(self, dist: str, params, size=None, dtype=None, replace=None, name=None):
        index = len(self._streams)
        state = shared(initial_state(self.current_seed, index), name=f"{dist}_state",
                       shape=(STATE_LENGTH,))
        new_state, draw = random_variable(dist, state, params, size=size, dtype=dtype,
                                          replace=replace)
        state.default_update = new_state
        self._streams.append((state, new_state))
        if name is not None:
            draw.name = name
        return draw

    def uniform(self, low=0.0, high=1.0, size=None, dtype=None, name=None):
        """Draws uniform on ``[low, high)`` (``high >= low``, both finite);
        differentiable in ``low`` and ``high``."""
        return self._draw("uniform", (low, high), size, dtype, name=name)

    def normal(self, loc=0.0, scale=1.0, size=None, dtype=None, name=None):
        """Gaussian draws (``scale >= 0``); differentiable in ``loc`` and ``scale``."""
        return self._draw("normal", (loc, scale), size, dtype, name=name)

    def binomial(self, n, p, size=None, dtype="int64", name=None):
        """Successes in ``n`` trials (an integer ``>= 0``) of probability ``p``."""
        return self._draw("binomial", (n, p), size, dtype, name=name)

    def bernoulli(self, p, size=None, dtype="int64", name=None):
        """1 with probability ``p`` (in [0, 1]), else 0."""
        return self._draw("bernoulli", (p,), size, dtype, name=name)

    def integers(self, low, high=None, size=None, dtype="int64", name=None):
        """Integers in ``[low, high)`` (NumPy's ``Generator.integers``:
        ``integers(high)`` draws from ``[0, high)``)."""
        if high is None:
            low, high = 0, low
        return self._draw("integers", (low, high), size, dtype, name=name)

    def choice(self, a, size=None, replace=True, p=None, name=None):
        """Samples of ``a`` (a vector, or an int ``n`` for ``arange(n)``), with
        the probabilities ``p`` (uniform when None), with or without
        replacement."""
        params = (a,) if p is None else (a, p)
        return self._draw("choice", params, size, None, replace=bool(replace), name=name)

    def permutation(self, x, name=None):
        """A random permutation of ``arange(x)`` (``x`` an int), or a copy of
        ``x`` shuffled along its first axis."""
        return self._draw("permutation", (x,), None, None, name=name)
