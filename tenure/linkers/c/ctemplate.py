"""Typed families of C functions: one template mechanism for the C runtime.

A ``.c.src`` file is C with repeat blocks, expanded when the runtime is
built (the idea of NumPy's ``.c.src`` files; this is our own small
expander)::

    /**begin repeat
     * #name = float64, float32#
     * #T = npy_float64, npy_float32#
     */
    static @T@ tn_twice_@name@(@T@ x) { return x + x; }
    /**end repeat**/

The block's body is written once per column: every ``@var@`` becomes that
column's value.  All variables of a block have the same number of values;
blocks do not nest.  Each copy starts with a ``#line`` marker, so compiler
messages and a debugger name the line of the ``.c.src`` file.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["TemplateError", "expand"]

_BLOCK = re.compile(r"/\*\*begin repeat\s*\n(?P<head>.*?)\*/\s*\n"
                    r"(?P<body>.*?)/\*\*end repeat\*\*/", re.DOTALL)
_VARIABLE = re.compile(r"#\s*(?P<name>\w+)\s*=\s*(?P<values>[^#]*)#")
_USE = re.compile(r"@(\w+)@")


class TemplateError(ValueError):
    """A repeat block that cannot be expanded; the message names the file and line."""


def expand(text: str, path: str | Path | None = "<template>") -> str:
    """``text`` with every repeat block written out once per column
    (``path``: the name ``#line`` markers give; None: no markers)."""
    out, last = [], 0
    for block in _BLOCK.finditer(text):
        line = text.count("\n", 0, block.start()) + 1
        out.append(text[last:block.start()])
        out.append(_expand_block(block, path, line, text))
        last = block.end()
        if path is not None:
            # the text left starts with the end of the block's last line
            out.append(f'\n#line {text.count(chr(10), 0, last) + 2} "{path}"')
    out.append(text[last:])
    return "".join(out)


def _expand_block(block: re.Match, path, line: int, text: str) -> str:
    columns = _columns(block.group("head"), path, line)
    body = block.group("body")
    body_line = text.count("\n", 0, block.start("body")) + 1
    copies = []
    for values in columns:
        def value(use, values=values):
            if use.group(1) not in values:
                raise TemplateError(f"{path}:{line}: @{use.group(1)}@ is not a variable of "
                                    f"this repeat block ({', '.join(values)})")
            return values[use.group(1)]
        marker = f'#line {body_line} "{path}"\n' if path is not None else ""
        copies.append(marker + _USE.sub(value, body))
    return "".join(copies)


def _columns(head: str, path, line: int) -> list[dict[str, str]]:
    variables = {m.group("name"): [v.strip() for v in m.group("values").split(",")]
                 for m in _VARIABLE.finditer(head)}
    if not variables:
        raise TemplateError(f"{path}:{line}: a repeat block without variables (#name = a, b#)")
    lengths = {len(v) for v in variables.values()}
    if len(lengths) != 1:
        raise TemplateError(f"{path}:{line}: the variables of a repeat block have different "
                            f"numbers of values: "
                            + ", ".join(f"{k}: {len(v)}" for k, v in variables.items()))
    n = lengths.pop()
    return [{name: values[i] for name, values in variables.items()} for i in range(n)]
