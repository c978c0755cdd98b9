"""A backend module its package loads only by the name a user chooses (issue #16, policy P1;
round-34 audit IA#35). A whole-run pass (runplan.whole_run_passes, after registryoptin28.py, whose
by-name registries it extends to a package's dynamic import).

vLLM's `multimodal/video_decoders/`:

    # __init__.py
    VideoDecoderBackend = Literal["opencv", "torchcodec", "pynvvideocodec", "deepstream"]
    ...
    def decode_video(backend: str, loader_cls, data, ...):
        module = import_module(f".{backend}", __name__)
        decoder = getattr(module, f"decode_{backend}")

    # deepstream.py
        from nvidia.deepstream_videodecode import probe_metadata            # NPU990

and `multimodal/video.py`: `backend: VideoDecoderBackend = "opencv"` (the loader's default, set
through `--media-io-kwargs`). The DeepStream decoder is loaded only when a user names the
`deepstream` codec: an explicit choice. Under policy P1 the open errors and warnings of such a
module become info "reached on an NPU host only when the backend `deepstream` is chosen by name:
...". Never dropped (the user may choose it there).

The decision, per library module M (stem S) of a package P with open findings:
* P's `__init__.py` imports `import_module(f".{NAME}", __name__)` (or `importlib.import_module`),
  NAME a parameter of the enclosing function, and holds a `Literal[...]` offering "S";
* no import statement of the run names M (`from .S import`, `from P.S import`, `import P.S`;
  a test's import too keeps it: the finding is then reached from there);
* no default of the run is "S": no `= "S"` (a parameter's default, an assignment, a keyword) nor
  `"S"` as a dict's or `getenv`'s default; the string occurs in the library only in P's
  `__init__.py` (the Literal, an options table's key) and in registrations (`register_*("S")`).

Kept (the nearest true cases): a backend some default names (`backend = "deepstream"`), a module
the run imports by its name, a package loading modules by a name not offered by a Literal.
"""

from __future__ import annotations

import ast
import re
from typing import Optional

from . import astcache

CHOSEN = ("reached on an NPU host only when the backend `{name}` is chosen by name: {init} loads the module only "
          "as `import_module(f\".{{{param}}}\", __name__)` (line {line}), `{alias}` offers it (line {literal}), and "
          "no default of the run names it: an opt-in, to port if it is used there")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _dynamic_import(tree: ast.Module) -> Optional[tuple[str, int]]:
    """(the parameter, the line) of `import_module(f".{param}", __name__)` in a function of the module."""
    for function in (n for n in astcache.walk(tree) if isinstance(n, _FUNCTIONS)):
        params = {a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and (astcache.dotted(node.func) or "").rpartition(".")[2] == "import_module" \
                    and len(node.args) == 2 and isinstance(node.args[1], ast.Name) and node.args[1].id == "__name__" \
                    and isinstance(node.args[0], ast.JoinedStr) and len(node.args[0].values) == 2:
                head, value = node.args[0].values
                if isinstance(head, ast.Constant) and head.value == "." and isinstance(value, ast.FormattedValue) \
                        and isinstance(value.value, ast.Name) and value.value.id in params:
                    return value.value.id, node.lineno
    return None


def _literals(tree: ast.Module) -> dict[str, tuple[str, int]]:
    """{offered string: (the alias, line)} of the module-level `X = Literal[...]` aliases."""
    out: dict[str, tuple[str, int]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and isinstance(stmt.value, ast.Subscript) \
                and (astcache.dotted(stmt.value.value) or "").rpartition(".")[2] == "Literal":
            items = stmt.value.slice.elts if isinstance(stmt.value.slice, ast.Tuple) else [stmt.value.slice]
            for item in items:
                if isinstance(item, ast.Constant) and isinstance(item.value, str):
                    out[item.value] = (stmt.targets[0].id, stmt.lineno)
    return out


def _default_named(name: str, data: bytes) -> bool:
    """The text makes `name` a default: `= "name"`, `: "name"` in a call's default, `getenv(.., "name")`."""
    quoted = rb"[\"']" + re.escape(name.encode()) + rb"[\"']"
    return bool(re.search(rb"(?<![=!<>])=\s*" + quoted, data) or re.search(rb"(get|getenv)\([^()]*,\s*" + quoted, data))


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the open findings of a backend module loaded only by a chosen name lowered
    to info (P1; this module's docstring)."""
    from .envskips29 import lower_result
    from .importgates import is_test
    from .modpaths import RunModules, RunTexts
    from .moot import is_open

    def wanted(f) -> bool:
        return is_open(f) and not f.fixable and f.cell is None and f.severity in ("error", "warning")

    by_path = {r.relpath: i for i, r in enumerate(results)}
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and "/" in r.relpath
                  and not r.relpath.endswith("__init__.py") and not is_test(r.relpath)
                  and r.relpath.rsplit("/", 1)[0] + "/__init__.py" in by_path and any(map(wanted, r.findings))]
    if not candidates:
        return results
    text_of = RunTexts(results, paths or {})
    modules = None
    out = list(results)
    inits: dict = {}
    for i in candidates:
        folder, stem = results[i].relpath[:-3].rsplit("/", 1)
        init = f"{folder}/__init__.py"
        if init not in inits:
            data = text_of(by_path[init]) or b""
            inits[init] = None
            if b"import_module" in data and b"Literal" in data:
                modules = modules or RunModules(results, text_of)
                tree = modules.tree(by_path[init])
                found = _dynamic_import(tree) if tree is not None else None
                if found is not None:
                    inits[init] = (found, _literals(tree))
        if inits[init] is None or stem not in inits[init][1]:
            continue
        (param, line), literals = inits[init]
        package = re.escape(folder.removeprefix("src/").replace("/", ".").encode())
        word = re.escape(stem.encode())
        imported = re.compile(rb"^\s*(from\s+(\.+|" + package + rb"\.)" + word + rb"\s+import|import\s+" + package
                              + rb"\." + word + rb"\b|from\s+(\.+|" + package + rb")\s+import\s+[^\n]*\b" + word
                              + rb"\b)", re.M)
        if any(j != i and stem.encode() in (text_of(j) or b"")
               and (imported.search(text_of(j) or b"") or _default_named(stem, text_of(j) or b""))
               for j in range(len(results)) if results[j].relpath.endswith((".py", ".yaml", ".yml", ".toml", ".json"))):
            continue
        alias, literal_line = literals[stem]
        why = CHOSEN.format(name=stem, init=init, param=param, line=line, alias=alias, literal=literal_line)
        out[i] = lower_result(results[i], lambda _line, why=why: why, wanted)
    return out
