"""Single cases left from the round-21 audits (issue #16), helpers the whole-run passes call.

- **A package attribute named like its submodule** (round 21 BF#4, for optionalext.py's guarded
  Triton modules): `from pkg import rms_layernorm` where `pkg/__init__.py` binds `rms_layernorm`
  with `from .rms_layernorm import rms_layernorm` only under a Triton-availability `if` (`if
  HAS_TRITON:`). The run's import facts resolve the name to the submodule `pkg/rms_layernorm.py`,
  so optionalext.py read the line as an unguarded import of that module and kept its NPU910 an
  error, where its siblings (the same `try: import triton` / `if HAS_TRITON:` shape, imported by
  other names) were info. What the line imports is the package's attribute: the package runs its
  `__init__` (whose import of the submodule is the gated site already counted), and where Triton
  is missing the attribute is unbound and Python falls back to importing the submodule, which
  guards Triton itself and imports cleanly. So the line is no unguarded import of the module; the
  missing name (a module object where the kernel function was meant) is the importer's own matter,
  which importguards20.py reports at the package's first importer. `reaches_package_attribute`
  answers that for one importer line; an `__init__` that binds the name unconditionally, or binds
  another name, keeps the site as it was.
- **A host-only `.cu` helper of a reported source** (round 21 BG#18, whole run after
  extfolds19.py, `review`): srcfolds17's `name_host_helpers` words the NPU912 info of a `.cu` with no kernel,
  no op registration and no `Tensor`, every exported function of which another reported `.cu`
  calls ("no kernel in the file: ... only host code that the reported source `x.cu` calls";
  xformers' pt_stable_utils.cu, a device-properties cache). Compiled by the same CUDA-gated build
  as that caller (the same "not compiled on an NPU host (setup.py:N builds ..." of buildgated.py),
  it adds no work the caller's finding does not: `fold_host_helpers` folds it into the first named
  caller's open NPU912 finding, which names it ("also `../pt_stable_utils.cu`, host code with no
  kernel that it calls, compiled by the same build"). A helper built by another build (or none
  named), or whose caller's finding is moot or gone, keeps its finding.
- **A lazy import of an extension in a helper for that extension's layer class** (round 21 BG#15,
  whole run): an NPU911 "import of compiled extension module `ext...`" inside a function (not at
  module level) that tests `isinstance(x, Layer)` and raises, where `Layer` comes from a run module
  that imports the same `ext` at module level in a `try` catching ImportError (auto-gptq's
  `exllama_set_max_input_length`, valid only for models whose layers are `ExllamaQuantLinear`,
  whose module binds raisers where `exllama_kernels` is missing). On an NPU host no model has such
  a layer without the extension, so the helper's import adds no work beyond porting the extension:
  `fold_lazy_extension_imports` folds it into the run's NPU912 finding on that extension's sources
  ("... of the extension `ext` ..."), which names the import, its function and the layer class.
  A module-level import, a function with no such `isinstance`, a class whose module imports the
  extension unguarded, or an extension whose sources have no open finding keep the finding.
- **A CUDA-only kernel loader run at module level** (a left-over of round 21: ColossalAI's
  `inference_ops = InferenceOpsLoader().load()` at the top of a model module): loaders20.py lowers
  the findings of a class whose `__init__` runs such a loader, but the same call as a plain
  module-level statement had no finding at all, though on an NPU host the loader's `load` asserts
  that one of its CUDA-only extensions is available and the module fails at import.
  `report_module_loaders` adds an NPU911 error at the call (loaders20's reading: the loader
  resolved through the file's import, a registry of CUDA extensions only, a `load` that asserts or
  raises). A call inside a `try`, an `if` or a function, a registry with an NPU or CPU extension,
  and test modules (their subject is the CUDA kernel) get none.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import replace
from typing import Optional

from . import astcache


def _gated_binding(init: ast.Module, name: str, is_gate) -> bool:
    """`init` binds `name` by `from .name import ...` (as `name`) only inside a module-level `if`
    whose test `is_gate` accepts (a Triton-availability test)."""
    found = False
    for statement in init.body:
        for node in ast.walk(statement):
            if not (isinstance(node, ast.ImportFrom) and node.level == 1 and node.module == name):
                continue
            if not any((a.asname or a.name) == name for a in node.names):
                continue
            if not (isinstance(statement, ast.If) and is_gate(statement.test)
                    and any(node in ast.walk(s) for s in statement.body)):
                return False
            found = True
    return found


def reaches_package_attribute(importer: Optional[ast.Module], line: int, modules, init: Optional[ast.Module],
                              is_gate) -> bool:
    """Every import statement of `importer` at `line` is `from <package> import <name>` (among other
    names), `<package>.<name>` one of the submodule's dotted names (`modules`), and the package's
    `__init__` (`init`) binds `name` from that submodule only under a gate `is_gate` accepts: the
    line imports the package's attribute, not the submodule."""
    if importer is None or init is None:
        return False
    return any(_attribute_site(importer, line, *module.rsplit(".", 1), init, is_gate)
               for module in modules if "." in module)


