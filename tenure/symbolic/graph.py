"""The graph core: variables, constants, apply nodes, ops, traversal and cloning.

A graph is a DAG of :class:`Variable` and :class:`Apply` nodes.  A variable is
either a root (no owner: a function input, a shared variable or a constant) or
the ``index``-th output of an :class:`Apply`, which records one application of
an :class:`Op` to input variables.

This module knows nothing about tensors; :mod:`tenure.symbolic.types` gives
variables their type and :mod:`tenure.symbolic.variable` their NumPy-like
methods.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from tenure.symbolic import cost_facts

_ids = itertools.count()


class Variable:
    """A symbolic value of a given type.

    ``owner`` is the :class:`Apply` that computes it (``None`` for a root) and
    ``index`` is its position among that node's outputs.
    """

    def __init__(self, type, owner: Apply | None = None, index: int | None = None,
                 name: str | None = None):
        self.type = type
        self.owner = owner
        self.index = index
        self.name = name
        # A creation counter makes orderings (and printed ids) deterministic.
        self.auto_id = next(_ids)

    def clone(self, name: str | None = None) -> Variable:
        """A fresh root variable of the same type and name (no owner)."""
        return type(self)(self.type, name=self.name if name is None else name)

    def __str__(self) -> str:
        if self.name is not None:
            return self.name
        if self.owner is not None:
            op = self.owner.op
            if len(self.owner.outputs) == 1:
                return f"{op}.0"
            return f"{op}.{self.index}"
        return f"<{self.type}>"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self}, {self.type})"

    # Identity semantics: graph variables are nodes, not values.
    __hash__ = object.__hash__


class Constant(Variable):
    """A root variable with a fixed value (``data``), already filtered by its type."""

    def __init__(self, type, data, name: str | None = None):
        super().__init__(type, owner=None, index=None, name=name)
        self.data = type.filter(data)
        # Constants never change, so a signature lets equal constants merge.
        self._signature = type.signature_of(self.data)

    def signature(self):
        return self._signature

    def equals(self, other) -> bool:
        return isinstance(other, Constant) and self.signature() == other.signature()

    def clone(self, name: str | None = None) -> Constant:
        return type(self)(self.type, self.data, name=self.name if name is None else name)

    def __str__(self) -> str:
        if self.name is not None:
            return self.name
        text = self.type.short_value_repr(self.data)
        return text


class Apply:
    """One application of ``op`` to ``inputs``, producing ``outputs``."""

    def __init__(self, op: Op, inputs: Sequence[Variable], outputs: Sequence[Variable]):
        for i, var in enumerate(inputs):
            if not isinstance(var, Variable):
                raise TypeError(
                    f"{op}: input {i} must be a Variable, got {type(var).__name__}")
        self.op = op
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        for i, out in enumerate(self.outputs):
            if out.owner is not None and out.owner is not self:
                raise ValueError(f"{op}: output {i} ({out}) already belongs to another node")
            out.owner = self
            out.index = i

    @property
    def out(self) -> Variable:
        """The single output (error if the node has several)."""
        if len(self.outputs) != 1:
            raise AttributeError(f"{self.op} has {len(self.outputs)} outputs; use .outputs")
        return self.outputs[0]

    def clone_with_new_inputs(self, inputs: Sequence[Variable]) -> Apply:
        """The same op applied to ``inputs`` (re-running ``make_node`` so types follow)."""
        node = self.op.make_node(*inputs)
        for old, new in zip(self.outputs, node.outputs):
            new.name = old.name
        return node

    def __str__(self) -> str:
        return f"{self.op}({', '.join(str(i) for i in self.inputs)})"

    __repr__ = __str__


class Op:
    """The base of every operation.

    Subclasses implement ``make_node`` (type checking, static shapes),
    ``perform`` (the NumPy reference implementation) and ``infer_shape``, and
    may implement ``grad``.  ``view_map`` and ``destroy_map`` declare what the
    op does to memory: ``{output_index: [input_index]}`` means that output may
    be a view of (resp. is written into) that input's buffer.

    ``__props__`` names the attributes that define the op; two ops with equal
    props are equal and hash alike, which is what lets identical subgraphs merge.
    """

    __props__: tuple[str, ...] = ()
    view_map: dict[int, list[int]] = {}
    destroy_map: dict[int, list[int]] = {}

    #: True for a view op (``view_map``) whose output is a new array when it
    #: cannot be a view (NumPy's ``reshape``, a ``SumTo`` that sums): the
    #: checking linker then accepts an unaliased output, and the cost model
    #: counts the copy when the output's size differs from the input's.
    view_may_copy: bool = False

    #: True for an op whose outputs' shapes depend on its inputs' values
    #: (``nonzero``): the size model leaves them unknown rather than run the
    #: op on the placeholders it evaluates shapes with (all zeros, nominal
    #: lengths: a meaningless and possibly long run).
    shape_from_values: bool = False

    #: ``check_shapes(node, input_shapes, output_shapes) -> bool``, or None.
    #: Defined by ops whose only run-time failures come from shapes: it raises
    #: the ``ValueError`` ``perform`` would raise for inputs of these concrete
    #: shapes (``output_shapes`` are the planned ones), and returns whether
    #: the op then cannot fail at all (False: it may still fail on values, e.g.
    #: integer powers).  A call checks the steps after its first write into
    #: shared storage with it before running anything (see
    #: :mod:`tenure.linkers.commit`); None means "may fail on values".
    check_shapes = None

    def make_node(self, *inputs) -> Apply:
        raise NotImplementedError(f"{type(self).__name__}.make_node")

    def perform(self, node: Apply, inputs: list, output_storage: list[list]) -> None:
        """Compute ``node``'s outputs from input values.

        ``output_storage[i]`` is a one-element list: on entry it may hold a
        buffer from an earlier call that the op is free to overwrite when its
        shape and dtype fit; on exit it holds the output value (an ndarray).
        """
        raise NotImplementedError(f"{type(self).__name__}.perform")

    def infer_shape(self, node: Apply, input_shapes: list[tuple]) -> list[tuple]:
        """Symbolic output shapes (tuples of scalar variables or ints) from input shapes."""
        raise NotImplementedError(f"{type(self).__name__}.infer_shape")

    def grad(self, inputs: list[Variable], output_grads: list[Variable]) -> list[Variable]:
        """Gradients with respect to each input, given the gradients of the outputs."""
        raise NotImplementedError(f"{self} does not define a gradient")

    def workspace_bytes(self, node: Apply, input_shapes: list, output_shapes: list) -> int:
        """Bytes ``perform`` allocates temporarily beyond its outputs, for inputs
        and outputs of these concrete shapes (an input's shape may be ``None``
        when unknown).  The memory plan adds it to the step's live buffers to
        predict the peak.  Default: none."""
        return 0

    def flops(self, node: Apply, shapes) -> float:
        """About how many floating-point operations ``node`` performs, for the
        numeric ``shapes`` (variable -> tuple of ints, or None when unknown;
        an unknown shape counts as zero elements, see
        :mod:`tenure.symbolic.cost_facts`).  The activation-memory budget
        prices recomputation with it (:mod:`tenure.rewrites.cost`).

        Default: one per output element -- except for a view op (every output
        declared in ``view_map``, nothing destroyed), which costs none, unless
        it may copy (``view_may_copy``) and its outputs' size differs from its
        first input's: then one per element of that input.  Ops override it
        where the work is not about the output's size (products, reductions,
        sorts, shape bookkeeping)."""
        out_size = cost_facts.outputs_size(node, shapes)
        if cost_facts.all_views(node):
            in_size = cost_facts.size(node.inputs[0], shapes)
            if self.view_may_copy and out_size != in_size:
                return float(in_size)
            return 0.0
        return float(out_size)

    def bytes_moved(self, node: Apply, shapes) -> float:
        """About how many bytes ``node`` reads and writes, for the numeric
        ``shapes`` (as for :meth:`flops`).

        Default: the bytes of every input and output -- except for a view op
        (as in :meth:`flops`), which moves none, unless it may copy and its
        output's size differs from its first input's: then it reads that
        input and writes that output."""
        if cost_facts.all_views(node):
            source, result = node.inputs[0], node.outputs[0]
            if self.view_may_copy and (cost_facts.size(result, shapes)
                                       != cost_facts.size(source, shapes)):
                return float(cost_facts.nbytes(source, shapes)
                             + cost_facts.nbytes(result, shapes))
            return 0.0
        return float(cost_facts.inputs_outputs_nbytes(node, shapes))

    def matrix_operands(self, node: Apply):
        """Shape facts for compile-time sizes (:mod:`tenure.rewrites.sizes`):
        the two operands of a matrix product whose inner lengths must agree
        (the first's last axis against the second's second-to-last), or None
        (the default: not a matrix product)."""
        return None

    def broadcast_partners(self, node: Apply, shapes) -> list:
        """Shape facts for compile-time sizes: ``[(input, [(operand, shape),
        ...])]``, the inputs of ``node`` broadcast together with other
        operands (``operand`` None for a shape with no variable of its own),
        given the known ``shapes``.  Default: none."""
        return []

    def __call__(self, *inputs, **kwargs):
        node = self.make_node(*inputs, **kwargs)
        if len(node.outputs) == 1:
            return node.outputs[0]
        return list(node.outputs)

    def _props(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__props__)

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self._props() == other._props()

    def __hash__(self) -> int:
        return hash((type(self), self._props()))

    def __str__(self) -> str:
        if not self.__props__:
            return type(self).__name__
        props = ", ".join(f"{p}={getattr(self, p)!r}" for p in self.__props__)
        return f"{type(self).__name__}{{{props}}}"

    __repr__ = __str__


# --------------------------------------------------------------------------
# Traversal


def _as_list(variables) -> list[Variable]:
    if isinstance(variables, Variable):
        return [variables]
    return list(variables)


def ancestors(variables: Iterable[Variable] | Variable,
              blockers: Iterable[Variable] = ()) -> list[Variable]:
    """Every variable that ``variables`` depend on (themselves included), not
    looking past ``blockers``; in depth-first order from the outputs."""
    blocked = set(blockers)
    seen: set[Variable] = set()
    order: list[Variable] = []
    stack = list(reversed(_as_list(variables)))
    while stack:
        var = stack.pop()
        if var in seen:
            continue
        seen.add(var)
        order.append(var)
        if var.owner is not None and var not in blocked:
            stack.extend(reversed(var.owner.inputs))
    return order


def graph_inputs(variables, blockers: Iterable[Variable] = ()) -> list[Variable]:
    """The roots (and blockers) that ``variables`` depend on."""
    blocked = set(blockers)
    return [v for v in ancestors(variables, blocked) if v.owner is None or v in blocked]


def io_toposort(inputs: Iterable[Variable], outputs: Iterable[Variable]) -> list[Apply]:
    """Apply nodes between ``inputs`` and ``outputs`` in a topological order.

    The order is deterministic: a depth-first post-order from the outputs,
    visiting inputs left to right.
    """
    blocked = set(inputs)
    done: set[Apply] = set()
    order: list[Apply] = []
    for out in _as_list(outputs):
        # Iterative post-order DFS (graphs can be deeper than Python's recursion limit).
        stack: list[tuple[Apply, int]] = []
        if out.owner is not None and out not in blocked and out.owner not in done:
            stack.append((out.owner, 0))
        while stack:
            node, i = stack.pop()
            if node in done:
                continue
            if i < len(node.inputs):
                stack.append((node, i + 1))
                var = node.inputs[i]
                if var.owner is not None and var not in blocked and var.owner not in done:
                    stack.append((var.owner, 0))
            else:
                done.add(node)
                order.append(node)
    return order


# --------------------------------------------------------------------------
# Cloning and replacement


def clone_get_equiv(inputs: Sequence[Variable], outputs: Sequence[Variable],
                    replace: dict[Variable, Variable] | None = None,
                    copy_inputs: bool = True) -> dict[Any, Any]:
    """Clone the graph between ``inputs`` and ``outputs``.

    Returns a map from every old variable and apply node to its clone.
    ``replace`` maps variables to what should stand in their place (its values
    are used as they are, not cloned).  Roots that are not ``inputs`` (shared
    variables, constants) are kept as they are.
    """
    equiv: dict[Any, Any] = dict(replace or {})
    for var in inputs:
        if var not in equiv:
            equiv[var] = var.clone() if copy_inputs else var
    for node in io_toposort(list(inputs) + list(equiv), outputs):
        new_inputs = [equiv.get(v, v) for v in node.inputs]
        if all(a is b for a, b in zip(new_inputs, node.inputs)):
            new_node = Apply(node.op, new_inputs,
                             [type(o)(o.type, name=o.name) for o in node.outputs])
        else:
            new_node = node.clone_with_new_inputs(new_inputs)
        equiv[node] = new_node
        for old, new in zip(node.outputs, new_node.outputs):
            equiv.setdefault(old, new)
    return equiv


def clone(inputs: Sequence[Variable], outputs: Sequence[Variable],
          copy_inputs: bool = True) -> tuple[list[Variable], list[Variable]]:
    """A copy of the graph from ``inputs`` to ``outputs``: (new inputs, new outputs)."""
    equiv = clone_get_equiv(inputs, outputs, copy_inputs=copy_inputs)
    return [equiv[v] for v in inputs], [equiv.get(v, v) for v in outputs]


def clone_replace(outputs, replace: dict[Variable, Variable], strict: bool = True):
    """``outputs`` rebuilt with every key of ``replace`` swapped for its value.

    Keeps the structure of ``outputs`` (a variable or a list).  Raises a
    ``TypeError`` when a replacement's type cannot stand in for the original,
    unless ``strict`` is False: the nodes after it are then made again for
    the new types (their ``make_node`` refuses what they cannot take).
    """
    single = isinstance(outputs, Variable)
    outs = _as_list(outputs)
    for old, new in replace.items():
        if strict and not old.type.is_compatible_replacement(new.type):
            raise TypeError(
                f"cannot replace {old} of type {old.type} with {new} of type {new.type}")
    equiv = clone_get_equiv([], outs, replace=dict(replace), copy_inputs=False)
    new_outs = [equiv.get(v, v) for v in outs]
    return new_outs[0] if single else new_outs
