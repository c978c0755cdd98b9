"""Names in tests, diagnostics, CI and standalone scripts that are data, not work for a porter (issue
#16, precision wave 27: round-26 audits BV#9, BV#22, BV#23, BV#29, BU#8, BU#24, BU#40). `review` runs
per file from run.py (after testgates26.py, on the merged findings: each merged finding is split
into its places and only the places decided here are lowered); `review_ci_scripts` per shell
script (its docstring: BV#23); `fold_pinning_tests` over the whole run from runplan.py (its
docstring: BU#24, a test's NCCL note folded into the library note naming the same variable).

- **A torch.cuda module reached through another module's `torch`, only patched** (BV#29,
  `_patch_targets`): `monkeypatch.setattr(alloc_conf.torch.cuda, "memory", Stub)` (NPU990 on
  `alloc_conf.torch.cuda`) is labels9.PATCH_TARGET's `monkeypatch.setattr(torch.cuda.memory, ...)`
  written through the module under test's own `torch` name: the same module object, a patch
  target every torch build has (moot.AS_WRITTEN). A call through that chain
  (`alloc_conf.torch.cuda.synchronize()`) keeps the finding.
- **A branch only Windows or macOS takes** (BV#22, `_os_branch`): the report-only places in the
  body of `if X == "win32":` (also `"darwin"`, `"cygwin"`, `"Windows"`, `"Darwin"`, `"nt"`, and
  `X.startswith("win")`), X being `sys.platform`, `os.name`, `platform.system()` or a call of a
  function whose name says platform or system (an environment report's `get_platform()`): Ascend
  hosts run Linux, so an NPU host never takes it (moot "in a branch an NPU host does not take").
  The `else` of such an `if`, a comparison with "linux", or with a value that is not an OS name
  (`get_platform() == "cuda"`) keeps the finding.
- **A standalone `uv run` script without torch** (BV#9, `_standalone_script`): a file with an inline
  script block (PEP 723 `# /// script` ... `# ///`) whose dependencies name no torch package, and
  every import of which is the standard library or one of those dependencies: `uv run` gives it an
  environment of exactly these packages, so the project and torch are out of its reach and a
  string such as "nccl" is a value it writes (a serialization fixture), never a backend (NPU990
  strings: resolved.LABEL, a named scope). A script that declares torch, imports anything else (the
  project), or has no such block keeps its findings.
- **An NCCL variable a test sets as a sentinel and asserts** (BU#8, `_sentinels`): in a test
  function (a tests/ or test_*.py file), `NCCL_X` as a key of a dict literal (the function's own,
  or `patch.dict(os.environ, {...})` in its decorators) where the function's asserts name the same
  string, the dict's name, or a loop over it: the test checks that environment variables propagate
  and the NCCL name is its data (labels9's "an NCCL name listed as a label, not a setting: "). The
  asserted string itself is lowered the same way. A test that only sets the variable (no assert on
  it) keeps the note.
- **An FP8 dtype as a field of a spec in a test that makes no tensor** (BU#40, `_spec_fields`):
  `Spec(..., dtype=torch.float8_e4m3fn)` (a class whose name ends in Spec, Config, Metadata, Options,
  Params or Args), in a test function none of whose calls makes or moves a tensor (no
  `torch.empty/zeros/ones/full/rand*/tensor/arange/...`, no `.to()`, `.cuda()`, `.view()`): the
  dtype is metadata the selection code reads, no FP8 arithmetic (fp8data.NOT_COMPUTE's "not FP8
  compute: "). The same field in a test that allocates anything keeps the finding.
"""

from __future__ import annotations

import ast
import re
import sys
from typing import Optional

from . import astcache
from .findings import Finding

DEAD_BRANCH = "in a branch an NPU host does not take"  # (moot.PHRASES)
LABEL = "a label the code resolves, not a device: "  # (moot.NO_WORK; resolved.LABEL)
NCCL_LABEL = "an NCCL name listed as a label, not a setting: "  # (moot.NO_WORK; labels9)
NOT_COMPUTE = "not FP8 compute: "  # (moot.NO_WORK; fp8data.NOT_COMPUTE)