def _attribute_site(importer: ast.Module, line: int, package: str, name: str, init: ast.Module,
                    is_gate) -> bool:
    statements = [n for n in ast.walk(importer) if isinstance(n, (ast.Import, ast.ImportFrom))
                  and n.lineno == line]
    if not statements:
        return False
    for node in statements:
        if not (isinstance(node, ast.ImportFrom) and not node.level and node.module == package
                and any(a.name == name for a in node.names)):
            return False
    return _gated_binding(init, name, is_gate)


# ----------------------------------------------------------------------------- host-only .cu helpers
_CALLER = re.compile(r"only host code that the reported sources? `([^`]+)`")
_BUILD = re.compile(r"not compiled on an NPU host \((\S+) builds CUDA sources only when")
HOST_HELPER = "host code with no kernel that it calls, compiled by the same build"


def _open_source(finding) -> bool:
    from .moot import is_moot

    return finding.code == "NPU912" and not finding.fixable and finding.cell is None and not is_moot(finding)


def fold_host_helpers(results: list, paths: Optional[dict] = None) -> list:
    """Module's doc, second shape (a new list)."""
    by_path = {r.relpath: i for i, r in enumerate(results)}
    out = list(results)
    for k, result in enumerate(results):
        if not result.relpath.lower().endswith(".cu"):
            continue
        helper = next((f for f in result.findings if _open_source(f) and f.severity == "info"
                       and _CALLER.search(f.message) and _BUILD.search(f.message)), None)
        if helper is None:
            continue
        first = by_path.get(_CALLER.search(helper.message).group(1))
        if first is None or first == k:
            continue
        target = next((f for f in out[first].findings if _open_source(f)), None)
        build = _BUILD.search(target.message) if target is not None else None
        if build is None or build.group(1) != _BUILD.search(helper.message).group(1):
            continue  # (another build, or none named: the helper may be compiled where the caller is not)
        base = posixpath.relpath(result.relpath, posixpath.dirname(out[first].relpath) or ".")
        note = f"also `{base}`, {HOST_HELPER}"
        out[first] = replace(out[first], findings=[
            replace(f, message=f"{f.message} ({note})") if f is target else f for f in out[first].findings])
        out[k] = replace(out[k], findings=[f for f in out[k].findings if f is not helper])
    return out


# ----------------------------------------------------------------------------- lazy extension imports
_EXTENSION_IMPORT = re.compile(r"^C\+\+/CUDA extension or CUDA-only compiled package: import of compiled extension "
                               r"module `(\w+)[\w.]*`$")
_OF_EXTENSION = "of the extension `{ext}` ("


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        names = [handler.type] if not isinstance(handler.type, ast.Tuple) else list(handler.type.elts)
        if handler.type is None or any((astcache.dotted(n) or "") in ("ImportError", "ModuleNotFoundError", "Exception")
                                       for n in names):
            return True
    return False


def _imports_guarded(tree: ast.Module, ext: str) -> bool:
    """`tree` imports `ext` at module level, and only inside `try` bodies catching ImportError."""
    found = False
    for statement in tree.body:
        for node in ast.walk(statement):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if not any(n == ext or n.startswith(ext + ".") for n in names):
                continue
            if not (isinstance(statement, ast.Try) and _catches_import_error(statement)
                    and any(node in ast.walk(b) for b in statement.body)):
                return False
            found = True
    return found


def _function_at(tree: ast.Module, line: int) -> Optional[ast.AST]:
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno < line <= (node.end_lineno or 0):
            if best is None or node.lineno > best.lineno:
                best = node
    return best


def _layer_classes(func: ast.AST) -> list[str]:
    """The names `func` tests with `isinstance(x, Name)`, when it also raises."""
    if not any(isinstance(n, ast.Raise) for n in ast.walk(func)):
        return []
    out = []
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                and len(node.args) == 2 and isinstance(node.args[1], ast.Name):
            out.append(node.args[1].id)
    return list(dict.fromkeys(out))


def _class_module(tree: ast.Module, relpath: str, name: str, modules) -> Optional[tuple[int, str]]:
    """(run file, class name there) of a module-level `from m import Class [as name]` in `tree`."""
    from .modpaths import resolve_relative

    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) != name:
                continue
            if node.level:
                stem = resolve_relative(relpath, node.level, node.module or "")
                found = next((i for i, r in enumerate(modules.results) if r.relpath[:-3] == stem), None)
            else:
                found = modules.by_name.get(node.module or "")
            return (found, alias.name) if found is not None else None
    return None


