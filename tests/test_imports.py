"""Imports flow one way, with no cycles: edge -> jobs -> compilers/federated/models -> targets -> simulators -> utils.

(``edge`` is the CLI; ``jobs`` the library functions behind its commands, which combine the packages.)

(``targets`` sits below the compilers: a compile pass reads the target it builds for.)

Read from the sources (every ``import``, function-local ones included: a local import that
closes a cycle only hides it), so the check needs nothing installed.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"edgekit": "edge", "edgekit.simulators": "simulators", "edgekit.simulators.liftquant": "simulators/liftquant",
            "edgekit.compilers": "compilers", "edgekit.federated": "federated", "edgekit.models": "models",
            "edgekit.targets": "targets", "edgekit.utils": "utils", "edgekit.jobs": "jobs"}
LAYER = {"edgekit": 0, "edgekit.jobs": 1, "edgekit.compilers": 2, "edgekit.federated": 2, "edgekit.models": 2,
         "edgekit.targets": 3, "edgekit.simulators": 4, "edgekit.utils": 5}


def project_modules() -> dict[str, Path]:
    modules = {}
    for package, folder in PACKAGES.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            modules[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return modules


def imported_modules(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``module`` imports anywhere in its source."""
    package = module if path.stem == "__init__" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            submodules = [f"{base}.{alias.name}" for alias in node.names]
            names = submodules if all(n in modules for n in submodules) else [base]
        else:
            continue
        for name in names:
            while name and name not in modules:  # a name inside a module: the module
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {m: imported_modules(m, p, modules) for m, p in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
    for root, edges_of_root in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(edges_of_root)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def package_of(module: str) -> str:
    """The layered package holding ``module`` (a subpackage belongs to its parent's layer)."""
    return max((p for p in LAYER if module == p or module.startswith(p + ".")), key=len)


def test_the_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 50, "the module scan found too few modules"
    assert cycles(graph) == []


def test_imports_flow_one_way():
    wrong = sorted(f"{m} -> {d}" for m, deps in import_graph().items() for d in deps
                   if package_of(m) != package_of(d) and LAYER[package_of(d)] <= LAYER[package_of(m)])
    assert wrong == []
