"""A `.cu` source whose extension class is reached only from autograd Functions nothing references
(issue #16, precision wave 23, round-23 audit BM#32).

A project that builds its CUDA extensions through classes (`class MoeCudaExtension(_CudaExtension)`
whose `sources_files()` lists `"kernel/cuda/moe_kernel.cu"`) loads them through a loader class
(`class MoeLoader(KernelLoader): REGISTRY = [MoeCudaExtension]`) that a helper calls
(`def load_moe(): MOE_KERNEL = MoeLoader().load()`). When that helper's only callers are the
`forward`/`backward` of `torch.autograd.Function` subclasses that no code of the run references
(`class MoeDispatch(torch.autograd.Function)`, never applied, imported or named), the kernel is
never loaded, on CUDA or on an NPU host: its NPU912 error asks for no work.

The rule (whole run, runplan.py after jitreach23.py): an open NPU912 error on a `.cu` file (its
byte-identical copies folded in) is a named skipped scope when at least one class method whose
name says sources (extfolds19's reading: `sources_files`, `get_sources`) names the file (a string
whose path tail is the file's: `kernel/cuda/moe_kernel.cu`), and every such class is unreached:

* a unit (a module-level class or function) is unreached when every read of its name in the run's
  Python files (imports and `__all__` strings aside: they bind, they do not use) lies inside another
  unreached unit (the class body of a loader, `REGISTRY = [Ext]`, counts as in the loader), a few
  steps deep;
* the chain must end in `torch.autograd.Function` subclasses that nothing reads at all: a unit of
  any other kind with no reader (a public function, a layer class) is the library's API for its
  users and stays reached.

A read at module level, in a string (a dynamic load), in a unit with a reader outside the chain, or
a chain that ends in an ordinary class or function keeps the error.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

NEVER_LOADED = "built only by a CUDA extension an NPU host never loads"  # (moot.PHRASES, optionalext.py)
_CU = re.compile(r"^[\w./\-]+\.cu$")
_METHOD = re.compile(r"(?:^|_)sources?(?:_|$)", re.IGNORECASE)
_DEPTH = 5
_FUNCTION_BASES = frozenset({"torch.autograd.Function", "autograd.Function", "Function"})


def _open_error(finding) -> bool:
    from .moot import is_moot

    return (finding.code == "NPU912" and finding.severity == "error" and not finding.fixable
            and finding.cell is None and not is_moot(finding) and "*" not in (finding.source or ""))


def _top_unit(tree: ast.Module, line: int) -> Optional[ast.AST]:
    """The module-level class or function whose body (a class body's statements too) holds `line`."""
    for stmt in tree.body:
        if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and stmt.body[0].lineno <= line <= (stmt.end_lineno or stmt.lineno):
            return stmt
    return None


def _autograd_function(unit: ast.AST) -> bool:
    return isinstance(unit, ast.ClassDef) and any(
        (astcache.dotted(b, strict=False) or "") in _FUNCTION_BASES for b in unit.bases)


class _Units:
    """Who reads each module-level unit of the run."""

    def __init__(self, results: list, text_of):
        self.results, self.text_of = results, text_of
        self.python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
        self.trees: dict[int, Optional[ast.Module]] = {}
        self.memo: dict[tuple, Optional[list]] = {}

    def tree(self, i: int) -> Optional[ast.Module]:
        if i not in self.trees:
            data = self.text_of(i)
            self.trees[i] = astcache.parse(data) if data else None
        return self.trees[i]

    def _build_list(self, tree: ast.Module, node: ast.AST) -> bool:
        """`node` is an element of a module-level list (`ALL_EXTENSIONS = [..., Ext, ...]`) that only
        setup scripts read (`for ext_cls in ALL_EXTENSIONS: ... ext.build_aot()`): the build's list
        of every extension class, read by no code that loads one."""
        name = _build_list_name(tree, node)
        if name is None:
            return False
        read = False
        for j in self.python:
            data = self.text_of(j) or b""
            if name.encode() not in data:
                continue
            other = self.tree(j)
            if other is None:
                return False
            loads = [n for n in astcache.walk(other) if isinstance(n, (ast.Name, ast.Attribute))
                     and (n.id if isinstance(n, ast.Name) else n.attr) == name and isinstance(n.ctx, ast.Load)]
            if loads and not self.results[j].relpath.rsplit("/", 1)[-1].startswith("setup"):
                return False
            read = read or bool(loads)
        return read

    def unreached(self, i: int, unit: ast.AST, depth: int = 0, seen: frozenset = frozenset()) -> Optional[list]:
        """The chain's roots [(module, "Name (path:line)")]: autograd Functions nothing reads, through
        which alone `unit` of module i is reached; None where it may be reached otherwise."""
        key = (i, unit.name)
        if key in seen:
            return []
        if key in self.memo:
            return self.memo[key]
        result = None if depth > _DEPTH else self._unreached(i, unit, depth, seen | {key})
        self.memo[key] = result
        return result

    def _unreached(self, i: int, unit: ast.AST, depth: int, seen: frozenset) -> Optional[list]:
        name = unit.name
        word = name.encode()
        roots: list = []
        read = False
        for j in self.python:
            data = self.text_of(j) or b""
            if word not in data:
                continue
            tree = self.tree(j)
            if tree is None:
                return None
            if j != i and any(isinstance(s, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == name
                              for s in tree.body):
                continue  # (another file's own by that name: a copy of the package)
            strings = [n for n in astcache.walk(tree) if isinstance(n, ast.Constant) and n.value == name]
            listed = {id(e) for n in astcache.walk(tree) if isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
                for e in ast.walk(n.value)}
            if any(id(s) not in listed for s in strings):
                return None  # (named in a string: loaded some other way)
            for node in astcache.walk(tree):
                hit = (isinstance(node, ast.Name) and node.id == name) or (
                    isinstance(node, ast.Attribute) and node.attr == name)
                if not hit:
                    continue
                if not isinstance(node.ctx, ast.Load):
                    return None
                outer = _top_unit(tree, node.lineno)
                if outer is None:
                    if self._build_list(tree, node):
                        continue  # (the build script's list of every extension class: no load)
                    return None  # (a module-level read)
                if j == i and outer is unit:
                    continue  # (its own body)
                read = True
                inner = self.unreached(j, outer, depth + 1, seen)
                if inner is None:
                    return None
                roots.extend(inner)
        if not read:
            if _autograd_function(unit):
                return [(i, f"`{name}` ({self.results[i].relpath}:{unit.lineno})")]
            from .kernelreach26 import unnamed_private_function

            why = unnamed_private_function(i, self.results[i].relpath, unit, self.python, self.text_of, self.tree)
            return [(i, f"`{name}` ({self.results[i].relpath}:{unit.lineno}, {why})")] if why else None
        return roots


def _build_list_name(tree: ast.Module, node: ast.AST) -> Optional[str]:
    """NAME where `node` is an element of a module-level `NAME = [A, B, ...]` list or tuple."""
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and isinstance(stmt.value, (ast.List, ast.Tuple)) and any(e is node for e in stmt.value.elts):
            return stmt.targets[0].id
    return None


def _extension_classes(tree: ast.Module, relpath: str) -> list[ast.ClassDef]:
    """The module-level classes of a file with a sources method naming `relpath` (by path tail)."""
    out = []
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for item in cls.body:
            if isinstance(item, ast.FunctionDef) and _METHOD.search(item.name) and any(
                    isinstance(n, ast.Constant) and isinstance(n.value, str) and _CU.match(n.value.strip())
                    and ("/" + relpath).endswith("/" + n.value.strip().lstrip("./")) for n in ast.walk(item)):
                out.append(cls)
                break
    return out


def review(results: list, paths: Optional[dict] = None) -> list:
    """The results, with the NPU912 errors of the module docstring's shape lowered to info naming
    NEVER_LOADED (a named skipped scope through moot.to_scopes)."""
    targets = [(i, k) for i, r in enumerate(results) for k, f in enumerate(r.findings)
               if r.relpath.lower().endswith(".cu") and _open_error(f)]
    if not targets:
        return results
    from .modpaths import RunTexts

    text_of = RunTexts(results, paths or {})
    units: Optional[_Units] = None
    candidates = None
    out = list(results)
    for i, k in targets:
        finding = results[i].findings[k]
        relpath = results[i].relpath
        base = relpath.rsplit("/", 1)[-1].encode()
        if candidates is None:
            candidates = [j for j, r in enumerate(results) if r.relpath.endswith(".py")
                          and b"class" in (text_of(j) or b"") and b".cu" in (text_of(j) or b"")]
        units = units or _Units(results, text_of)
        found = []
        for j in candidates:
            if base not in (text_of(j) or b""):
                continue
            tree = units.tree(j)
            if tree is not None:
                found.extend((j, cls) for cls in _extension_classes(tree, relpath))
        if not found:
            continue
        roots: list = []
        for j, cls in found:
            chain = units.unreached(j, cls)
            if chain is None:
                roots = None
                break
            roots.extend(chain)
        if not roots:
            continue
        classes = ", ".join(dict.fromkeys(f"`{cls.name}` ({results[j].relpath}:{cls.lineno})" for j, cls in found))
        shown = ", ".join(dict.fromkeys(r for _j, r in roots))
        kind = "" if any(", a function of" in r for _j, r in roots) else \
            f"the `torch.autograd.Function` subclass{'es' if len(set(roots)) > 1 else ''} "
        message = (f"{finding.message} ({NEVER_LOADED}: the extension class {classes} is reached only through "
                   f"{kind}{shown}, which no code of the run applies, imports or names)")
        findings = list(out[i].findings)
        findings[k] = dataclasses.replace(finding, severity="info", message=message)
        out[i] = dataclasses.replace(out[i], findings=findings)
    return out
