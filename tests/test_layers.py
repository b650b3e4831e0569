"""The layering of the package: no module imports from a layer above its own.

From the bottom: ``config``; ``symbolic`` (graphs, types, ops, the
FunctionGraph); ``rewrites``; ``linkers``; ``printing``; the function layer
(``tenure.function`` and ``tenure.compile``); and the top (the package
itself, ``demo``, ``testing``, the memory pictures).  A lower layer reaches a
higher one only through a hook the higher one registers (``Variable.eval``)
or by duck typing (printing's :class:`~tenure.printing.CompiledGraph`).

Every ``import`` counts, in-function ones included: an import inside a
function still makes the lower layer depend on the higher one.
"""

import ast
import pathlib

import pytest

import tenure

PACKAGE = pathlib.Path(tenure.__file__).parent

#: (layer name, module-name prefixes), from the bottom
LAYERS = [
    ("config", ("tenure.config",)),
    ("symbolic", ("tenure.symbolic",)),
    ("rewrites", ("tenure.rewrites",)),
    ("linkers", ("tenure.linkers",)),
    ("printing", ("tenure.printing",)),
    ("function", ("tenure.function", "tenure.compile")),
]
TOP = len(LAYERS)

#: ``(importing module, imported module)`` pairs allowed to go up, each with
#: the reason it could not be fixed yet (empty: every upward import is gone)
ALLOWED: dict[tuple[str, str], str] = {}


def layer_of(module: str) -> int:
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return TOP


def layer_name(rank: int) -> str:
    return LAYERS[rank][0] if rank < TOP else "top"


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: pathlib.Path, module: str):
    """``(line, module)`` for every tenure module ``path`` imports, anywhere in it."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                # ``from tenure import config`` imports the module tenure.config
                candidate = f"{base}.{alias.name}"
                is_module = (PACKAGE.parent / candidate.replace(".", "/")).with_suffix(".py")
                is_package = PACKAGE.parent / candidate.replace(".", "/") / "__init__.py"
                yield node.lineno, (candidate if is_module.exists() or is_package.exists()
                                    else base)


def upward_imports() -> list[tuple[str, str, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        for line, target in imported_modules(path, module):
            if target.split(".")[0] != "tenure":
                continue
            if layer_of(target) > layer_of(module):
                found.append((module, target, f"{path.relative_to(PACKAGE.parent)}:{line}"))
    return found


def test_no_module_imports_from_a_higher_layer():
    bad = [f"{where}: {module} ({layer_name(layer_of(module))}) imports {target} "
           f"({layer_name(layer_of(target))})"
           for module, target, where in upward_imports() if (module, target) not in ALLOWED]
    assert not bad, "imports from a higher layer:\n" + "\n".join(bad)


def test_the_allow_list_has_no_stale_entries():
    used = {(module, target) for module, target, _ in upward_imports()}
    assert not set(ALLOWED) - used


@pytest.mark.parametrize("module, layer", [
    ("tenure.config", "config"), ("tenure.symbolic.fgraph", "symbolic"),
    ("tenure.rewrites.engine", "rewrites"), ("tenure.linkers.thunk", "linkers"),
    ("tenure.printing", "printing"), ("tenure.compile.mode", "function"),
    ("tenure.function", "function"), ("tenure", "top"), ("tenure.memory_plot", "top"),
])
def test_modules_are_placed_in_their_layers(module, layer):
    assert layer_name(layer_of(module)) == layer


def test_the_walk_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from tenure import function\n    import tenure.printing\n")
    assert [t for _, t in imported_modules(source, "tenure.symbolic.probe")] == \
        ["tenure.function", "tenure.printing"]
