"""The C linker's dispatch table (:mod:`tenure.linkers.c.dispatch`): a new op
joins the C linker by registering a compiled step -- C of its own, in the
graph's module -- with no new step kind in the runtime's interpreter; the
table follows subclasses; an op without an entry still runs its perform."""

import numpy as np
import pytest

import tenure as tn
from tenure.linkers.c import dispatch, module
from tenure.linkers.c.cgen import c_string
from tenure.linkers.c.dispatch import CContext, CEntry, lookup, register_c_op, unregister_c_op
from tenure.symbolic.graph import Apply, Op
from tenure.symbolic.ops.blas import Dot, Outer
from tenure.symbolic.ops.elemwise import Elemwise
from tenure.symbolic.ops.gemm import Gemm
from tenure.symbolic.ops.reduce import Reduce, Var
from tenure.symbolic.variable import as_tensor_variable

PY = tn.Mode(linker="py")
C = tn.Mode(linker="c")


class _Squaring(Op):
    """``x * x``, elementwise; counts the calls of its perform (per class).
    No entry in the table: the base of the test ops below."""

    __props__ = ()
    performs = 0

    def make_node(self, x):
        x = as_tensor_variable(x)
        return Apply(self, [x], [x.type()])

    def perform(self, node, inputs, output_storage):
        type(self).performs += 1
        output_storage[0][0] = np.asarray(inputs[0] * inputs[0])

    def infer_shape(self, node, input_shapes):
        return [input_shapes[0]]


class Square(_Squaring):
    """Registered as a compiled C step by the tests."""

    performs = 0


class Cube(Square):
    """A subclass with an entry of its own in some tests."""


class Unregistered(_Squaring):
    """``x * x`` with no entry in the table (nor has its base)."""

    performs = 0


_C_TYPES = {"float32": ("NPY_FLOAT32", "npy_float32"), "float64": ("NPY_FLOAT64", "npy_float64")}


class SquareC:
    """The family object: which Square nodes have C code, and that C (the
    contract of :mod:`tenure.linkers.c.dispatch`)."""

    def has_c_code(self, node):
        return node.inputs[0].dtype in _C_TYPES and node.outputs[0].dtype == node.inputs[0].dtype

    def c_function(self, node, fname):
        x = node.inputs[0]
        tnum, ctype = _C_TYPES[x.dtype]
        name, dtype, nd = c_string(fname), c_string(x.dtype), x.ndim
        return f"""
static int {fname}_shape(PyArrayObject **inputs, npy_intp *shape)
{{
    if (tn_bl_check({name}, "input 0", inputs[0], {tnum}, {dtype}, {nd}) < 0)
        return -1;
    for (int d = 0; d < {nd}; d++)
        shape[d] = PyArray_DIM(inputs[0], d);
    return 0;
}}

static int {fname}(PyArrayObject **inputs, PyArrayObject **outputs)
{{
    npy_intp shape[{max(nd, 1)}];
    PyArrayIterObject *it, *ot;
    /* the planned shape made the buffer: check the inputs and it again here */
    if ({fname}_shape(inputs, shape) < 0
            || tn_bl_check_out({name}, outputs[0], {tnum}, {dtype}, {nd}, shape) < 0)
        return -1;
    it = (PyArrayIterObject *)PyArray_IterNew((PyObject *)inputs[0]);
    ot = it == NULL ? NULL : (PyArrayIterObject *)PyArray_IterNew((PyObject *)outputs[0]);
    if (ot == NULL) {{
        Py_XDECREF(it);
        return -1;
    }}
    while (it->index < it->size) {{
        {ctype} v;
        memcpy(&v, it->dataptr, sizeof v);   /* any alignment */
        v = v * v;
        memcpy(ot->dataptr, &v, sizeof v);
        PyArray_ITER_NEXT(it);
        PyArray_ITER_NEXT(ot);
    }}
    Py_DECREF(it);
    Py_DECREF(ot);
    return 0;
}}
"""


@pytest.fixture
def square_registered():
    """Square registered as a compiled step for the test, dropped after."""
    previous = register_c_op(Square, CEntry("square", SquareC()))
    assert previous is None
    yield
    unregister_c_op(Square)


def _steps(f):
    """``(kind, interpreter step kind, node)`` per step of a C function."""
    thunk = f._thunk
    return [(kind, s.kind, step.node) for kind, s, step in
            zip(thunk.graph.kinds, thunk.graph.description.steps, thunk.plan.steps)]


# --------------------------------------------------------------------------
# The table


def test_the_built_in_families_are_registered():
    assert lookup(Elemwise).kind == "elemwise" and lookup(Elemwise).step == "elemwise"
    assert lookup(Dot).step == "product" and lookup(Gemm).step == "gemm"
    assert lookup(Outer).kind == "blas" and lookup(Outer).compiled
    assert lookup(Square) is None and lookup(Unregistered) is None


