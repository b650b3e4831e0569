"""A compiled node described in the user's terms, for error messages.

After the rewrites a graph's nodes read ``add_inplace[0<-0](dot.0, y)`` or
``Composite{exp(i0) * 2 + i1}(x, y)``, and a C kernel's errors start with its
function's name (``tn_k0: ...``).  An error names what the user wrote first:
the op before the rewrites (``add``; a fused ``Composite`` as its expression
over the user's variables, ``exp(x) * 2 + y``) and the user's names for its
inputs (an unnamed intermediate as the expression that computes it,
``dot(A, w)``).  The compiled names come last, in brackets.

Every linker's error path goes through :func:`error_note` (the note on an
exception that a step raised) and :func:`user_message` (the exception's own
message, when it leads with an internal name).
"""

from __future__ import annotations

import re

from tenure.linkers.thunk import step_note

#: an in-place op's suffix: ``_inplace``, then ``[out<-in]`` pairs
_INPLACE = re.compile(r"_inplace(\[\d+<-\d+\])*")
_COMPOSITE = re.compile(r"Composite\{(.*)\}")
_SCALAR_INPUT = re.compile(r"\bi(\d+)\b")
#: the name a C kernel's errors start with
_KERNEL_PREFIX = re.compile(r"(tn_k\d+): ")
#: how deep unnamed intermediates are spelled out (``dot(A, w)``)
_DEPTH = 2


def user_op(op) -> str:
    """``op`` as the user wrote it: its out-of-place name (``add`` for
    ``add_inplace[0<-0]``)."""
    return _INPLACE.sub("", str(op))


def _atomic(text: str) -> bool:
    """Whether ``text`` needs no parentheses inside a larger expression (no
    space outside brackets)."""
    depth = 0
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == " " and depth == 0:
            return False
    return True


def user_name(var, depth: int = _DEPTH) -> str:
    """The user's name for ``var``: its name, or the expression computing it."""
    if var.name is not None or var.owner is None or depth <= 0:
        return str(var)
    node = var.owner
    if len(node.outputs) != 1:
        return str(var)
    return user_call(node, depth - 1)


def user_call(node, depth: int = _DEPTH) -> str:
    """``node`` as the user's expression: ``add(x, y)``, or for a fused
    ``Composite`` the expression itself, ``exp(x) * 2 + y``."""
    names = [user_name(v, depth) for v in node.inputs]
    op = user_op(node.op)
    composite = _COMPOSITE.search(op)
    if composite is None:
        return f"{op}({', '.join(names)})"

    def substitute(match):
        k = int(match.group(1))
        if k >= len(names):
            return match.group(0)
        return names[k] if _atomic(names[k]) else f"({names[k]})"

    expr = _SCALAR_INPUT.sub(substitute, composite.group(1))
    if composite.start() == 0 and composite.end() == len(op):
        return expr                          # an elementwise Composite: the expression
    # an op around a Composite (a fused reduction, ``sum{...}∘Composite{...}``)
    return f"{op[:composite.start()].rstrip('∘')}({expr})"


def compiled_detail(node, step: str | None = None) -> str:
    """``" [compiled as add_inplace[0<-0], step tn_k0]"``: the internal
    names, where they differ from :func:`user_call`'s, else ``""``."""
    parts = []
    op = str(node.op)
    if op != user_op(node.op) or _COMPOSITE.search(op):
        parts.append(f"compiled as {op}")
    if step:
        parts.append(f"step {step}")
    return f" [{', '.join(parts)}]" if parts else ""


def error_note(node, verb: str = "computing", types: bool = True,
               step: str | None = None) -> str:
    """The note for an exception raised while ``verb``-ing ``node``:
    ``tenure: raised while computing add(dot(A, w), y) (inputs: dot(A, w)
    float64(?,), y float64(?,)) [compiled as add_inplace[0<-0]]``,
    then the update it belongs to (:func:`~tenure.linkers.thunk.step_note`)."""
    inputs = ""
    if types and node.inputs:
        inputs = (" (inputs: "
                  + ", ".join(f"{user_name(v)} {v.type}" for v in node.inputs) + ")")
    return (f"tenure: raised while {verb} {user_call(node)}{inputs}"
            f"{compiled_detail(node, step)}{step_note(node)}")


def user_message(exc: BaseException, node) -> str | None:
    """Rewrite ``exc``'s message when it leads with an internal name -- a C
    kernel's (``tn_k0: ...``) or the compiled op's (``add_inplace[0<-0]:
    ...``) -- to lead with :func:`user_call` instead, the internal name moved
    to the end.  Returns the kernel's name (for :func:`error_note`), if any."""
    args = getattr(exc, "args", ())
    if len(args) != 1 or not isinstance(args[0], str):
        return None
    message = args[0]
    step = None
    match = _KERNEL_PREFIX.match(message)
    if match:
        step = match.group(1)
        message = message[match.end():]
    op = str(node.op)
    internal = op != user_op(node.op) or _COMPOSITE.search(op)
    # an op's own name (``expand_to: ...``) is the user's already: kept as it is
    lead = next((p for p in (op, user_op(node.op)) if internal and message.startswith(p + ": ")),
                None)
    if lead is not None:
        message = message[len(lead) + 2:]
    if step is None and lead is None:
        return None
    new = f"{user_call(node)}: {message}{compiled_detail(node, step)}"
    try:
        exc.args = (new,)
    except (AttributeError, TypeError):   # an exception whose args cannot be set
        return step
    return step
