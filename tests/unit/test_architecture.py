"""fleet's import graph: no circle between modules, and the core imports no feature.

The graph is read statically (``ast``) from every module under ``fleet/``, imports inside functions
included: a lazy import is how a circle hides (it loads fine in one order and breaks in another, and
it still ties the two modules together).

- ``if TYPE_CHECKING:`` imports are left out of the cycle check: they never run, so they cannot
  make a load order fail, and a feature naming the core's ``Client`` in an annotation is the feature
  depending on the core, the direction wanted. They *are* counted for core → feature: the core must
  not even name a feature.
- No exception inside a package: a package's ``__init__`` importing its submodules while one imports
  back from it is a circle like any other (the store had one, ``faults`` ↔ ``__init__``, untied by
  moving ``open_store`` into the package).

The core (:data:`CORE`) and the features (:data:`FEATURES`) are declared below; the seams the core
offers the features are in :mod:`fleet.seams` (docs/design.md §8, "Features on seams").
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import fleet

ROOT = Path(fleet.__file__).parent

CORE = (
    "fleet.store",
    "fleet.daemon",
    "fleet.client",
    "fleet.routes",
    "fleet.delivery",
    "fleet.channel",
    "fleet.watch",  # the hook transport: the channel's sibling
    "fleet.spawn",
    "fleet.supervise",
    "fleet.models",
    "fleet.wire",
    "fleet.layouts",
    "fleet.tmux",
    "fleet.dialogs",  # core: answering Claude Code's launch dialogs is how spawn gets a session at all
    "fleet.records",  # the features' wire records, which the core may use (no behaviour)
    "fleet.seams",  # the extension points the features plug into
)
"""Modules (and packages: every module under them) that must import no feature."""

FEATURES = (
    "fleet.budgets",
    "fleet.usage",
    "fleet.worktrees",
    "fleet.summaries",
    "fleet.permissions",
    "fleet.resident",
    "fleet.campaign",
)
"""Modules (and packages) that plug into the core's seams: the core never imports them; the edges
(the CLI, the console, :mod:`fleet.features`) and other features may."""


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, typing_only: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import node under ``tree`` (functions included), with whether it is typing-only."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, typing_only
        elif isinstance(node, ast.If) and _type_checking(node):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), typing_only)
        else:
            yield from _imports(node, typing_only)


def graph(mods: dict[str, Path]) -> dict[str, dict[str, bool]]:
    """module -> {imported fleet module: typing-only}; an import counted at runtime wins."""

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, dict[str, bool]] = {m: {} for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node, typing_only in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, *([base] if base else [])])
                # `from fleet.store import checks` imports the submodule; `import X from pkg` the package
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for target in targets:
                if not target.startswith("fleet"):
                    continue
                got = owner(target)
                if got and got != mod:
                    edges[mod][got] = edges[mod].get(got, True) and typing_only
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def under(mod: str, prefixes: tuple[str, ...]) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def test_no_import_circle() -> None:
    edges = graph(modules())
    runtime = {m: {t for t, typing_only in got.items() if not typing_only} for m, got in edges.items()}
    found = cycles(runtime)
    assert not found, "import circles (each a set of modules importing each other): " + "; ".join(
        " <-> ".join(c) for c in found
    )


def test_core_imports_no_feature() -> None:
    edges = graph(modules())
    bad = sorted((m, t) for m, got in edges.items() if under(m, CORE) for t in got if under(t, FEATURES))
    assert not bad, "core modules importing a feature (plug the feature into a seam instead): " + ", ".join(
        f"{m} -> {t}" for m, t in bad
    )


def test_every_module_is_placed() -> None:
    """The graph sees every module: the lists name packages that exist (a rename must update them)."""
    mods = modules()
    for prefix in (*CORE, *FEATURES):
        assert any(under(m, (prefix,)) for m in mods), f"{prefix} names no module under fleet/"


def test_the_graph_sees_lazy_and_typing_imports(tmp_path: Path) -> None:
    """The reader finds an import inside a function and marks one under TYPE_CHECKING as typing-only."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from fleet.client import Client\n"
        "def f():\n    from fleet.budgets import Budget\n    return Budget\n"
    )
    found = list(_imports(ast.parse(source)))
    names = {(n.module, typing_only) for n, typing_only in found if isinstance(n, ast.ImportFrom)}
    assert ("fleet.client", True) in names
    assert ("fleet.budgets", False) in names
    assert ("typing", False) in names