def test_lookup_follows_subclasses(square_registered):
    entry = lookup(Square)
    assert entry.kind == "square"
    assert lookup(Cube) is entry                   # Cube's nearest registered base
    assert lookup(Var) is lookup(Reduce)           # and so for the built-in ones
    own = CEntry("cube", SquareC())
    register_c_op(Cube, own)
    try:
        assert lookup(Cube) is own and lookup(Square) is entry
    finally:
        assert unregister_c_op(Cube) is own
    assert lookup(Cube) is entry


def test_register_checks_its_arguments():
    with pytest.raises(TypeError, match="not a class"):
        register_c_op(Square(), CEntry("square", SquareC()))
    with pytest.raises(TypeError, match="not a CEntry"):
        register_c_op(Square, SquareC())
    with pytest.raises(ValueError, match="step 'loop'"):
        CEntry("square", SquareC(), step="loop")
    with pytest.raises(ValueError, match="perform"):
        CEntry("py", SquareC())


# --------------------------------------------------------------------------
# A new op as a compiled step


def test_a_registered_op_runs_as_a_compiled_c_step(cc_or_skip, square_registered, rng):
    x = tn.matrix("x")
    outs = [Square()(x) * 2.0 + 1.0, Square()(x[::-1])]
    f_py = tn.function([x], outs, mode=PY)
    f_c = tn.function([x], outs, mode=C, profile=True)
    squares = [(kind, code) for kind, code, node in _steps(f_c) if isinstance(node.op, Square)]
    assert squares == [("square", module.COMPILED)] * 2   # no new interpreter step kind
    assert f_c._thunk.graph.source is not None           # C in the graph's module
    Square.performs = 0
    arg = rng.normal(size=(6, 4))
    for value in (arg, arg[:, ::2], arg[::-2], np.zeros((0, 3)), np.ones((1, 1))):
        for got, want in zip(f_c(value), f_py(value)):
            np.testing.assert_allclose(got, want, rtol=1e-12)
    assert Square.performs == 5 * 2      # the Python linker's; never the C linker's
    rows = {n.node: n for n in f_c.profile.nodes}
    assert all(not rows[node].python for _, _, node in _steps(f_c)
               if isinstance(node.op, Square))


def test_a_compiled_step_on_the_compiled_call_path(cc_or_skip, square_registered, rng):
    x = tn.vector("x", dtype="float32")
    f_c = tn.function([x], tn.Out(Square()(x), borrow=True), mode=C)
    Square.performs = 0
    for n in (5, 5, 0, 9):
        arg = rng.normal(size=n).astype("float32")
        out = f_c(arg)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, arg * arg)
    assert Square.performs == 0


def test_an_entry_that_says_no_falls_back_to_perform(cc_or_skip, square_registered):
    x = tn.vector("x", dtype="int64")     # SquareC has no C for int64
    f_c = tn.function([x], Square()(x), mode=C)
    assert [kind for kind, _, _ in _steps(f_c)] == ["py"]
    Square.performs = 0
    np.testing.assert_array_equal(f_c(np.arange(4)), np.arange(4) ** 2)
    assert Square.performs == 1


def test_an_unregistered_op_still_runs_its_perform(cc_or_skip, rng):
    x = tn.vector("x")
    outs = [Unregistered()(tn.exp(x)) + 1.0]
    f_py, f_c = tn.function([x], outs, mode=PY), tn.function([x], outs, mode=C, profile=True)
    steps = _steps(f_c)
    mine = [(kind, code) for kind, code, node in steps if isinstance(node.op, Unregistered)]
    assert mine == [("py", module.PY)]
    assert any(kind == "elemwise" for kind, _, _ in steps)   # C around it
    Unregistered.performs = 0
    arg = rng.normal(size=7)
    np.testing.assert_allclose(f_c(arg)[0], f_py(arg)[0], rtol=1e-12)
    assert Unregistered.performs == 2
    assert all(n.python == isinstance(n.node.op, Unregistered) for n in f_c.profile.nodes)


# --------------------------------------------------------------------------
# The context entries are given


class _Recording(CEntry):
    """An entry that keeps the contexts it is given (as an op holding an
    inner graph would use them: to compile it with the same linker)."""

    def has_c_code(self, node, context=None):
        self.family.seen.append(context)
        return super().has_c_code(node, context)


def test_entries_are_given_the_linker_and_the_plan(cc_or_skip):
    family = SquareC()
    family.seen = []
    register_c_op(Square, _Recording("square", family))
    try:
        x = tn.vector("x")
        f_c = tn.function([x], Square()(x) + 1.0, mode=C)
    finally:
        unregister_c_op(Square)
    contexts = [c for c in family.seen if c is not None]
    assert contexts and all(isinstance(c, CContext) for c in contexts)
    from tenure.linkers.c.linker import CLinker
    assert any(isinstance(c.linker, CLinker) and c.plan is f_c._thunk.plan for c in contexts)
    assert dispatch.lookup(Square) is None
