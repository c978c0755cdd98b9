"""A helper whose every caller is CUDA-only code elsewhere: its lazy CUDA-only import is moot.

A module-level function that imports a CUDA-only compiled package inside its body (NPU911:
`import flashinfer.rope` inside `mla_quantize_and_rope_for_fp8`, `from torch.utils.cpp_extension
import CUDA_HOME` inside `append_nvcc_threads`) fails on an NPU host only where it is called. The
per-file engine cannot see its callers; the round-13 audits (issue #16: AJ#25, AI#27, AH#4) read
such findings as false where every call of the helper in the project lies in code an NPU host never
runs. A reference (call or other use by name) of the helper counts as such when:

- it follows, in the same function, an unguarded import of the same CUDA-only package (a direct
  statement of the function's body: `import flashinfer.decode` then the call): that import fails
  first;
- it lies in a block testscopes.untaken_branches names in its file (a condition false on an NPU
  host, a class whose constructor raises there, ...);
- it lies in a method of a CUDA extension or op-builder class (the class or one of its bases named
  `*Cuda*Extension*`, `*CUDA*Builder*`): such classes only build CUDA extensions, which an NPU host
  never selects;
- every run of the function holding it that reaches it reads a name the file binds only by
  module-level imports of the same package, unguarded or under a condition false on an NPU host
  (`if is_flashinfer_available(): import flashinfer`, then `flashinfer.decode...` on every path of
  the caller): the caller fails there anyway, it is that package's code (a read in one branch only,
  or after a `return`, is not enough);
- it lies in a module that imports, unguarded in its body, a compiled package with no NPU build
  (fp8tests.compiled_packages: `from sgl_kernel import silu_and_mul` in sglang's
  cutlass_w4a8_moe.py, the run's own packages excepted): that module never imports there;
- it lies in the CUDA method (`forward_cuda`, `forward_hip`, ...) of a platform-dispatched op that
  also has `forward_npu` / `forward_oot` / `forward_native` (dispatchops.py: vLLM's `CustomOp`,
  SGLang's `MultiPlatformOp`; round-14 audit AL#23);
- it lies in another undecorated module-level function, or a private method (`_get_k_bf16`,
  referenced as `self._get_k_bf16`: every `.name` of the run counts), whose every reference is so
  (a chain of helpers, a few steps at most).

The same review applies to a Triton kernel's NPU910 error (`@triton.jit` over a module-level
`def _kernel`): a kernel whose every reference (`_kernel[grid](...)`) is such code is never
launched on an NPU host. So does a CUDA device-property field (NPU931) read in such a helper
(round-14 audit AL#33: sglang's `_get_launch_config_1d/2d`, reached only from the CUTLASS W4A8 MoE
path).

Mentions that call nothing (a `monkeypatch.setattr(mod, "helper", fake)` string, a bare name a
file binds only to another object) are not references, and a reference in a test that stubs the
package in `sys.modules` reaches no CUDA-only code (capcallers.py; round-15 audit AP#2). A helper
decorated only by `functools.cache`/`lru_cache` is read as undecorated (AO#2); one imported under
another name (`import helper as tune`) keeps its finding, its calls by that name being unread.

Then the finding becomes info with the reason (CALLERS_ONLY, a moot.PHRASES entry: a named skipped
scope that names the callers). One reference anywhere else (plain code, a module-level statement,
a string naming the helper: a dynamic lookup, an export) keeps the finding, as does a helper nobody
references (npugates.review_unused_helpers decides those). Whole-run and text first: a file is
parsed only when its bytes name the helper (byte pre-test). Called once, from
runplan.whole_run_passes, before moot.to_scopes.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import posixpath
import re

from . import astcache

# (moot.PHRASES holds it: the finding becomes a named skipped scope)
CALLERS_ONLY = "called only from code an NPU host does not run"

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# (a class that builds a CUDA extension: `_CudaExtension`, `CUDAOpBuilder`; not a CUDA graph builder)
_CUDA_CLASS = re.compile(r"cuda\w*(?:extension|opbuilder)|(?:extension|opbuilder)\w*cuda", re.IGNORECASE)
_IMPORTED = re.compile(r"import (?:of|from) `([\w.]+)`")
_MAX_DEPTH = 4
_MEMOIZING = frozenset({"cache", "lru_cache"})  # (functools: the helper keeps its name and its callers)
_SCANS = 24  # (names looked up by a byte scan of every Python file before the identifier index)
_TOKEN = re.compile(rb"[A-Za-z_]\w*")
# (a Triton kernel's NPU910 finding: reached only from CUDA-only code, an NPU host never launches it)
_KERNEL = re.compile(r"`@triton\.(?:jit|autotune|heuristics)\b")


# (a lazy CUDA-only import; a CUDA device-property field read in a launch-config helper: both read in
# the body of an undecorated helper)
_BODY_CODES = frozenset({"NPU911", "NPU931"})


def _open(finding) -> bool:
    from .moot import is_moot

    return ((finding.code in _BODY_CODES or finding.code == "NPU910" and _KERNEL.search(finding.message) is not None)
            and not finding.fixable and finding.cell is None and finding.severity != "info" and not is_moot(finding))


def _holder(tree: ast.Module, finding, line: int):
    """The module-level function the finding's place `line` is in: the body of an undecorated one
    for a lazy import (NPU911); the decorators of a Triton kernel (NPU910: `@triton.jit` above
    `def _kernel`), or None."""
    for stmt in tree.body:
        if not isinstance(stmt, _FUNCTIONS):
            continue
        if finding.code in _BODY_CODES:
            if stmt.lineno < line <= (stmt.end_lineno or stmt.lineno):
                return None if not memoized_only(stmt) else stmt
        elif stmt.decorator_list and stmt.decorator_list[0].lineno <= line < stmt.lineno:
            return stmt
    return None


def memoized_only(function: ast.AST) -> bool:
    """Whether a function is undecorated, or decorated only by a memoizing cache
    (`@functools.cache`, `@lru_cache(maxsize=None)`): it is still called by its name, where its
    callers are, and runs its body on the first call."""
    return all((astcache.dotted(d.func if isinstance(d, ast.Call) else d) or "").rpartition(".")[2]
               in _MEMOIZING for d in function.decorator_list)


def _package(finding) -> str | None:
    """The CUDA-only package the finding's import names (`flashinfer`), or None for one inside
    torch (`torch.utils.cpp_extension`: `import torch` proves nothing)."""
    found = _IMPORTED.search(finding.message)
    if found is None:
        return None
    top = found.group(1).split(".", 1)[0]
    return None if top == "torch" else top


def _chain(tree: ast.Module, line: int) -> list:
    """The classes and functions holding `line`, outermost first."""
    out, body = [], tree.body
    while True:
        node = next((n for n in body if isinstance(n, (*_FUNCTIONS, ast.ClassDef))
                     and n.lineno <= line <= (n.end_lineno or n.lineno)), None)
        if node is None:
            found = None
            for stmt in body:  # (a def nested in an `if`/`try`/`with` block)
                if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno) and not isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
                    inner = [n for n in ast.walk(stmt) if isinstance(n, (*_FUNCTIONS, ast.ClassDef))
                             and n.lineno <= line <= (n.end_lineno or n.lineno)]
                    if inner:
                        found = min(inner, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
            if found is None:
                return out
            node = found
        out.append(node)
        body = node.body


def _imports_package(stmt: ast.stmt, package: str) -> bool:
    if isinstance(stmt, ast.Import):
        return any(a.name.split(".", 1)[0] == package for a in stmt.names)
    return isinstance(stmt, ast.ImportFrom) and not stmt.level and (stmt.module or "").split(".", 1)[0] == package


def _bound_names(stmt: ast.stmt) -> set:
    if isinstance(stmt, ast.Import):
        return {(a.asname or a.name.split(".", 1)[0]) for a in stmt.names}
    return {(a.asname or a.name) for a in stmt.names}


class _File:
    """One caller file: its tree, its untaken blocks (on first ask) and its package names."""

    def __init__(self, relpath: str, data: bytes, tree: ast.Module) -> None:
        self.relpath, self.data, self.tree = relpath, data, tree
        self.blocks: dict[int, list] = {}
        self.bound: dict[str, set | None] = {}

    def nodes_on(self, pattern: re.Pattern) -> list:
        """The nodes of the statements that hold a line matching `pattern` (the innermost such
        statement of each line, walked whole): the rest of the file cannot name the word."""
        out, seen = [], set()
        for number, text in enumerate(self.data.split(b"\n"), 1):
            if not pattern.search(text):
                continue
            stmt, body = None, self.tree.body
            while True:
                inner = next((st for st in body if st.lineno <= number <= (st.end_lineno or st.lineno)), None)
                if inner is None:
                    break
                stmt = inner
                body = [*getattr(inner, "body", ()), *getattr(inner, "orelse", ()), *getattr(inner, "finalbody", ()),
                        *(x for h in getattr(inner, "handlers", ()) for x in h.body),
                        *(x for c in getattr(inner, "cases", ()) for x in c.body)]
                body = [st for st in body if isinstance(st, ast.stmt)]
            if stmt is None or id(stmt) in seen:
                continue
            seen.add(id(stmt))
            # (the lines of a compound statement's body are walked as their own statements; a
            # string spanning lines is kept whole)
            out.extend(n for n in ast.walk(stmt) if getattr(n, "lineno", number) == number
                       or isinstance(n, (ast.alias, ast.Constant)))
        return out

    def untaken(self, line: int, lines: tuple = ()):
        """The block an NPU host never runs that holds `line` (testscopes.untaken_branches, its
        file's own flags and functions read around that line and `lines` only: one reading for
        the lines asked together), or None."""
        if line not in self.blocks:
            from .testscopes import untaken_branches

            text = self.data.decode("utf-8", "replace")
            asked = {line, *lines} - set(self.blocks)
            blocks = untaken_branches(text, self.relpath, asked)
            self.blocks.update((n, blocks) for n in asked)
        return next((b for b in self.blocks[line] if b[0] <= line <= b[1]), None)

    def import_fails(self, tops: frozenset, dotted: tuple, own: frozenset) -> str | None:
        """The first import, unguarded in the module's body, of a compiled package with no NPU build
        (fp8tests.compiled_packages; not the run's own packages): importing the file fails on an
        NPU host, so none of its functions runs there. None when there is none."""
        if not hasattr(self, "_fails"):
            self._fails = None
            for stmt in self.tree.body:
                if isinstance(stmt, ast.Import):
                    names = [a.name for a in stmt.names]
                elif isinstance(stmt, ast.ImportFrom) and not stmt.level and stmt.module:
                    names = [stmt.module]
                else:
                    continue
                for name in names:
                    top = name.split(".", 1)[0]
                    if top not in own and (top in tops or any(name == d or name.startswith(d + ".") for d in dotted)):
                        self._fails = f"`{name}` imported unguarded at {self.relpath}:{stmt.lineno}"
                        self.fails_line = stmt.lineno
                        break
                if self._fails:
                    break
        return self._fails

    def package_names(self, package: str) -> set:
        """The names the file binds only by module-level imports of `package` that an NPU host
        fails (unguarded) or never runs (under a condition false there); empty when one such import
        is guarded otherwise (a `try`) or the name is bound another way too."""
        if package in self.bound:
            return self.bound[package]
        names: set = set()
        other: set = set()
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                (names if _imports_package(stmt, package) else other).update(_bound_names(stmt))
            elif isinstance(stmt, ast.If):
                from .testscopes import false_on_npu

                false = None  # (whether the test is false on an NPU host: asked once, where it matters)
                for s in ast.walk(stmt):
                    if not isinstance(s, (ast.Import, ast.ImportFrom)):
                        continue
                    if _imports_package(s, package) and any(s is b for b in stmt.body):
                        if false is None:
                            false = false_on_npu(ast.unparse(stmt.test))
                        (names if false else other).update(_bound_names(s))
                    else:
                        other.update(_bound_names(s))
                other.update(t.id for s in ast.walk(stmt) if isinstance(s, ast.Assign)
                             for t in s.targets if isinstance(t, ast.Name))
            elif isinstance(stmt, ast.Try):
                for s in ast.walk(stmt):
                    if isinstance(s, (ast.Import, ast.ImportFrom)):
                        other.update(_bound_names(s))
                    elif isinstance(s, ast.Assign):
                        other.update(t.id for t in s.targets if isinstance(t, ast.Name))
            elif isinstance(stmt, ast.Assign):
                other.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        self.bound[package] = names - other
        return self.bound[package]


_SKIPPED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.IfExp, ast.BoolOp,
            ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_SIMPLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return)


def _reads(node: ast.AST, names: set) -> bool:
    """Whether evaluating `node` always reads one of `names` (not only in a branch of a
    conditional expression, a short circuit, a comprehension or a nested definition)."""
    if isinstance(node, ast.Name):
        return node.id in names and isinstance(node.ctx, ast.Load)
    return not isinstance(node, _SKIPPED) and any(_reads(child, names) for child in ast.iter_child_nodes(node))


_EXITS = (ast.Return, ast.Yield, ast.YieldFrom)
_USED, _OPEN, _ESCAPE = "used", "open", "escape"


def _block(stmts: list, names: set) -> str:
    """_USED where every path through `stmts` reads one of `names` before it leaves them, _ESCAPE
    where one may return or yield first, else _OPEN (it may fall through without a read)."""
    for stmt in stmts:
        if isinstance(stmt, _SIMPLE) and _reads(stmt, names):
            return _USED
        if isinstance(stmt, ast.If):
            branches = (_block(stmt.body, names), _block(stmt.orelse, names))
            if branches == (_USED, _USED):
                return _USED
            if _ESCAPE in branches:
                return _ESCAPE
            continue
        if any(isinstance(n, _EXITS) for n in ast.walk(stmt)):
            return _ESCAPE  # (a return or yield not read as above: a loop's, a `try`'s, a bare one)
    return _OPEN


def _always_uses(function: ast.AST, names: set, line: int) -> bool:
    """Whether every run of `function` that reaches `line` reads one of `names` (a name an NPU
    host leaves unbound: such a run fails there): every path before the statement holding `line`
    reads one, or every path after it does and that statement does not return past `line`."""
    body = function.body
    at = next((k for k, stmt in enumerate(body) if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno)), None)
    if at is None:
        return False
    if _block(body[:at], names) == _USED:
        return True
    if any(isinstance(n, _EXITS) and n.lineno > line for n in ast.walk(body[at])):
        return False
    return _block(body[at + 1:], names) == _USED


class CallerFinder:
    """Whether every reference of a helper in a run lies in code an NPU host does not run (the
    reasons of the module docstring), for this module's review and othersources' JIT loaders:
    `callers(name, package, frozenset(), 0)` gives "file:line (why)" per reference, or None."""

    def __init__(self, results: list, paths: dict) -> None:
        from .modpaths import RunTexts

        text_of = RunTexts(results, paths)
        self.text_of = text_of
        python = [j for j, r in enumerate(results) if r.relpath.endswith(".py")]
        from .fp8tests import compiled_packages
        from .modpaths import module_names

        compiled = functools.lru_cache(maxsize=None)(compiled_packages)
        # (the project's own packages are read, not judged by their name: xformers in xformers' tree)
        own = frozenset(name.split(".")[0] for j in python for name in module_names(results[j].relpath) if "." in name)
        # (the places of the run's report-only findings that are no info: a module whose failing
        # import is one of them fails visibly; one whose failing import nothing reports does not
        # make its helpers' findings moot, since that would leave the module without a finding)
        reported = frozenset((r.relpath, line) for r in results for f in r.findings
                             if not f.fixable and f.severity != "info" for line in (f.line, *(a[0] for a in f.also)))
        index: dict[bytes, list[int]] = {}
        asked = [0]

        def naming(word: bytes) -> list[int]:
            """The Python files whose bytes may name `word`: all of them for the first few asks
            (each then a byte test), then an index of every file's identifiers, built once (a
            large tree with many candidates, vLLM's Triton kernels, pays one tokenizing pass, not
            one byte scan of the whole tree per name)."""
            asked[0] += 1
            if asked[0] <= _SCANS or not word.isascii():
                return python
            if not index:
                for j in python:
                    for token in set(_TOKEN.findall(text_of(j) or b"")):
                        index.setdefault(token, []).append(j)
                index[b""] = []  # (built, even for an empty run)
            return index.get(word, [])
        files: dict[int, _File | None] = {}

        def file(j: int) -> _File | None:
            if j not in files:
                data = text_of(j) or b""
                tree = astcache.parse(data)
                files[j] = _File(results[j].relpath, data, tree) if tree is not None else None
            return files[j]

        from .namesakes30 import Namesakes, registration_keys

        namesakes = Namesakes(results, lambda j: getattr(file(j), "tree", None))
        lookups: dict[str, str | None] = {}

        def looked_up(home: str | None) -> str | None:
            """What may look a function of the module `home` (a relpath) up by a string: a lookup
            in a file naming that module (capcallers.looks_up); "unknown" for no module or a
            package's `__init__` (an export), None when no file of the run may."""
            if home is None or not home.endswith(".py") or posixpath.basename(home) == "__init__.py":
                return "unknown"
            if home not in lookups:
                from .capcallers import looks_up

                stem = posixpath.basename(home)[:-3]
                word, found = stem.encode(), None
                for j in naming(word):
                    data = text_of(j)
                    if not data or word not in data:
                        continue
                    source = file(j)
                    found = "unparsed" if source is None else looks_up(source.tree, stem)
                    if found is not None:
                        found = f"{found} in {results[j].relpath}"
                        break
                lookups[home] = found
            return lookups[home]

        def callers(name: str, package: str | None, seen: frozenset, depth: int,
                    home: str | None = None) -> list | None:
            """Where each reference of `name` lies ("file:line (why)"), all in code an NPU host does
            not run; None when one is elsewhere, or there is none. The cheap reasons are asked of
            every reference first; a file's untaken blocks and the helper chain only of the rest."""
            if name in seen or depth > _MAX_DEPTH:
                return None
            seen = seen | {name}
            word = name.encode()
            pattern = re.compile(rb"\b" + re.escape(word) + rb"\b")
            found: list = []  # (file, line, chain, why or None)
            for j in naming(word):
                data = text_of(j)
                if not data or word not in data or not pattern.search(data):  # (byte pre-test before a parse)
                    continue
                source = file(j)
                if source is None:
                    return None
                from .capcallers import attribute_writes, rebinds_other

                nodes = source.nodes_on(pattern)
                # (a file that binds the name to another object only, `import autotune as
                # flashinfer_autotune`: its bare uses of the name are that object's; capcallers.py)
                other = rebinds_other(source.tree, name, nodes)
                # (a file binding the name only to another module's namesake: namesakes30.py)
                other = other or namesakes.namesake_file(j, name, home)
                writes = passed = keys = None
                for node in nodes:
                    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value == name:
                        if writes is None:  # (`monkeypatch.setattr(mod, "name", fake)` writes, looks nothing up)
                            from .capcallers import passed_strings

                            writes, passed = attribute_writes(source.tree, name), passed_strings(source.tree, name)
                            keys = registration_keys(source.tree, name)  # (another object's registry key)
                        if id(node) not in writes and id(node) not in keys and (id(node) in passed or source.relpath == home
                                                       or looked_up(home) is not None):
                            # (named in a string: a lookup by name, an export; harmless only where no
                            # file naming the helper's module, `home`, can look a name up in it)
                            return None
                        continue
                    if isinstance(node, ast.alias) and node.name.rsplit(".", 1)[-1] == name \
                            and node.asname not in (None, name):
                        return None  # (imported under another name: its uses are not seen by this one)
                    if other and isinstance(node, ast.Name):
                        continue
                    if not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
                            or isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.ctx, ast.Load)):
                        continue
                    chain = _chain(source.tree, node.lineno)
                    functions = [n for n in chain if isinstance(n, _FUNCTIONS)]
                    if not functions or (functions[-1].name == name and len(chain) == 1) \
                            or node.lineno < functions[-1].body[0].lineno:
                        # (a module- or class-level statement, or a default value in a signature, runs
                        # on import; a recursive helper's own calls)
                        return None
                    found.append((source, node.lineno, chain, _cheap(source, node.lineno, chain, package)))
            pending: dict[int, list] = {}  # (id of a file: its lines without a cheap reason)
            for source, line, _chain_, why in found:
                if why is None:
                    pending.setdefault(id(source), []).append(line)
            out = []
            for source, line, chain, why in found:
                why = why or _costly(source, line, chain, package, seen, depth, tuple(pending.get(id(source), ())))
                if why is None:
                    return None
                out.append(f"{source.relpath}:{line} ({why})")
            return out or None

        def _cheap(source: _File, line: int, chain: list, package: str | None):
            """The reasons read off the tree alone: the caller's own import of the package first, a
            CUDA extension class, a function of that package's code."""
            inner = [n for n in chain if isinstance(n, _FUNCTIONS)][-1]
            if package is not None:
                for stmt in inner.body:
                    if stmt.lineno >= line:
                        break
                    if _imports_package(stmt, package):
                        return f"after `{ast.get_source_segment(source.data.decode('utf-8', 'replace'), stmt) or package}`"
            for cls in (n for n in chain if isinstance(n, ast.ClassDef)):
                bases = [astcache.dotted(b) or "" for b in cls.bases]
                if _CUDA_CLASS.search(cls.name) or any(_CUDA_CLASS.search(b) for b in bases):
                    return f"in the CUDA extension class `{cls.name}`"
            from .capcallers import stub_reason

            key = ("stub", package)  # (one reading per file and package)
            if key not in source.bound:
                source.bound[key] = stub_reason(source.relpath, source.data, source.tree, package)
            stubbed = source.bound[key]
            if stubbed is not None:
                return stubbed
            from .dispatchops import cuda_dispatch_reason

            dispatched = cuda_dispatch_reason(source.tree, chain)
            if dispatched is not None:
                return dispatched
            fails = source.import_fails(*compiled(), own)
            if fails is not None and (source.relpath, source.fails_line) in reported:
                return f"in a module whose import fails on an NPU host: {fails}, a compiled package with no NPU build"
            if package is not None:
                names = source.package_names(package)
                if names and _always_uses(inner, names, line):
                    return f"in `{inner.name}`, every run of which past this call reads `{package}` names that its file imports only where an NPU host fails or does not go"
            return None

        def _costly(source: _File, line: int, chain: list, package: str | None, seen: frozenset, depth: int,
                    lines: tuple = ()):
            """The reasons that read more: a block an NPU host never runs, a helper only such code calls."""
            block = source.untaken(line, lines)
            if block is not None:
                shown = " ".join(block[2].split())
                return f"under {shown if len(shown) <= 160 else shown[:157] + '...'}"
            inner = chain[-1]
            # (a helper: a module-level function, or a method referenced only as an attribute; every
            # `.name` of the run counts as its reference)
            helper = len(chain) == 1 or (len(chain) == 2 and isinstance(chain[0], ast.ClassDef)
                                         and inner.name.startswith("_") and not inner.name.endswith("__"))
            if helper and isinstance(inner, _FUNCTIONS) and memoized_only(inner):
                deeper = callers(inner.name, package, seen, depth + 1, source.relpath)
                if deeper:
                    return f"in `{inner.name}`, reached only from " + "; ".join(deeper[:2]) + (
                        f"; and {len(deeper) - 2} more" if len(deeper) > 2 else "")
            return None

        self.file, self.callers = file, callers


