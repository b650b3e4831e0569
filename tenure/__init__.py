"""tenure: symbolic tensor computation built around memory.

Build graphs over symbolic tensors (``tn.matrix``) and shared variables
(``tn.shared``), compile them with ``tn.function`` and call the result.  The
``borrow`` flags of ``shared``, ``In`` and ``Out`` decide which buffers may be
lent, taken or overwritten; see the "Memory aliasing and borrowing" docs page.
"""

from tenure import config  # noqa: F401
from tenure.symbolic.graph import Apply, Constant, Op, Variable  # noqa: F401
from tenure.symbolic.types import (  # noqa: F401
    TensorType, matrix, scalar, tensor, tensor3, tensor4, vector)
from tenure.symbolic.variable import (  # noqa: F401
    TensorConstant, TensorVariable, as_tensor_variable, constant)
from tenure.symbolic.shared import SharedVariable, shared  # noqa: F401
from tenure.symbolic import ops  # noqa: F401
from tenure.symbolic.ops import nnet  # noqa: F401  (tn.nnet: the neural-network functions)
from tenure.symbolic.ops import *  # noqa: F401,F403
from tenure.symbolic.grad import DisconnectedInputError, grad, stop_gradient  # noqa: F401
from tenure.function import (  # noqa: F401
    Function, In, MissingInputError, Mode, Out, ReentrantCallError, ReplacedInputError,
    OutputKeyError, UnusedInputError, function, function_dump)
from tenure.printing import debugprint  # noqa: F401
from tenure import random  # noqa: F401  (tn.random.RandomStream)
from tenure.loops import scan, until  # noqa: F401
from tenure import gradient  # noqa: F401  (tn.gradient.jacobian, hessian)
from tenure.memory_plot import plot_memory  # noqa: F401
from tenure.memory_html import memory_html  # noqa: F401

__version__ = "0.1.0"
