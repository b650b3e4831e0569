"""How the C linker runs ``RandomVariable``: a step of the graph's module
that calls the runtime's ``tn_rng_step`` (``src/random_step.c``).

Which draws, of any dtype but float16 (``uniform`` and ``normal``: float32
and float64; ``integers``: integer dtypes):
- ``uniform``, ``normal``, ``bernoulli`` (and ``binomial`` with ``n`` a
  constant 1, which draws the same numbers) and ``integers``, whose element
  ``i`` depends on the state and ``i`` alone: drawn with Philox element by
  element (``src/random.c``, ``include/tenure_philox.h``);
- ``binomial``, ``choice`` and ``permutation``, NumPy's sequential
  algorithms over the stream: drawn with NumPy's own C distributions, which
  the runtime links (``src/random_sequential.c``).  Where NumPy lacks that
  library (:func:`~tenure.linkers.c.runtime.has_numpy_random`), these run
  the op's ``perform`` (a ``"py"`` step), as float16 draws do.
The numbers are the reference's (:meth:`RandomVariable.perform`): the tests
compare them on every linker.

A counter-indexed draw of ``config.openmp_elemwise_minsize`` elements or
more runs on ``config.openmp_threads`` threads, as the elementwise loops do
(the same numbers however many: element ``i`` depends on ``i`` alone); a
sequential draw runs on one.

The step writes both outputs (``CEntry(many_outputs=True)``): the state
after the draw -- the state's own buffer when the node is in place, else
last call's buffer or a new one -- and the draw, into last call's buffer
when it fits (a borrowed output allocates nothing per call).  Every check
(state, size, parameters) comes before any write.
"""

from __future__ import annotations

import sys

import numpy as np

from tenure.linkers.c.cgen import c_string, comment, typenum
from tenure.linkers.c.dispatch import CEntry, register_c_op
from tenure.linkers.c.elemwise import parallel_settings
from tenure.linkers.c.runtime import has_numpy_random
from tenure.symbolic.graph import Apply
from tenure.symbolic.ops.random import RandomVariable, single_trial

__all__ = ["KINDS", "SEQUENTIAL", "has_c_code", "kind_of", "step_function"]

#: the draws the runtime computes, and their TN_RNG_* values (tenure_runtime.h)
KINDS = {"uniform": 0, "normal": 1, "bernoulli": 2, "integers": 3, "binomial": 4, "choice": 5,
         "permutation": 6}
#: the draws that need NumPy's random library (the others need nothing)
SEQUENTIAL = ("binomial", "choice", "permutation")

_FLOATS = ("float32", "float64")


def kind_of(node: Apply) -> str:
    """The runtime's draw for ``node``: its distribution, or ``"bernoulli"``
    for a binomial of one trial."""
    return "bernoulli" if single_trial(node) else node.op.dist


def has_c_code(node: Apply) -> bool:
    """Whether the runtime draws ``node`` (see the module doc)."""
    op = node.op
    if not isinstance(op, RandomVariable):
        return False
    kind = kind_of(node)
    if kind in SEQUENTIAL and not has_numpy_random():
        return False
    dtype = np.dtype(op.dtype)
    if op.dist in ("uniform", "normal"):
        return dtype.name in _FLOATS
    if op.dist == "integers":
        return dtype.kind in "iu"
    return dtype.kind in "biu" or dtype.name in _FLOATS


def step_function(k: int, step, offsets: tuple, label: str, context=None) -> tuple[str, str]:
    """The step of a draw node (the ``step_code`` of its entry): a
    description of the node and a call of ``tn_rng_step``, which takes the
    draw's buffer from the plan by the draw's entry in the shape table
    (``offsets[1]``).  ``context`` is not needed."""
    node = step.node
    if not has_c_code(node):
        raise NotImplementedError(f"{node.op} has no C code")
    op = node.op
    kind = kind_of(node)
    inputs = list(step.inputs)
    params = list(op.spec.params[:len(inputs) - 1 - (op.n_size or 0)])   # choice: p or not
    if kind != op.dist:                   # a binomial of one trial: n is not read
        del inputs[1 + (op.n_size or 0)]
        params = ["p"]
    n_params = len(params)
    names = ", ".join(c_string(name) for name in params) + (", NULL" if n_params == 1 else "")
    parallel = parallel_settings()
    minsize, threads = (-1, 0) if parallel is None else (max(parallel.minsize, 1),
                                                         parallel.threads)
    description = (f"static const tn_rng_node tn_rng{k} = {{{c_string(op.dist)}, "
                   f"{c_string(f'tenure: {label}')}, {{{names}}}, {KINDS[kind]}, "
                   f"{int(op.standard)}, {int(op.inplace)}, "
                   f"{-1 if op.n_size is None else op.n_size}, {n_params}, "
                   f"{typenum(op.dtype)}, {node.outputs[1].ndim}, {minsize}, {threads}, "
                   f"{int(bool(op.replace))}}};")
    ins = ", ".join(str(s) for s in inputs)
    outs = ", ".join(str(s) for s in step.outputs)
    code = "\n".join([
        f"/* step {k}: {comment(label)} */",
        description,
        f"static const Py_ssize_t tn_rng{k}_ins[] = {{{ins}}}, tn_rng{k}_outs[] = {{{outs}}};",
        f"static int tn_step{k}(PyObject **S, const npy_intp *planned, PyObject **aside)",
        "{",
        f"    return tn_rng_step(&tn_rng{k}, S, tn_rng{k}_ins, tn_rng{k}_outs, tn_graph_inputs, "
        f"TN_N_INPUTS, planned, aside, {offsets[1]});",
        "}", ""])
    return "", code


# How the C linker runs RandomVariable (.dispatch): a step of the graph's
# module writing both outputs.
register_c_op(RandomVariable, CEntry("random", sys.modules[__name__], step_code=step_function,
                                     many_outputs=True))