_OS_NAMES = frozenset({"win32", "darwin", "cygwin", "windows", "nt", "msys"})
_OS_PREFIXES = ("win", "darwin", "cygwin")
_PLATFORM_CALL = re.compile(r"(?i)(platform|system)")
_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$|conftest\.py$)")
_SPEC = re.compile(r"^[A-Z]\w*(Spec|Config|Metadata|Options|Params|Args)$")
_FACTORIES = frozenset({"empty", "zeros", "ones", "full", "rand", "randn", "randint", "randperm", "tensor",
                        "as_tensor", "from_numpy", "arange", "linspace", "empty_like", "zeros_like",
                        "ones_like", "full_like", "rand_like", "randn_like", "empty_strided"})
_MOVES = frozenset({"to", "cuda", "view", "npu", "copy_", "type"})
_MODULE_TORCH = re.compile(r"^\w+(\.\w+)*\.torch\.cuda(\.\w+)?$")
_SCRIPT_BLOCK = re.compile(r"^# /// script\s*$(.*?)^# ///\s*$", re.M | re.S)
_DEP_NAME = re.compile(r"[\"']\s*([A-Za-z0-9_.\-]+)")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _open(finding: Finding) -> bool:
    """A report-only finding not yet a named scope (an info note included: NPU602 is one)."""
    from .moot import is_moot

    return not finding.fixable and finding.cell is None and not is_moot(finding)


def _shown(node: ast.AST) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= 70 else text[:67] + "..."


def _nodes_at(tree: ast.Module) -> dict:
    """{(line, column 1-based): [nodes starting there]}."""
    at: dict = {}
    for node in astcache.walk(tree):
        if hasattr(node, "lineno") and hasattr(node, "col_offset"):
            at.setdefault((node.lineno, node.col_offset + 1), []).append(node)
    return at


# ----------------------------------------------------------------------------- BV#29: patch targets
def _patch_target(finding: Finding, node: ast.AST, parents: dict) -> Optional[str]:
    from .labels9 import PATCH_TARGET, patch_target as _patch_target

    if finding.code not in ("NPU990", "NPU202") or not _MODULE_TORCH.match(finding.source.strip()):
        return None
    if isinstance(node, ast.Attribute) and _patch_target(node, parents):
        return f"{PATCH_TARGET}, named through another module's `torch` (`{_shown(node)}`)"
    return None


# ----------------------------------------------------------------------------- BV#22: OS branches
def _os_test(test: ast.AST) -> bool:
    def subject(node: ast.AST) -> bool:
        words = astcache.dotted(node.func if isinstance(node, ast.Call) else node) or ""
        if words in ("sys.platform", "os.name", "platform.system", "platform.platform"):
            return True
        return isinstance(node, ast.Call) and bool(_PLATFORM_CALL.search(words.rpartition(".")[2]))

    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.In)):
        left, right = test.left, test.comparators[0]
        values = [right] if isinstance(test.ops[0], ast.Eq) else list(getattr(right, "elts", []) or [None])
        if not values or not all(isinstance(v, ast.Constant) and isinstance(v.value, str)
                                 and v.value.lower() in _OS_NAMES for v in values):
            return False
        return subject(left)
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr == "startswith" \
            and len(test.args) == 1 and isinstance(test.args[0], ast.Constant) \
            and isinstance(test.args[0].value, str) and test.args[0].value.lower().startswith(_OS_PREFIXES):
        return subject(test.func.value)
    return False


def _os_branch(node: ast.AST, parents: dict) -> Optional[str]:
    child, current = node, parents.get(id(node))
    while current is not None and not isinstance(current, ast.Module):
        if isinstance(current, ast.If) and any(child is s for s in current.body) and _os_test(current.test):
            return (f"{DEAD_BRANCH}: `{_shown(current.test)}` (line {current.lineno}) holds only on another "
                    "operating system; Ascend hosts run Linux")
        child, current = current, parents.get(id(current))
    return None


# ----------------------------------------------------------------------------- CA#10: parsed identifiers
_AST_FIELDS = frozenset({"id", "attr", "arg"})


