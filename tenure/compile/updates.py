"""The new value of a variable, checked: what an update of a shared variable
(``updates=``, ``default_update``) and a stateful input (``In(x, update=)``)
must be -- the variable's dtype, ndim and static lengths."""

from __future__ import annotations

from tenure.symbolic.graph import Constant, Variable
from tenure.symbolic.ops.shape import specify_shape
from tenure.symbolic.types import TensorType
from tenure.symbolic.variable import as_tensor_variable


def check_update(var: Variable, expr, what: str) -> Variable:
    """``expr`` as the new value of ``var``, or a TypeError: same dtype and
    ndim, no contradicting static length, and no static length 1 where
    ``var``'s length can change (PyTensor refuses that too: there a static
    length 1 means broadcastable, and an update must not make a variable
    broadcastable; here it usually means a reduction kept a dimension)."""
    expr = as_tensor_variable(expr)
    if isinstance(expr, Constant) and expr.type != var.type:
        expr = var.type.make_constant(expr.data)
    if not (isinstance(expr.type, TensorType) and expr.dtype == var.dtype
            and expr.ndim == var.ndim and var.type.is_compatible_replacement(expr.type)):
        raise TypeError(f"{what} {var} has type {expr.type}, but {var} has type {var.type} "
                        f"({update_fix(var, expr)})")
    ones = [axis for axis, (mine, its) in enumerate(zip(var.type.shape, expr.type.shape))
            if mine is None and its == 1]
    if ones:
        raise TypeError(
            f"{what} {var} has type {expr.type}, statically of length 1 in axis "
            f"{', '.join(map(str, ones))}, where {var} ({var.type}) has a length that can "
            f"change; as PyTensor does, tenure refuses an update that would make a variable "
            f"of any length broadcastable.  If the length is meant to be 1, give the shared "
            f"variable that static length (shared(value, shape=...)); if the value should "
            f"take {var}'s shape, broadcast it: tn.broadcast_to(expr, {var}.shape)")
    if any(mine is not None and its is None
           for mine, its in zip(var.type.shape, expr.type.shape)):
        # The variable's static lengths hold for every value it will have: a
        # call whose new value has others raises (before anything is written).
        expr = specify_shape(expr, var.type.shape)
    return expr


def update_fix(var: Variable, expr) -> str:
    """What would make ``expr`` a new value ``var`` accepts: only the changes
    it needs (a cast when the dtypes differ, a reshape when the dimensions do)."""
    if not isinstance(expr.type, TensorType):
        return f"the new value must be a tensor of type {var.type}"
    fixes = []
    if expr.dtype != var.dtype:
        fixes.append(f"cast it with .astype({var.dtype!r})")
    if expr.ndim != var.ndim:
        fixes.append(f"reshape it to {var.ndim} dimension(s)")
    elif any(mine is not None and its is not None and mine != its
             for mine, its in zip(var.type.shape, expr.type.shape)):
        fixes.append(f"make its shape match {var}'s static shape {var.type.shape}")
    return " and ".join(fixes) or "give it the variable's type"