def _helper_for_layer(tree: ast.Module, results: list, i: int, line: int, ext: str, modules) -> Optional[tuple]:
    """(line, function, layer class, its module's relpath) when the import at `line` sits in a
    function that tests `isinstance(x, Layer)` and raises, `Layer` imported from a run module that
    imports `ext` only in a `try` catching ImportError; None otherwise."""
    func = _function_at(tree, line)
    if func is None:
        return None
    for name in _layer_classes(func):
        where = _class_module(tree, results[i].relpath, name, modules)
        other = modules.tree(where[0]) if where is not None else None
        if other is not None and _imports_guarded(other, ext):
            return (line, func.name, name, results[where[0]].relpath)
    return None


def fold_lazy_extension_imports(results: list, paths: Optional[dict] = None) -> list:
    """Module's doc, third shape (a new list)."""
    from .modpaths import RunModules, RunTexts

    wanted = [(i, f) for i, r in enumerate(results) if r.relpath.endswith(".py") for f in r.findings
              if f.code == "NPU911" and not f.fixable and f.cell is None and f.severity != "info"
              and _EXTENSION_IMPORT.match(f.message.split(" (also at ", 1)[0])]
    if not wanted:
        return results
    modules = RunModules(results, RunTexts(results, paths or {}))
    out = list(results)
    for i, finding in wanted:
        ext = _EXTENSION_IMPORT.match(finding.message.split(" (also at ", 1)[0]).group(1)
        target = next(((k, f) for k, r in enumerate(out) if r.relpath.lower().endswith((".cu", ".cuh"))
                       for f in r.findings if _open_source(f) and _OF_EXTENSION.format(ext=ext) in f.message), None)
        tree = modules.tree(i)
        if target is None or tree is None:
            continue
        helpers = [_helper_for_layer(tree, results, i, line, ext, modules)
                   for line in dict.fromkeys([finding.line, *(line for line, _c, _s in finding.also)])]
        if not helpers or None in helpers:
            continue  # (every place of the finding must be such a helper's import)
        k, source = target
        shown = "; ".join(f"`{results[i].relpath}:{line}` in `{func}`, a helper valid only for `{name}` layers, "
                          f"whose module `{module}` imports `{ext}` in a `try`"
                          for line, func, name, module in helpers[:3])
        more = f"; and {len(helpers) - 3} more" if len(helpers) > 3 else ""
        note = (f"also its lazy import{'s' if len(helpers) > 1 else ''} at {shown}{more}: no NPU host has such "
                f"a layer before the extension is ported")
        out[k] = replace(out[k], findings=[replace(f, message=f"{f.message} ({note})") if f is source else f
                                           for f in out[k].findings])
        out[i] = replace(out[i], findings=[f for f in out[i].findings if f is not finding])
    return out


# ----------------------------------------------------------------------------- module-level kernel loaders
NO_TRIGGER = "no CUDA trigger words"  # (run.py: a file the engine did not parse, for want of CUDA words)
MODULE_LOADER = ("`{loader}().load()` at module level, {why}: on an NPU host this module fails at import; port "
                 "that loader's ops (an NPU extension in its registry), or load it where the CUDA path is taken")


def report_module_loaders(results: list, paths: Optional[dict] = None) -> list:
    """Module's doc, fourth shape (a new list)."""
    from .findings import Finding
    from .importgates import is_test
    from .loaders20 import fails_why, loader_call
    from .modpaths import RunTexts, module_names, resolve_relative

    text_of = RunTexts(results, paths or {})
    wanted = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and r.skipped in (None, NO_TRIGGER)
              and not is_test(r.relpath) and b").load(" in (text_of(i) or b"")]
    if not wanted:
        return results
    by_name: dict[str, int] = {}
    for i, r in enumerate(results):
        if r.relpath.endswith(".py"):
            for name in module_names(r.relpath):
                by_name.setdefault(name, i)
    out = list(results)
    for i in wanted:
        tree = astcache.parse(text_of(i) or b"")
        if tree is None:
            continue
        added = []
        for stmt in tree.body:
            call = loader_call(stmt)
            if call is None or any(f.line == call[1] and not f.fixable for f in out[i].findings):
                continue
            why = fails_why(call, tree, results[i].relpath, by_name, text_of, results, resolve_relative)
            if why is None:
                continue
            value = stmt.value
            added.append(Finding(path=results[i].relpath, line=value.lineno, column=value.col_offset + 1, code="NPU911",
                                 message=("C++/CUDA extension or CUDA-only compiled package: "
                                          + MODULE_LOADER.format(loader=call[0], why=why)),
                                 fixable=False, source=" ".join(ast.unparse(value).split()), severity="error"))
        if added:
            out[i] = replace(out[i], findings=sorted([*out[i].findings, *added]))
    return out


def review(results: list, paths: Optional[dict] = None) -> list:
    """The whole-run passes of the module's doc (runplan.py, after extfolds19.py)."""
    return report_module_loaders(fold_lazy_extension_imports(fold_host_helpers(results, paths), paths), paths)
