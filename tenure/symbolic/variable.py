"""Tensor variables: the NumPy-like face of graph variables.

:class:`TensorMethods` gives a variable the operators and methods a NumPy user
expects (``x + 1``, ``x.sum(axis=0)``, ``x.T``, ``x[1:, None]``,
``x.astype("float32")``, ``x.shape``, ``x.eval(...)``).  The ops live in
:mod:`tenure.symbolic.ops`; they are imported lazily here because they import
this module to convert their arguments.
"""

from __future__ import annotations

import numbers

import numpy as np

from tenure.symbolic.graph import Constant, Variable
from tenure.symbolic.types import TensorType, base_ndarray, python_scalar_dtype


def _ops():
    from tenure.symbolic import ops
    return ops


#: ``compile(inputs, output) -> callable``, used by :meth:`TensorMethods.eval`.
#: The function layer registers it (:func:`register_eval_compiler`) when
#: :mod:`tenure.function` is imported, which ``import tenure`` always does:
#: symbolic sits below that layer and never imports it.
_eval_compiler = None


def register_eval_compiler(compile) -> None:
    """Make ``compile(inputs, output)`` what :meth:`TensorMethods.eval` compiles with."""
    global _eval_compiler
    _eval_compiler = compile


class TensorMethods:
    """Operators and methods shared by tensor variables, constants and shared variables."""

    __array_priority__ = 1000  # let `ndarray + var` defer to us
    __array_ufunc__ = None     # make NumPy return NotImplemented for our reflected ops

    # -- static information ---------------------------------------------------
    @property
    def ndim(self) -> int:
        return self.type.ndim

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def broadcastable(self):
        return self.type.broadcastable

    @property
    def shape(self):
        """The shape as a symbolic int64 vector (index it: ``x.shape[0]``)."""
        return _ops().shape(self)

    @property
    def size(self):
        return _ops().prod(self.shape)

    @property
    def T(self):
        return _ops().transpose(self)

    def __len__(self):
        raise TypeError("len() of a symbolic variable is not known when the graph is built; "
                        "use x.shape[0]")

    def __bool__(self):
        raise TypeError(f"the truth value of symbolic variable {self} is unknown until the "
                        "function runs; use tn.where, or compare with tn.all/tn.any")

    def __iter__(self):
        raise TypeError(f"cannot iterate over symbolic variable {self}")

    # -- arithmetic -----------------------------------------------------------
    def __add__(self, other): return _ops().add(self, other)
    def __radd__(self, other): return _ops().add(other, self)
    def __sub__(self, other): return _ops().sub(self, other)
    def __rsub__(self, other): return _ops().sub(other, self)
    def __mul__(self, other): return _ops().mul(self, other)
    def __rmul__(self, other): return _ops().mul(other, self)
    def __truediv__(self, other): return _ops().true_divide(self, other)
    def __rtruediv__(self, other): return _ops().true_divide(other, self)
    def __floordiv__(self, other): return _ops().floor_divide(self, other)
    def __rfloordiv__(self, other): return _ops().floor_divide(other, self)
    def __mod__(self, other): return _ops().mod(self, other)
    def __rmod__(self, other): return _ops().mod(other, self)
    def __pow__(self, other): return _ops().power(self, other)
    def __rpow__(self, other): return _ops().power(other, self)
    def __matmul__(self, other): return _ops().matmul(self, other)
    def __rmatmul__(self, other): return _ops().matmul(other, self)
    def __neg__(self): return _ops().neg(self)
    def __pos__(self): return self
    def __abs__(self): return _ops().abs(self)
    def __invert__(self): return _ops().invert(self)
    def __and__(self, other): return _ops().bitwise_and(self, other)
    def __rand__(self, other): return _ops().bitwise_and(other, self)
    def __or__(self, other): return _ops().bitwise_or(self, other)
    def __ror__(self, other): return _ops().bitwise_or(other, self)
    def __xor__(self, other): return _ops().bitwise_xor(self, other)
    def __rxor__(self, other): return _ops().bitwise_xor(other, self)

    # Comparisons build graphs; `==` stays identity so variables can be dict keys.
    def __lt__(self, other): return _ops().less(self, other)
    def __le__(self, other): return _ops().less_equal(self, other)
    def __gt__(self, other): return _ops().greater(self, other)
    def __ge__(self, other): return _ops().greater_equal(self, other)

    # -- methods ---------------------------------------------------------------
    def astype(self, dtype): return _ops().cast(self, dtype)
    def sum(self, axis=None, keepdims=False): return _ops().sum(self, axis=axis, keepdims=keepdims)
    def prod(self, axis=None, keepdims=False): return _ops().prod(self, axis=axis, keepdims=keepdims)
    def mean(self, axis=None, keepdims=False): return _ops().mean(self, axis=axis, keepdims=keepdims)
    def max(self, axis=None, keepdims=False): return _ops().max(self, axis=axis, keepdims=keepdims)
    def min(self, axis=None, keepdims=False): return _ops().min(self, axis=axis, keepdims=keepdims)
    def argmax(self, axis=None, keepdims=False): return _ops().argmax(self, axis=axis, keepdims=keepdims)
    def argmin(self, axis=None, keepdims=False): return _ops().argmin(self, axis=axis, keepdims=keepdims)
    def all(self, axis=None, keepdims=False): return _ops().all(self, axis=axis, keepdims=keepdims)
    def any(self, axis=None, keepdims=False): return _ops().any(self, axis=axis, keepdims=keepdims)
    def dot(self, other): return _ops().dot(self, other)
    def reshape(self, *shape):
        if len(shape) == 1 and not isinstance(shape[0], (numbers.Integral, Variable)):
            shape = shape[0]
        return _ops().reshape(self, shape)
    def transpose(self, *axes):
        if len(axes) == 1 and not isinstance(axes[0], numbers.Integral):
            axes = axes[0]  # x.transpose((1, 0)) or x.transpose(None)
        return _ops().transpose(self, axes if axes else None)
    def dimshuffle(self, *pattern):
        """PyTensor's ``x.dimshuffle(1, 'x', 0)`` (or one tuple/list): reorder axes,
        add length-1 axes ('x') and drop axes of static length 1 (a view)."""
        from tenure.symbolic.ops.shape import dimshuffle
        if len(pattern) == 1 and isinstance(pattern[0], (list, tuple)):
            pattern = pattern[0]
        return dimshuffle(self, pattern)
    def flatten(self, ndim=1): return _ops().flatten(self, ndim=ndim)
    def squeeze(self, axis=None): return _ops().squeeze(self, axis=axis)
    def clip(self, min, max): return _ops().clip(self, min, max)
    def __getitem__(self, index): return _ops().getitem(self, index)
    def set(self, value):
        """For ``x[idx].set(v)``: ``x`` with ``x[idx]`` replaced by ``v`` (a new variable)."""
        return _ops().set_subtensor(self, value)
    def inc(self, value):
        """For ``x[idx].inc(v)``: ``x`` with ``v`` added at ``x[idx]`` (duplicates add up)."""
        return _ops().inc_subtensor(self, value)
    def take(self, indices, axis=None): return _ops().take(self, indices, axis=axis)
    def nonzero(self): return _ops().nonzero(self)
    def var(self, axis=None, ddof=0, keepdims=False):
        return _ops().var(self, axis=axis, ddof=ddof, keepdims=keepdims)
    def std(self, axis=None, ddof=0, keepdims=False):
        return _ops().std(self, axis=axis, ddof=ddof, keepdims=keepdims)
    def cumsum(self, axis=None): return _ops().cumsum(self, axis=axis)
    def cumprod(self, axis=None): return _ops().cumprod(self, axis=axis)
    def sort(self, axis=-1): return _ops().sort(self, axis=axis)
    def argsort(self, axis=-1): return _ops().argsort(self, axis=axis)

    def eval(self, inputs_to_values=None):
        """Compile and run a function computing this variable.

        ``inputs_to_values`` maps the root variables it depends on to values.
        """
        if _eval_compiler is None:
            raise RuntimeError("eval() needs the function layer: import tenure first")
        inputs_to_values = dict(inputs_to_values or {})
        fn = _eval_compiler(list(inputs_to_values), self)
        return fn(*inputs_to_values.values())


