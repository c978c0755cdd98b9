"""Function-local importers that load a CUDA-only helper only after their own imports of the same
package (issue #16, round-23 audit BM#10). firstfail22.py folds a helper module's NPU911 error into
the finding of an importer that fails first on the same package; it read only the importer's
top-level imports, so a helper loaded lazily by functions that import the package themselves kept
an error of its own, though porting it is the same work:

    # comm/compat.py (the helper)
    from cudalib.comm import Backend          # NPU911, folded into manager.py's finding
    class Communicator(Backend): ...

    # comm/manager.py (its only importer)
    class Manager:
        def __init__(self):
            self.initialized = False
        def initialize(self):
            from cudalib.comm import Mapping     # NPU911 (this finding names the helper)
            from comm.compat import Communicator
            ...
            self.initialized = True
        def restore(self):
            if self.initialized:
                from comm.compat import Communicator

A function-local import site of the helper is covered (`local_cover`) when

* the same function imports every needed package earlier, in a statement of its own body (not
  under an `if`, a loop, a `try` or a `with`): those imports fail first where the package is
  missing; or
* the site lies in the body of `if self.X:` (or of an `if` whose test is `self.X and ...`; the
  innermost such `if`) in a method of a module-level class, and every `self.X = ...` of that class that can make
  it true (anything but `False`, `None`, `0`) sits in the body of a method that, in its own body and
  before that assignment, imports every needed package (so `X` is true only after those imports
  succeeded); no other file of the run that names the class assigns `.X`.

The covering lines returned are those imports: firstfail22 folds the helper into the importer's
finding on one of them. A site under any other test, a flag set elsewhere too, a flag another file
assigns: not covered, so the helper keeps its error. Called from firstfail22._site_covered.
"""

from __future__ import annotations

import ast
import re
from typing import Callable, Optional

from . import astcache

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def statement_packages(node: ast.AST, packages: tuple) -> set:
    """The packages (of `packages`) an absolute import statement names (also firstfail22.py's)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names = [node.module]
    else:
        return set()
    return {p for n in names for p in packages if n == p or n.startswith(p + ".")}


def _own_imports(function: ast.AST, before: int, packages: tuple) -> dict[int, set]:
    """{line: packages} of the CUDA-only imports in the function's own body before line `before`."""
    return {s.lineno: found for s in function.body if s.lineno < before
            for found in [statement_packages(s, packages)] if found}


def _covers(imports: dict[int, set], needed: set) -> Optional[list[int]]:
    got = set().union(*imports.values()) if imports else set()
    return sorted(imports) if imports and needed <= got else None


def _flag_of(test: ast.AST) -> Optional[str]:
    """`X` of a test `self.X` or `self.X and ...`."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        test = test.values[0]
    if isinstance(test, ast.Attribute) and isinstance(test.value, ast.Name) and test.value.id == "self":
        return test.attr
    return None


def _never_true(value: ast.AST) -> bool:
    return isinstance(value, ast.Constant) and value.value in (False, None, 0) and not isinstance(value.value, float)


def _flag_cover(cls: ast.ClassDef, flag: str, needed: set, packages: tuple) -> Optional[list[int]]:
    """The import lines that every assignment making `self.<flag>` true in the class comes after."""
    lines: set = set()
    setters = 0
    for method in cls.body:
        if not isinstance(method, _FUNCTIONS):
            continue
        for node in ast.walk(method):
            targets = []
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets, value = [node.target], node.value
            for target in targets:
                for t in ast.walk(target):
                    if not (isinstance(t, ast.Attribute) and t.attr == flag):
                        continue
                    if not (isinstance(t.value, ast.Name) and t.value.id == "self"):
                        return None  # (another object's flag: not decided)
                    if isinstance(node, ast.Assign) and _never_true(value):
                        continue
                    covered = _covers(_own_imports(method, node.lineno, packages), needed)
                    if covered is None:
                        return None
                    setters += 1
                    lines.update(covered)
    return sorted(lines) if setters else None


def local_cover(tree: ast.Module, statement: ast.AST, needed: set, packages: tuple,
                others: Optional[Callable[[], list]] = None) -> Optional[list[int]]:
    """The importer's own import lines that cover the function-local import `statement` of the
    helper (module's doc), or None; `others()` gives the texts of the run's other Python files."""
    parent = astcache.parents(tree)
    child, up = statement, parent.get(id(statement))
    flag = None
    while up is not None and not isinstance(up, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)):
        if isinstance(up, ast.If) and flag is None and child in up.body:
            flag = _flag_of(up.test)
        child, up = up, parent.get(id(up))
    if not isinstance(up, _FUNCTIONS):
        return None
    function = up
    own = _covers(_own_imports(function, statement.lineno, packages), needed)
    if own is not None:
        return own
    if not flag:
        return None
    cls = parent.get(id(function))
    if not (isinstance(cls, ast.ClassDef) and isinstance(parent.get(id(cls)), ast.Module)):
        return None
    word = re.compile(rb"\b" + re.escape(cls.name.encode()) + rb"\b")
    assigns = re.compile(rb"\." + re.escape(flag.encode()) + rb"\s*=[^=]")
    if any(word.search(data) and assigns.search(data) for data in (others() if others else ())):
        return None
    return _flag_cover(cls, flag, needed, packages)