def _identifier(node: ast.AST, parents: dict) -> Optional[str]:
    """`isinstance(target, ast.Name) and target.id == "cuda"` (round-28 audit CA#10): the string is
    compared with the identifier of a node of parsed Python source (`.id` of an `ast.Name`, `.attr`
    of an `ast.Attribute`, `.arg` of an `ast.arg`) that the same `and` tests with `isinstance(X,
    ast.<type>)`: a name looked up in someone's source (`cuda = ...` in torch/version.py), never a
    device. The same comparison without the `isinstance` test keeps the finding."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return None
    compare = parents.get(id(node))
    if not (isinstance(compare, ast.Compare) and len(compare.ops) == 1
            and isinstance(compare.ops[0], (ast.Eq, ast.NotEq)) and node in (compare.left, *compare.comparators)):
        return None
    other = compare.comparators[0] if node is compare.left else compare.left
    if not (isinstance(other, ast.Attribute) and other.attr in _AST_FIELDS and isinstance(other.value, ast.Name)):
        return None
    test = parents.get(id(compare))
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)):
        return None
    holder = other.value.id
    for part in test.values[:test.values.index(compare)]:
        if (isinstance(part, ast.Call) and isinstance(part.func, ast.Name) and part.func.id == "isinstance"
                and len(part.args) == 2 and isinstance(part.args[0], ast.Name) and part.args[0].id == holder
                and (astcache.dotted(part.args[1]) or "").startswith("ast.")):
            return (f"{LABEL}`{node.value}` is compared with `{holder}.{other.attr}` of an "
                    f"`{astcache.dotted(part.args[1])}` (line {compare.lineno}): an identifier of parsed "
                    "Python source, not a device")
    return None


# ----------------------------------------------------------------------------- BV#9: uv scripts
def _standalone_script(text: str, tree: ast.Module) -> Optional[str]:
    match = _SCRIPT_BLOCK.search(text)
    if match is None:
        return None
    block = match.group(1)
    at = block.find("dependencies")
    deps = [m.group(1).lower().replace("_", "-") for m in _DEP_NAME.finditer(block[at:])] if at >= 0 else []
    if any("torch" in d for d in deps):
        return None
    known = {d.replace("-", "_") for d in deps}
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    for node in astcache.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                return None
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top != "__future__" and top not in stdlib and top.lower() not in known:
                return None
    shown = ", ".join(deps) if deps else "none"
    return (f"{LABEL}a standalone `uv run` script (its inline dependencies: {shown}) that imports neither "
            "torch nor the project: the string is a value it writes, never a backend or a device")


# ----------------------------------------------------------------------------- BU#8: NCCL sentinels
def _function_of(node: ast.AST, parents: dict) -> Optional[ast.AST]:
    current = parents.get(id(node))
    while current is not None and not isinstance(current, _DEFS):
        current = parents.get(id(current))
    return current


def _sentinel(finding: Finding, node: ast.AST, parents: dict) -> Optional[str]:
    if finding.code != "NPU602" or not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return None
    name = node.value
    function = _function_of(node, parents)
    if function is None or not function.name.startswith("test"):
        return None
    dicts = [d for part in (*function.decorator_list, *function.body) for d in ast.walk(part)
             if isinstance(d, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == name for k in d.keys)]
    if not dicts:
        return None
    bound = set()
    for d in dicts:
        parent = parents.get(id(d))
        if isinstance(parent, ast.Assign) and parent.value is d:
            bound |= {t.id for t in parent.targets if isinstance(t, ast.Name)}
    for stmt in ast.walk(function):
        if not isinstance(stmt, ast.Assert):
            continue
        loops = []
        current = parents.get(id(stmt))
        while current is not None and current is not function:
            if isinstance(current, ast.For):
                loops.append(current.iter)
            current = parents.get(id(current))
        read = {n.id for part in (stmt, *loops) for n in ast.walk(part) if isinstance(n, ast.Name)}
        named = any(isinstance(n, ast.Constant) and n.value == name for n in ast.walk(stmt))
        if named or read & bound:
            where = "the dict's entries" if not named else f'"{name}"'
            return (f"{NCCL_LABEL}a sentinel environment variable the test `{function.name}` sets and asserts "
                    f"on ({where} at line {stmt.lineno}): it checks that variables propagate; nothing tunes NCCL")
    return None


# ----------------------------------------------------------------------------- BU#40: spec fields
def _makes_tensors(function: ast.AST) -> bool:
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        words = astcache.dotted(node.func) or ""
        last = words.rpartition(".")[2] if words else (node.func.attr if isinstance(node.func, ast.Attribute) else "")
        if words.startswith("torch.") and last in _FACTORIES:
            return True
        if isinstance(node.func, ast.Attribute) and node.func.attr in _MOVES:
            return True
    return False


def _spec_field(finding: Finding, node: ast.AST, parents: dict) -> Optional[str]:
    if finding.code != "NPU913" or not isinstance(node, ast.Attribute):
        return None
    keyword = parents.get(id(node))
    call = parents.get(id(keyword)) if isinstance(keyword, ast.keyword) else None
    if not isinstance(call, ast.Call):
        return None
    name = (astcache.dotted(call.func) or "").rpartition(".")[2]
    if not _SPEC.match(name):
        return None
    function = _function_of(call, parents)
    if function is None or not function.name.startswith("test") or _makes_tensors(function):
        return None
    return (f"{NOT_COMPUTE}the FP8 dtype is the `{keyword.arg}` field of a `{name}(...)` in the test "
            f"`{function.name}`, which makes no tensor: metadata the code under test reads")


def review(findings: list[Finding], text: str, relpath: str) -> list[Finding]:
    """The findings, with the places of this module's docstring lowered to named scopes."""
    from .flagcalls19 import lower

    wanted = [f for f in findings if _open(f) and f.code in ("NPU990", "NPU202", "NPU602", "NPU913")]
    if not wanted or not relpath.endswith(".py"):
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    if tree is None:
        return findings
    parents = astcache.parents(tree)
    at = _nodes_at(tree)
    test_file = bool(_TEST_FILE.search(relpath))
    script = _standalone_script(text, tree) if "# /// script" in text else None

    def reason_for(finding: Finding):
        def reason_of(line: int) -> Optional[str]:
            columns = [finding.column] if line == finding.line else \
                [c for ln, c, _s in finding.also if ln == line]
            for column in columns:
                for node in at.get((line, column), ()):
                    why = _patch_target(finding, node, parents) \
                        or (script if finding.code == "NPU990" and isinstance(node, ast.Constant)
                            and isinstance(node.value, str) else None) \
                        or (_sentinel(finding, node, parents) if test_file else None) \
                        or (_spec_field(finding, node, parents) if test_file else None) \
                        or _os_branch(node, parents) \
                        or (_identifier(node, parents) if finding.code == "NPU990" else None)
                    if why:
                        return why
            return None
        return reason_of

    out, changed = [], False
    for finding in findings:
        pieces = lower(finding, reason_for(finding)) if finding in wanted else None
        changed = changed or pieces is not None
        out.extend([finding] if pieces is None else pieces)
    return sorted(out) if changed else findings