class TensorVariable(TensorMethods, Variable):
    """A symbolic tensor: a graph variable with a :class:`TensorType`."""


class TensorConstant(TensorMethods, Constant):
    """A tensor with a fixed value.

    ``weak`` marks constants made from bare Python numbers: like NumPy 2's
    Python scalars, they take the dtype of the tensors they are combined with.
    """

    def __init__(self, type, data, name=None, weak_value=None):
        super().__init__(type, data, name=name)
        #: the Python number a weak constant was made from (None: strongly typed)
        self.weak_value = weak_value
        self.data.setflags(write=False)  # a constant's buffer is protected

    @property
    def weak(self) -> bool:
        return self.weak_value is not None

    @property
    def value(self):
        return self.data

    def clone(self, name=None):
        return TensorConstant(self.type, self.data, name=self.name if name is None else name,
                              weak_value=self.weak_value)


def constant(value, name: str | None = None, dtype=None, shape=None) -> TensorConstant:
    """A constant tensor holding ``value`` (copied).

    Python floats become ``config.floatX``, ints int64, bools bool, unless
    ``dtype`` says otherwise.
    """
    if isinstance(value, Variable):
        raise TypeError(f"constant(): expected a value, got symbolic variable {value}")
    if isinstance(value, np.ma.MaskedArray):
        base_ndarray(value, what=f"constant() value{'' if name is None else ' ' + name}")
    if dtype is None:
        if isinstance(value, (np.ndarray, np.generic)):
            dtype = value.dtype
        elif isinstance(value, numbers.Number):
            dtype = python_scalar_dtype(value)
        else:
            arr = np.asarray(value)
            dtype = arr.dtype
            if arr.dtype.kind == "f":
                from tenure import config
                dtype = config.floatX
    arr = np.array(value, dtype=dtype)  # a private copy
    if shape is None:
        shape = arr.shape
    return TensorConstant(TensorType(arr.dtype, shape), arr, name=name)


