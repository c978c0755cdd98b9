"""Names that are not the helper's: a namesake another module defines, a registry key of another
object (issue #16, round-30 audit EC#21). Read by callersonly.CallerFinder.callers for each file
whose bytes name the helper.

callersonly follows a helper by its name through the whole run, so a function another module
defines under the same name, or a string naming something else, kept the helper's finding:

    # mamba/ops/layernorm_gated.py (home)         # third_party/fla/ops/kda.py (a namesake)
    @triton.heuristics(...)                       def rms_norm_gated(x, g, ...): ...
    def _layer_norm_fwd_1pass_kernel(...): ...
    def rms_norm_gated(x, z, ...):                # models/x/model.py
        _layer_norm_fwd(...)                      from third_party.fla.ops.kda import rms_norm_gated
                                                  ... rms_norm_gated(out, g)   # kda's, not home's
    # layers/layernorm.py
    @CustomOp.register("rms_norm_gated")          # the key of `RMSNormGated`, looks nothing up
    class RMSNormGated(CustomOp): ...

- `namesake_file`: a file other than the helper's own binds the name only to its own module-level
  `def`/`class`, or only by `from M import name` where M is another module of the run that defines
  the name itself (a module-level `def`/`class`, not a re-export); its bare uses of the name are
  that object's. Any other binding (a parameter, an assignment, a star import, an import from the
  helper's module or from a module the run lacks) keeps the file's references; attribute uses
  (`mod.name`) are always read as the helper's.
- `names_no_module` (for wholeprogram._names_module, round-30 EC#16): a string that cannot be the
  module's name in a dynamic import: a custom-op toggle `"-rms_norm"` / `"+rms_norm"` (a sign, then
  the bare word: no module or path starts so), or the bare word in a file whose every by-name
  import call (`import_module(...)`, `__import__(...)`) takes a literal (`__import__("os")`): those
  load the module they spell, never one a string of the file names.
- `registration_keys`: a string equal to the name that is an argument of a decorator call over a
  `def`/`class` of another name (`@CustomOp.register("rms_norm_gated") class RMSNormGated`): the
  registry holds the decorated object under that key, it fetches no function by that name. The
  helper decorated with its own name keeps the string (the registry may call it).
"""

from __future__ import annotations

import ast
import posixpath
import re

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# (a by-name import call and what follows it up to its first argument's start)
_BY_NAME_CALL = re.compile(rb"\b(?:import_module|__import__|load_source|spec_from_file_location|spec_from_loader)\(\s*")
_LITERAL = re.compile(rb"""[rbuf]{0,2}["'][\w./:-]*["']\s*[,)]""")


def names_no_module(quoted: bytes, word: bytes, data: bytes) -> bool:
    """Whether the string literal `quoted` (with its quotes) of a file's bytes `data`, holding
    `word` (a module's last name), cannot name that module: a sign then the word (`"-rms_norm"`),
    or the bare word where every by-name import call of the file takes a literal argument."""
    inner = quoted[1:-1]
    if inner[:1] in (b"+", b"-") and inner[1:] == word:
        return True
    if inner != word:
        return False
    calls = list(_BY_NAME_CALL.finditer(data))
    return all(_LITERAL.match(data, call.end()) is not None
               and word not in data[call.end():call.end() + 200].split(b")", 1)[0] for call in calls)


def registration_keys(tree: ast.Module, name: str) -> set[int]:
    """The ids of the string constants `name` passed to a decorator call over a def or class of
    another name (a registry key of that object)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, _DEFS) or node.name == name:
            continue
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Call):
                for arg in (*decorator.args, *(k.value for k in decorator.keywords)):
                    if isinstance(arg, ast.Constant) and arg.value == name:
                        out.add(id(arg))
    return out


class Namesakes:
    """Which files of a run bind a helper's name only to another object (the module docstring).
    `results`: the run's results; `tree(j)`: the parsed module of result j, or None."""

    def __init__(self, results: list, tree) -> None:
        from .modpaths import module_names

        self.results, self.tree = results, tree
        self.by_name: dict[str, int] = {}
        for j, result in enumerate(results):
            if result.relpath.endswith(".py"):
                for dotted in module_names(result.relpath):
                    self.by_name.setdefault(dotted, j)
        self.memo: dict = {}

    def _defines(self, j: int, name: str) -> bool:
        tree = self.tree(j)
        return tree is not None and any(isinstance(s, _DEFS) and s.name == name for s in tree.body)

    def _source(self, relpath: str, node: ast.ImportFrom) -> int | None:
        from .modpaths import resolve_relative

        if node.level:
            stem = resolve_relative(relpath, node.level, node.module or "")
            dotted = stem.replace("/", ".")
        else:
            dotted = node.module or ""
        return self.by_name.get(dotted)

    def namesake_file(self, j: int, name: str, home: str | None) -> bool:
        """Whether file j (not the helper's `home`) binds `name` only to another object: its own
        def/class, or an import from another run module defining it."""
        key = (j, name, home)
        if key in self.memo:
            return self.memo[key]
        relpath = self.results[j].relpath
        tree = self.tree(j)
        found = False
        if tree is not None and home is not None and relpath != home:
            found = self._only_other(tree, relpath, name, home)
        self.memo[key] = found
        return found

    def _only_other(self, tree: ast.Module, relpath: str, name: str, home: str) -> bool:
        bound = False
        for node in ast.walk(tree):
            if isinstance(node, _DEFS) and node.name == name:
                bound = True
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name == "*":
                        return False
                    if (alias.asname or alias.name) != name:
                        continue
                    if alias.name != name:
                        return False  # (`from m import other as name`: capcallers.rebinds_other's case)
                    source = self._source(relpath, node)
                    if source is None or self.results[source].relpath == home or not self._defines(source, name):
                        return False
                    bound = True
            elif isinstance(node, ast.Import):
                if any((a.asname or a.name.split(".", 1)[0]) == name for a in node.names):
                    return False
            elif isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
                return False
            elif isinstance(node, ast.arg) and node.arg == name:
                return False
            elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
                return False
        return bound and posixpath.basename(relpath) != "__init__.py"