# ----------------------------------------------------------------------------- BU#24: pinning tests
def fold_pinning_tests(results: list, paths: dict) -> list:
    """Whole run (BU#24): a test file's NPU602 note on an NCCL variable that a library module's own
    NPU602 note (not a named scope) also names is the test pinning the library's setting (a
    `monkeypatch.setenv("NCCL_IB_DISABLE", ...)` around the library's `child_environment
    .setdefault("NCCL_IB_DISABLE", "1")`): the work, if any, is in the library module. The test's
    finding is folded into the library's, whose message names it; the library finding stays as it
    is otherwise. A test's NCCL variable no library finding names keeps its note."""
    import dataclasses

    from .importgates import is_test
    from .moot import is_moot

    def variable(f: Finding) -> str:
        return f.source.strip().strip("\"'") if f.code == "NPU602" and not f.fixable and f.cell is None \
            and not is_moot(f) else ""

    library: dict = {}
    for i, result in enumerate(results):
        if is_test(result.relpath):
            continue
        for k, f in enumerate(result.findings):
            if variable(f).startswith("NCCL_"):
                library.setdefault(variable(f), (i, k))
    if not library:
        return results
    out = list(results)
    notes: dict = {}
    for i, result in enumerate(results):
        if not is_test(result.relpath):
            continue
        folded = [f for f in result.findings if variable(f) in library]
        if not folded:
            continue
        for f in folded:
            lines = [f.line, *(ln for ln, _c, _s in f.also)]
            more = f" and {len(lines) - 1} more line{'s' if len(lines) > 2 else ''}" if len(lines) > 1 else ""
            notes.setdefault(library[variable(f)], []).append(f"{result.relpath}:{f.line}{more}")
        out[i] = dataclasses.replace(result, findings=[f for f in result.findings if not any(f is g for g in folded)])
    for (i, k), where in notes.items():
        findings = list(out[i].findings)
        note = f"also set or asserted by tests that pin this module's setting: {', '.join(where)}"
        findings[k] = dataclasses.replace(findings[k], message=f"{findings[k].message} ({note})")
        out[i] = dataclasses.replace(out[i], findings=findings)
    return out