def as_tensor_variable(value, name: str | None = None, ndim: int | None = None) -> Variable:
    """``value`` as a tensor variable: variables pass through, Python numbers become
    weak constants, arrays and lists constants."""
    if isinstance(value, Variable):
        var = value
        if not isinstance(var.type, TensorType):
            raise TypeError(f"expected a tensor variable, got {var} of type {var.type}")
    elif isinstance(value, numbers.Number) and not isinstance(value, np.generic):
        dtype = python_scalar_dtype(value)
        var = TensorConstant(TensorType(dtype, ()), np.array(value, dtype=dtype),
                             name=name, weak_value=value)
    elif isinstance(value, (np.ndarray, np.generic, list, tuple)):
        if isinstance(value, (list, tuple)) and any(isinstance(v, Variable)
                                                    for v in _flatten_nested(value)):
            var = _ops().stack_scalars(value)
        else:
            var = constant(value, name=name)
    else:
        raise TypeError(f"cannot convert {type(value).__name__} ({value!r}) to a tensor variable")
    if ndim is not None and var.ndim != ndim:
        raise TypeError(f"expected a {ndim}-d tensor, got {var} with {var.ndim} dimension(s)")
    return var


def _flatten_nested(value):
    for item in value:
        if isinstance(item, (list, tuple)):
            yield from _flatten_nested(item)
        else:
            yield item
