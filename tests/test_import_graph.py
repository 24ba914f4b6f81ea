"""The import graph has no circles: no module of Herald imports, directly or not, itself
(imports made only for type checking aside: they never run).

The layering contract in ``pyproject.toml`` (checked by ``lint-imports`` in ``make test``)
keeps packages in order; this test catches a circle between modules of one package too.
"""

from __future__ import annotations

import grimp
import pytest


def strongly_connected(graph: grimp.ImportGraph) -> list[set[str]]:
    """Sets of two or more modules that import each other round a circle (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(component)

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


@pytest.mark.parametrize("package", ["gateway", "channels", "lanes", "configbase"])
def test_no_module_imports_itself_round_a_circle(package: str) -> None:
    graph = grimp.build_graph(
        package, include_external_packages=False, exclude_type_checking_imports=True
    )
    assert strongly_connected(graph) == []


def test_a_circle_is_found() -> None:
    """The finder itself: a two-module circle built by hand is reported."""
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(name)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert strongly_connected(graph) == [{"pkg.a", "pkg.b"}]