# ----------------------------------------------------------------------------- BV#23: CI build scripts
_TOOLKIT_PATH = re.compile(r"/usr/local/cuda[\w.${}-]*")
# (a CI pipeline's YAML that builds CUDA wheels or images: the CUDA base or builder image it names,
# round-28 audit CA#6, CC#3)
_CUDA_VARIABLE = re.compile(r"""[\s"'${-]*(TORCH_)?CUDA_\w*""")  # (a pipeline's own CUDA arch or toolkit variable)
_CUDA_BUILD_IMAGE = re.compile(r"\bnvidia/cuda:[\w.${}-]+|[\w./-]*-builder:cuda[\w.${}-]*")


def review_ci_scripts(findings: list[Finding], source: bytes, relpath: str, kind: str) -> list[Finding]:
    """BV#23 (per file, shell scripts, after the per-script folds): an NPU703 note (a CUDA
    architecture or toolkit variable with no Ascend counterpart) in a shell script under a top-level
    tooling or CI folder (rules/scopes.toml [cudaonly21] tooling_folders: `.github/`, `.buildkite/`,
    `tools/`, ...) whose text points at the CUDA toolkit (`/usr/local/cuda...`) or runs one of its
    programs (`nvcc`, ...) and names no NPU (npu_words): the script builds CUDA wheels or kernels
    for an NVIDIA image, so the variable asks nothing of a porter (cudaonly21's "in NVIDIA build
    tooling: ", a named scope). The same for a CI pipeline's YAML there (`.buildkite/release-
    pipeline.yaml`, round-28 CA#6, CC#3) whose mark may also be the CUDA image its steps build from
    (`nvidia/cuda:13.4.1-base-ubuntu24.04`, `manylinux2_28-builder:cuda13.0`), for notes on the
    pipeline's CUDA variables only (`CUDA_ARCH_X86`, `CUDA_VERSION`; an `NCCL_VERSION` build
    argument keeps its note, tests/test_precision_round16d.py); the image itself keeps its NPU707. A script that names the NPU, or has no such toolkit mark, or lies in the
    package's own folders keeps its notes."""
    import dataclasses

    from .cudaonly21 import tooling_table as _tooling_table
    from .folding import places_of

    if kind not in ("shell", "yaml") or not any(f.code == "NPU703" and not f.fixable for f in findings):
        return findings
    config = _tooling_table()
    folder = relpath.partition("/")[0]
    if folder not in config.get("tooling_folders", ()) or "/" not in relpath:
        return findings
    text = source.decode("utf-8", "replace")
    if re.search(config.get("npu_words", r"(?i)\bnpu\b"), text):
        return findings
    mark = _TOOLKIT_PATH.search(text)
    programs = config.get("toolkit_programs", ())
    if mark is None:
        mark = re.search(r"\b(" + "|".join(map(re.escape, programs)) + r")\b", text) if programs else None
    image = mark is None and kind == "yaml" and _CUDA_BUILD_IMAGE.search(text) is not None
    if image:
        mark = _CUDA_BUILD_IMAGE.search(text)
    if mark is None:
        return findings
    line = text.count("\n", 0, mark.start()) + 1
    shown = mark.group(0)
    shown = shown[:-1] if shown.endswith("}") and shown.count("{") < shown.count("}") else shown
    what = ("a CI pipeline under `{}/` whose steps build from a CUDA image" if image
            else "a script under `{}/` that builds against the CUDA toolkit")
    why = (f"in NVIDIA build tooling: {what.format(relpath.rpartition('/')[0])} (`{shown}`, line {line}); an NPU "
           "host never runs it, and the variable asks nothing of a port")
    return [dataclasses.replace(f, severity="info", message=f"{f.message} ({why})")
            if f.code == "NPU703" and not f.fixable and f.cell is None and "NVIDIA build tooling" not in f.message
            and (not image or all(_CUDA_VARIABLE.match(src or "") for _l, _c, src in places_of(f)))
            else f for f in findings]
