"""The package's import graph, read statically (ast over every module of npu_migrate, imports at
module level and inside functions alike, `if TYPE_CHECKING:` included): no import circles, no
private names taken from another module, and the engines layered as the architecture says.

    cli, check -> runplan -> run -> engine (Python), notebook, textfiles, cache -> model -> findings

A failure names the modules and lines that break the rule.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import npu_migrate

PACKAGE = "npu_migrate"
ROOT = Path(npu_migrate.__file__).resolve().parent
# Left out of the private-name rule: the shim template, a package of its own once injected
# (`npu_compat`), whose __main__ reads a flag its __init__ sets.
PRIVATE_NAME_EXEMPT = ("npu_migrate.shim",)
FAMILY_MODULES = ("device", "cuda_api", "distributed", "amp", "attention", "cli_env", "diagnostics")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


class Import:
    """One import of a package module: who imports what (and which names), where."""

    def __init__(self, importer: str, target: str, names: tuple[str, ...], line: int):
        self.importer, self.target, self.names, self.line = importer, target, names, line

    def where(self) -> str:
        return f"{self.importer} (line {self.line})"


def imports_of(name: str, path: Path, modules, text: str | None = None) -> list[Import]:
    """Every import in the module (its file, or `text`) that names a module of the package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []
    text = path.read_text(encoding="utf-8") if text is None else text
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    found.append(Import(name, alias.name, (), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source != PACKAGE and not source.startswith(PACKAGE + "."):
                continue
            names = tuple(alias.name for alias in node.names)
            plain = []  # names that are attributes of `source`, not modules of their own
            for alias in names:
                if f"{source}.{alias}" in modules:  # `from . import engine`: the module engine
                    found.append(Import(name, f"{source}.{alias}", (), node.lineno))
                else:
                    plain.append(alias)
            if plain or not names:
                found.append(Import(name, source, tuple(plain), node.lineno))
    return found


def import_graph() -> tuple[dict[str, set[str]], list[Import]]:
    modules = all_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    everything: list[Import] = []
    for name, path in modules.items():
        for imp in imports_of(name, path, modules):
            if imp.target in modules and imp.target != name:
                graph[name].add(imp.target)
                everything.append(imp)
    return graph, everything


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle (its modules, the first one repeated at the end), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = GREY
        stack.append(node)
        for nxt in sorted(graph[node]):
            if colour[nxt] == GREY:
                return stack[stack.index(nxt):] + [nxt]
            if colour[nxt] == WHITE:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        colour[node] = BLACK
        return None

    for start in sorted(graph):
        if colour[start] == WHITE:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def describe_cycle(cycle: list[str], imports: list[Import]) -> str:
    steps = []
    for importer, target in zip(cycle, cycle[1:]):
        lines = sorted({i.line for i in imports if i.importer == importer and i.target == target})
        steps.append(f"  {importer} imports {target} (line {', '.join(map(str, lines))})")
    return "import circle:\n" + "\n".join(steps)


def test_the_graph_sees_every_kind_of_import():
    """The reader itself: module level, inside a function, `from . import x`, absolute."""
    graph, _imports = import_graph()
    assert "npu_migrate.engine" in graph["npu_migrate.notebook"]  # from .engine import (...)
    assert "npu_migrate.hotslice" in graph["npu_migrate.engine"]  # from . import hotslice
    assert "npu_migrate.layout" in graph["npu_migrate.placement"]  # inside a function
    modules = all_modules()
    text = ("import npu_migrate.engine\nfrom npu_migrate.run import run_files\n"
            "def f():\n    from .discover import _hidden\n    from . import model, __version__\n")
    found = imports_of("npu_migrate.x", ROOT / "x.py", modules, text)
    assert [(i.target, i.names, i.line) for i in found] == [
        ("npu_migrate.engine", (), 1), ("npu_migrate.run", ("run_files",), 2),
        ("npu_migrate.discover", ("_hidden",), 4), ("npu_migrate.model", (), 5), ("npu_migrate", ("__version__",), 5)]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circles():
    graph, imports = import_graph()
    cycle = find_cycle(graph)
    assert cycle is None, describe_cycle(cycle, imports)


def test_no_private_names_from_another_module():
    _graph, imports = import_graph()
    bad = []
    for imp in imports:
        if imp.importer.startswith(PRIVATE_NAME_EXEMPT):
            continue
        private = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
        last = imp.target.rpartition(".")[2]
        if last.startswith("_") and not last.startswith("__"):
            private.append(f"the module {imp.target}")
        if private:
            bad.append(f"  {imp.where()}: {', '.join(private)} from {imp.target}")
    assert not bad, "private names imported from another module (make them public, or move them):\n" + "\n".join(bad)


def private_attribute_uses(name: str, path: Path, modules) -> list[str]:
    """`catalogue._read_table(...)`: a private name read through a package module bound here."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    bound = {}  # local name -> package module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            source = ".".join(base + ([node.module] if node.module else [])) if node.level else (node.module or "")
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    bound[alias.asname] = alias.name
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                and node.attr.startswith("_") and not node.attr.startswith("__") and bound[node.value.id] != name):
            found.append(f"  {name} (line {node.lineno}): {node.value.id}.{node.attr}")
    return found


def test_no_private_names_read_through_another_module():
    modules = all_modules()
    bad = []
    for name, path in modules.items():
        if not name.startswith(PRIVATE_NAME_EXEMPT):
            bad.extend(private_attribute_uses(name, path, modules))
    assert not bad, "private names read from another module (make them public, or move them):\n" + "\n".join(bad)


def test_families_never_import_each_other():
    """A family reads as its own documentation: what families share lives in families/context.py."""
    graph, imports = import_graph()
    bad = []
    for family in FAMILY_MODULES:
        importer = f"npu_migrate.families.{family}"
        assert importer in graph, f"{importer}: no such module"
        for target in sorted(graph[importer]):
            short = target.rpartition(".")[2]
            if target.startswith("npu_migrate.families") and short not in ("base", "context"):
                bad.append(f"  {importer} imports {target}")
            if short in ("engine", "run", "runplan", "notebook", "textfiles", "sweep", "cli", "check", "cache"):
                bad.append(f"  {importer} imports {target}: a family sits below the engines")
    assert not bad, "rule families must share only base.py and context.py:\n" + "\n".join(bad)


# (importer, modules it must not import, why)
LAYERS = [
    ("npu_migrate.engine",
     ("notebook", "textfiles", "run", "runplan", "cache", "cli", "check", "outtree", "render", "report"),
     "engine.py is the Python engine only: the notebook and text-file engines sit beside it, and "
     "what runs many files (run.py), caches them or writes them sits above it"),
    ("npu_migrate.notebook", ("textfiles", "run", "runplan", "cache", "cli", "check"),
     "the notebook engine uses the Python engine's public functions, nothing above it"),
    ("npu_migrate.textfiles", ("engine", "notebook", "run", "runplan", "cache", "cli", "check"),
     "the text-file engine needs only the shared types (model.py)"),
    ("npu_migrate.model", ("engine", "notebook", "textfiles", "run", "runplan", "cache", "cli", "check"),
     "model.py holds the types every engine shares: it sits below all of them"),
    ("npu_migrate.cache", ("engine", "notebook", "textfiles", "run", "runplan", "cli", "check"),
     "the cache stores FileResults (model.py) and knows no engine"),
    ("npu_migrate.run", ("runplan", "cli", "check"), "run.py runs files; the commands sit above it"),
    ("npu_migrate.runplan", ("cli", "check"), "both commands import runplan, never each other for it"),
    ("npu_migrate.check", ("cli",), "check shares its run options with migrate through runplan"),
]


def test_layers():
    graph, imports = import_graph()
    bad = []
    for importer, forbidden, why in LAYERS:
        if importer not in graph:
            bad.append(f"  {importer}: no such module")
            continue
        for target in sorted(graph[importer]):
            if target.rpartition(".")[2] in forbidden:
                lines = sorted({i.line for i in imports if i.importer == importer and i.target == target})
                bad.append(f"  {importer} imports {target} (line {', '.join(map(str, lines))}): {why}")
    assert not bad, "layering broken:\n" + "\n".join(bad)


def test_nothing_below_run_imports_it():
    """Only the commands (and runplan, which both share) import run.py."""
    graph, imports = import_graph()
    allowed = {"npu_migrate.runplan", "npu_migrate.cli", "npu_migrate.check"}
    importers = defaultdict(list)
    for imp in imports:
        if imp.target == "npu_migrate.run" and imp.importer not in allowed:
            importers[imp.importer].append(imp.line)
    assert not importers, "run.py imported from below it: " + ", ".join(
        f"{name} (line {', '.join(map(str, lines))})" for name, lines in sorted(importers.items()))
