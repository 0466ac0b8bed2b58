"""The tree is the pipeline: each stage imports only stages before it, and no module imports
itself back through others. Every import counts, a deferred one inside a function too, since a
cycle that is broken only by import order is still a cycle."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gradcheck.engine.worker import PACKAGE as PACKAGE_PREFIX

PACKAGE = Path(__file__).resolve().parent.parent / "gradcheck"

#: the stages, first to last; a module may import its own stage and the ones before it.
STAGES = ("program", "bank", "oracles", "engine", "grading", "reports", "course", "")
#: oracles and the engine are side by side: neither may import the other.
SIDE_BY_SIDE = {("oracles", "engine"), ("engine", "oracles")}
#: the ways in, at the top: `cli`, `plugin`, `check` (stage "").
#: What the worker runs under `python -I -S` may import nothing outside the standard library.
WORKER_SIDE = ("gradcheck.engine", "gradcheck.program", "gradcheck.engine.worker", "gradcheck.engine.handler", "gradcheck.engine.run",
               "gradcheck.engine.steps", "gradcheck.engine.wire", "gradcheck.engine.keyrings",
               "gradcheck.engine.syscalls", "gradcheck.program.language",
               "gradcheck.program.ops", "gradcheck.program.session", "gradcheck.program.memo")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in STAGES) else ""


def imports(path: Path, modules: set[str]) -> set[str]:
    """The gradcheck modules `path` imports (the deepest module each import names)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            if name.startswith("gradcheck."):
                while name not in modules and "." in name:
                    name = name.rsplit(".", 1)[0]
                found.add(name)
    found.discard("gradcheck")  # the root package: its __init__ holds the version and the ways in
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    graph = {name: imports(path, modules) - {name} for name, path in files.items()}
    # a package's __init__ is imported with each of its modules; it must not import them back
    return graph


def test_no_stage_imports_a_later_one(graph):
    wrong = []
    for module, targets in graph.items():
        if module == "gradcheck":
            continue
        for target in targets:
            here, there = STAGES.index(stage(module)), STAGES.index(stage(target))
            if there > here or (stage(module), stage(target)) in SIDE_BY_SIDE:
                wrong.append(f"{module} ({stage(module) or 'top'}) imports {target} "
                             f"({stage(target) or 'top'})")
    assert not wrong, "\n".join(sorted(wrong))


def test_there_is_no_import_cycle(graph):
    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
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
                        cycles.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    assert not cycles, cycles


def test_the_worker_side_imports_only_itself(graph):
    for module in WORKER_SIDE:
        assert graph[module] <= set(WORKER_SIDE), (module, graph[module] - set(WORKER_SIDE))


def test_the_contract_sees_a_cycle_and_a_backward_import(tmp_path, graph):
    """The two checks above, on a graph made to break them, so that they can fail."""
    broken = {**graph, "gradcheck.program.ops": graph["gradcheck.program.ops"]
              | {"gradcheck.grading.grader"}}
    with pytest.raises(AssertionError, match="gradcheck.program.ops"):
        test_no_stage_imports_a_later_one(broken)
    with pytest.raises(AssertionError):
        test_there_is_no_import_cycle(broken)


def test_the_worker_side_runs_on_the_standard_library_alone():
    """Under `python -I -S` (no site-packages, as a bare worker interpreter), every worker-side
    module imports and parses a program that folds a constant of every operation, and nothing
    outside the standard library is loaded."""
    script = PACKAGE_PREFIX + textwrap.dedent("""
        import importlib, json
        for name in sys.argv[2].split(","):
            importlib.import_module(name)
        from gradcheck.program.language import parse
        from gradcheck.program.ops import OPS
        constants = " + ".join(f"{name}(0.5)" for name, op in OPS.items() if op.kind == "function")
        parse(f"y = x * ({constants}) + 2.0 ** 0.5 - 1.0 / 3.0", {"x": None})
        print(json.dumps(sorted({m.partition(".")[0] for m in sys.modules})))
    """)
    done = subprocess.run([sys.executable, "-I", "-S", "-c", script, str(PACKAGE),
                           ",".join(WORKER_SIDE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout)) - {"gradcheck", "__main__"}
    assert loaded <= sys.stdlib_module_names, loaded - sys.stdlib_module_names
