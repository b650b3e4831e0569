"""``tn.gradient``: derivatives, PyTensor's names -- ``grad``, and the
``jacobian`` and ``hessian`` built from it.

``jacobian(expression, wrt)`` is one gradient per element of
``expression``, computed by a loop (``tn.scan``) over the elements of the
flattened expression: element ``i``'s step takes ``grad(expression.flatten()[i],
wrt)``.  So it is symbolic like any graph -- compiled, on every linker,
differentiated again (``hessian`` is the jacobian of the gradient) -- and
the loop runs in the C linker's runtime.  The result for each ``wrt``
variable has the shape ``expression.shape + wrt.shape`` (JAX's convention;
PyTensor's for a vector expression); a 0-d expression's jacobian is its
gradient.
"""

from __future__ import annotations

from collections.abc import Sequence

from tenure.loops import scan
from tenure.symbolic.grad import (DisconnectedInputError, grad, like_wrt, stop_gradient,
                                  wrt_variables)
from tenure.symbolic.graph import Variable
from tenure.symbolic.ops.creation import arange
from tenure.symbolic.ops.shape import reshape, shape_tuple
from tenure.symbolic.variable import as_tensor_variable

__all__ = ["DisconnectedInputError", "grad", "hessian", "jacobian", "stop_gradient"]


def jacobian(expression, wrt, consider_constant: Sequence[Variable] | None = None,
             disconnected_inputs: str = "raise"):
    """The derivatives of every element of ``expression`` with respect to
    ``wrt`` (a variable or a list of them; the result has the same
    structure): for each, shape ``expression.shape + wrt.shape``.
    ``consider_constant`` and ``disconnected_inputs`` are :func:`grad`'s."""
    y = as_tensor_variable(expression)
    wrt_list = wrt_variables(wrt, "jacobian")
    if y.ndim == 0:
        return grad(y, wrt, consider_constant, disconnected_inputs)
    flat = reshape(y, (-1,))

    def row(i):
        return grad(flat[i], wrt_list, consider_constant, disconnected_inputs)

    rows, _ = scan(row, sequences=[arange(flat.shape[0])], return_list=True)
    return like_wrt([reshape(r, shape_tuple(y) + shape_tuple(v)) for r, v in zip(rows, wrt_list)],
                    wrt)


def hessian(cost, wrt, consider_constant: Sequence[Variable] | None = None,
            disconnected_inputs: str = "raise"):
    """The second derivatives of the scalar ``cost`` with respect to each
    ``wrt`` variable (a variable or a list of them): for each, shape
    ``wrt.shape + wrt.shape``, the jacobian of its gradient."""
    cost = as_tensor_variable(cost)
    if cost.ndim != 0:
        raise ValueError(f"hessian: cost must be a scalar (0-d), got {cost} ({cost.type})")
    return like_wrt([jacobian(grad(cost, v, consider_constant, disconnected_inputs), v,
                              consider_constant, disconnected_inputs)
                     for v in wrt_variables(wrt, "hessian")], wrt)