def review(results: list, paths: dict) -> list:
    """The review of the module docstring over a run's results (a new list)."""
    candidates = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(_open(f) for f in r.findings)]
    if not candidates:
        return results
    finder = CallerFinder(results, paths)
    text_of, file, callers = finder.text_of, finder.file, finder.callers

    others = [j for j, r in enumerate(results) if not r.relpath.endswith(".py")]

    def named_outside_python(name: str) -> bool:
        """A configuration, notebook or script of the run names the helper (`_target_:
        pkg.utils.helper`): a caller the parse above does not see."""
        from .configkeys26 import names_helper  # (not a setting's key: `name: true`)

        return any(names_helper(text_of(j) or b"", name) for j in others)

    out = list(results)
    for i in candidates:
        result = results[i]
        data = text_of(i) or b""
        lines = data.split(b"\n")
        wanted = [f for f in result.findings if _open(f) and 0 < f.line <= len(lines)
                  and (lines[f.line - 1][:1] in (b" ", b"\t")) == (f.code in _BODY_CODES)]
        if not wanted or b"def " not in data:  # (cheap before the parse: a lazy import in a module-level function)
            continue
        source = file(i)
        if source is None:
            continue
        changed, findings = False, []
        for finding in result.findings:
            if finding in wanted:
                # (a merged finding: every place in such a helper, each of them referenced only so)
                places = [finding.line, *(p[0] for p in finding.also)]
                functions = [_holder(source.tree, finding, n) for n in places]
                reasons = []
                if all(f is not None for f in functions):
                    for function in dict.fromkeys(functions):
                        ends = callers(function.name, _package(finding), frozenset(), 0, result.relpath)
                        if not ends or named_outside_python(function.name):
                            reasons = []
                            break
                        shown = "; ".join(ends[:3]) + (f"; and {len(ends) - 3} more" if len(ends) > 3 else "")
                        reasons.append(f"`{function.name}` is referenced only at {shown}")
                if reasons:
                    finding = dataclasses.replace(
                        finding, severity="info", message=f"{finding.message} ({CALLERS_ONLY}: {'; '.join(reasons)})")
                    changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(result, findings=findings)
    return out
