"""The package's shape, checked: its layers are its folders (docs/architecture.md draws the same
map, from this list), each imports only from the layers below it, the import graph has no cycle,
and few modules sit directly in ``gsprestore/``. Imports are read from the source (module level and
inside functions alike, since a lazy import is still a dependency: the registry's factory
functions import their modules that way)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gsprestore"

#: Lowest first: (layer, the folders or top-level modules it is made of). A module may import from its
#: own layer or below, never above; the layer of a module is the layer of its top-level name.
LAYERS: list[tuple[str, set[str]]] = [
    ("foundations", {"core", "native", "_version"}),
    ("image-quality metrics", {"metrics"}),
    ("the observation model", {"physics"}),
    ("images in and out", {"imageio"}),
    ("the pixel graph", {"graph"}),
    ("solvers, classical interpolation", {"solvers", "classical"}),
    ("networks", {"models"}),
    ("methods", {"methods"}),
    ("running methods on inputs", {"runtime"}),
    ("evaluation", {"evaluation"}),
    ("training, pictures", {"training", "viz"}),
    ("public Python API", {"api"}),
    ("command line", {"cli", "__main__", ""}),
]
#: The modules that may sit directly in gsprestore/ (the rest live in a layer's folder).
TOP_LEVEL = {"", "__main__", "_version", "api"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Modules of the package that ``name`` imports (relative and absolute, at any depth)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("gsprestore"):
                target = node.module[len("gsprestore"):].lstrip(".")
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}".lstrip(".")
                found.add(sub if sub in modules else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gsprestore"):
                    found.add(alias.name[len("gsprestore"):].lstrip("."))
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    from gsprestore.methods.registry import METHODS

    modules = _modules()
    edges = {name: _imports(name, path, modules) for name, path in modules.items()}
    for spec in METHODS.values():  # the registry's factory functions import their modules lazily: edges too
        assert spec.factory.__module__ == "gsprestore.methods.registry", spec.name
        assert "methods.ensemble" in edges["methods.registry"] and "methods.graph_methods" in edges["methods.registry"]
    if "" in edges:  # the package root: a lazy facade over the public API (gsprestore.demosaic, ...)
        edges[""] = {m for m in edges[""] if m == "_version"}
    return edges


def _layer(module: str) -> int:
    top = module.split(".")[0]
    for i, (_, names) in enumerate(LAYERS):
        if top in names:
            return i
    raise KeyError(module)


def test_every_module_has_a_layer():
    unplaced = []
    for m in _modules():
        try:
            _layer(m)
        except KeyError:
            unplaced.append(m)
    assert sorted(unplaced) == [], "put each new module in a layer's folder (and name new folders in LAYERS)"


def test_few_modules_at_the_top():
    top = {m for m, path in _modules().items() if path.parent == PACKAGE}
    assert top <= TOP_LEVEL, f"modules directly in gsprestore/ belong in a layer's folder: {sorted(top - TOP_LEVEL)}"


def test_layers_are_folders_drawn_once_in_the_docs():
    """docs/architecture.md draws the map from this list: every layer's folders in this order."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    text = text[text.index("| layer | folder |"):]  # the map's table
    spans = []
    for _, names in LAYERS:
        found = []
        for name in sorted(names - {"", "__main__", "_version"}):
            shown = f"{name}/" if (PACKAGE / name).is_dir() else f"{name}.py"
            assert f"`{shown}`" in text, f"docs/architecture.md does not draw `{shown}`"
            found.append(text.index(f"`{shown}`"))
        spans.append((min(found), max(found)))
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:])), "docs/architecture.md draws the layers in another order"


def test_no_import_cycle():
    edges = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)


def test_no_upward_import():
    upward = [f"{m} ({LAYERS[_layer(m)][0]}) imports {n} ({LAYERS[_layer(n)][0]})"
              for m, targets in _graph().items() for n in targets if _layer(n) > _layer(m)]
    assert upward == []


#: Private names still reached across modules, each with its reason (the list may shrink, never grow).
PRIVATE_ALLOWED: set[tuple[str, str]] = set()


def _private_uses(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """``module._name`` that ``name`` imports from (``from m import _x``) or reads through a module it
    imported (``import m`` / ``from . import m`` then ``m._x``), for modules of the package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found, aliases = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("gsprestore"):
                target = node.module[len("gsprestore"):].lstrip(".")
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}".lstrip(".")
                if sub in modules:  # a module, not a name in one
                    aliases[alias.asname or alias.name] = sub
                elif alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.add(f"{target}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gsprestore.") and alias.asname:
                    aliases[alias.asname] = alias.name[len("gsprestore."):]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.add(f"{aliases[node.value.id]}.{node.attr}")
    return {f for f in found if f.rpartition(".")[0] != name}


def test_no_private_name_crosses_modules():
    """A name one module shares with another is public (no leading underscore)."""
    modules = _modules()
    crossing = sorted((name, use) for name, path in modules.items()
                      for use in _private_uses(name, path, modules))
    assert [c for c in crossing if c not in PRIVATE_ALLOWED] == []
    assert sorted(PRIVATE_ALLOWED - set(crossing)) == [], "drop the entries that no longer cross"


def test_the_package_never_imports_the_lab():
    """The installed package is the product: nothing under gsprestore/ imports the lab
    (lab/gsprestore_lab: measurement, release and research code, not shipped), whether by an import
    statement at any depth or by name (importlib, a registry's factory string)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if node.value.startswith("gsprestore_lab") else []
            found += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {n}" for n in names
                      if n == "gsprestore_lab" or n.startswith("gsprestore_lab.") or n.startswith("gsprestore_lab:")]
    assert found == [], "the package must not depend on the lab"
