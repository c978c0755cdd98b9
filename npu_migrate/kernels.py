"""Triton and FP8 findings (NPU910, NPU913) weighed by what the file does with them (issue #16).

Runs once per Python file on the findings of the rules and the sweep, before they are merged one
per file (run.py), and reads the file's own ast:

* **Triton host helpers.** A file that defines no kernel (`@triton.jit`, `@triton.autotune`,
  `@triton.heuristics`, any decorator from triton) and uses Triton only through its host helpers
  (`triton.cdiv`, `triton.next_power_of_2`, `triton.__version__`, `triton.language` dtype
  constants, the `triton.testing` harness `do_bench` / `perf_report` / `Benchmark`, the exception
  classes `CompilationError`, `CompileTimeAssertionFailure` and `OutOfResources` a file catches, not
  the CUDA assembler's `PTXASError`) runs on an NPU
  host as written: Triton-Ascend installs as `triton` and provides them. Its NPU910 is no finding
  but a skipped scope of the file that names the helpers (JSON `skipped`, `--show-skipped`); the
  kernels it launches are reported where they are defined.
* **`triton.testing.do_bench_cudagraph`** times by replaying a CUDA graph: the one harness call
  that is CUDA-specific. The file's NPU910 anchors on it and names it (an error), instead of the
  "only `triton.testing`, a benchmark harness" information.
* **FP8 severity follows real FP8 operations.** A file whose FP8 finding is information only
  (it names FP8 dtypes: a parameter's default, an allow-list, a byte view) but which casts to FP8
  through a helper (`hp_tensor_to_float8_dynamic(...)`, `to_mx(...)`, `quantize_fp8(...)`) or
  builds an FP8 training/inference config (`Float8LinearConfig(...)`) computes in FP8: its NPU913
  becomes an error anchored on that call, the names listed with it. A helper the file defines
  itself is judged by its body (the sweep read it), a config's factory is not a cast.
* **FP8 anchor.** A file's NPU913 anchors on its strongest FP8 operation: a scaled matmul
  (`torch._scaled_mm`, `torch._scaled_grouped_mm`) first, then a cast (`.to(...)`, a cast
  helper), then any other place; the others are listed in `also`.
* **FP8 names in code an NPU host never runs** (a test it skips, a branch it never takes) take
  that reason, as an error there does (moot.py then names them as a skipped scope); **byte views**
  (`scales.view(torch.float8_e4m3fn)`) inside a function that carries an NPU911 (the compiled
  kernel the bytes are handed to) are a skipped scope that points at that finding.

What the sweep decides itself (sweep.py): FP8 dtypes that are a config class's defaults, values of
a table keyed by literals, a byte view's target, a module-level descriptor's argument, or a CPU
tensor's dtype in a test (no device) only name FP8 dtypes.
"""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from typing import Optional

from . import astcache, catalogue
from .findings import Finding, merge_per_file

# Triton's host-side names that Triton-Ascend provides as well (qualified through the imports)
_HOST = frozenset({
    "triton.cdiv", "triton.next_power_of_2", "triton.__version__",
    "triton.testing.do_bench", "triton.testing.perf_report", "triton.testing.Benchmark",
    "triton.testing.assert_close",
    # Triton's exception classes, caught around a compile or an autotuning run (round-28 audit
    # CA#25, h137): plain Python classes of the same modules in Triton-Ascend; not `PTXASError`,
    # the CUDA assembler's, which Triton-Ascend need not have (test_h91's patcher)
    "triton.compiler.errors.CompilationError", "triton.compiler.errors.CompileTimeAssertionFailure",
    "triton.runtime.errors.OutOfResources",
})
_MODULES = frozenset({"triton", "triton.language", "triton.testing"})
# Triton's registry of installed backends, read to find the active driver (vLLM's
# triton_utils/importing.py: `[x.driver for name, x in backends.items() if x.driver.is_active()]`,
# round-32 audit GC#34): Triton-Ascend registers its NPU driver there. Read through these methods
# or by a backend name other than a GPU vendor's; `backends["nvidia"]` asks for CUDA's driver.
_REGISTRY = "triton.backends.backends"
_REGISTRY_READS = frozenset({f"{_REGISTRY}.items", f"{_REGISTRY}.values", f"{_REGISTRY}.keys", f"{_REGISTRY}.get"})
_GPU_BACKENDS = frozenset({"nvidia", "amd", "cuda", "hip"})
_TL_CONSTANT = re.compile(r"triton\.language\.(u?int(8|16|32|64)|float(16|32|64)|bfloat16|int1|float8\w*)")
_CUDAGRAPH = "triton.testing.do_bench_cudagraph"
_HARNESS = "(only `triton.testing`, a benchmark harness)"
_HOST_ONLY = "uses only Triton's host helpers"

# calls that cast to FP8 through a helper, and FP8 configs that turn FP8 compute on
_FP8_CAST_WORD = re.compile(r"(?i)(^|_)to_(float8|fp8|mx)(_|$)|quant\w*_(fp8|float8|mx)(_|$)|(fp8|float8)\w*_quant")
# not casts: packing helpers (`unpack_int32_to_fp8`: bytes read as FP8) and predicates
# (`tensor_already_casted_to_fp8`, `is_fp8_quantized`)
_PACKING = re.compile(r"(?i)_*((un)?pack|is_|has_|can_|should_|check|supports?_|use_|\w*already)")
_CALLED = re.compile(r"(\w+)\s*\(")


def _casts(name: str) -> bool:
    """Whether a function of this name casts to FP8 (`hp_tensor_to_float8_dynamic`, `to_mx`,
    `per_token_group_quant_fp8`, `mxfp8_quantize`); not a config's factory
    (`make_fp8_moe_quant_config`: plumbing, no tensor cast)."""
    return (bool(name) and not _PACKING.match(name) and not name.lower().endswith("config")
            and bool(_FP8_CAST_WORD.search(name)))
_FP8_CONFIG = re.compile(r"(?i)^(float8|fp8|mxfp8)\w*(weight|activation|linear|training|inference)\w*config$")
_SCALED_MM = re.compile(r"_scaled_(grouped_)?mm")
# a dequantizing helper (`_dequantize_affine_float8`, `dequant_fp8`) casts FROM FP8 (round-10 audit)
_DEQUANT = re.compile(r"(?i)(^|_)de_?quant|(^|_)from_(float8|fp8|mx)(_|$)")
_NAMES_ONLY = " (names FP8 dtypes only; no FP8 compute found in this file)"


def review(findings: list[Finding], text: str, result=None) -> list[Finding]:
    """The file's NPU910 and NPU913 findings weighed by what it does (see the module's doc).
    Findings about Triton's host helpers leave the findings as skipped scopes of `result` (a
    FileResult: JSON `skipped`, `--show-skipped`), with the helpers named."""
    codes = {f.code for f in findings if not f.fixable}
    if not codes & {"NPU910", "NPU913"}:
        return findings
    body = text.encode("utf-8", "surrogatepass")
    tree = astcache.parse(body[3:] if body.startswith(b"\xef\xbb\xbf") else body)  # (the one parse, shared)
    if tree is None:
        return findings
    if "NPU910" in codes:
        findings = _triton(findings, tree, text)
        if result is not None:
            findings = _host_scopes(findings, result)
    if "NPU913" in codes:
        findings = _in_skipped_tests(_fp8(findings, tree, text), text)
        if "NPU911" in codes and result is not None:
            findings = _views_for_extensions(findings, tree, text, result)
    return findings


def _views_for_extensions(findings: list[Finding], tree: ast.AST, text: str, result) -> list[Finding]:
    """`w.view(torch.float8_e4m3fn)` listed as information inside a function that calls a compiled
    extension reported there (NPU911): the bytes are handed to that kernel, whose finding already
    says the function does not run on an NPU host. Named as a skipped scope, not a second finding."""
    extension_lines = sorted({f.line for f in findings if f.code == "NPU911" and not f.fixable and f.cell is None})
    functions = [(n.lineno, n.end_lineno or n.lineno) for n in astcache.walk(tree)
                 if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    lines = text.splitlines()
    kept, folded = [], {}  # (the NPU911's line: the lines of the views folded into it)
    for finding in findings:
        if finding.code == "NPU913" and finding.severity == "info" and finding.message.endswith(_NAMES_ONLY) \
                and finding.cell is None and ".view(" in "".join(lines[max(finding.line - 3, 0):finding.line]):
            inner = min((f for f in functions if f[0] <= finding.line <= f[1]), key=lambda f: f[1] - f[0], default=None)
            extension = next((n for n in extension_lines if inner and inner[0] <= n <= inner[1]), None)
            if extension is not None:
                folded.setdefault(extension, []).append(finding.line)
                continue
        kept.append(finding)
    if folded:
        scopes = [(min(at), max(at), f"bytes viewed as FP8 for the compiled extension this function calls "
                   f"(NPU913, with the NPU911 at line {extension})") for extension, at in folded.items()]
        result.skipped_scopes = sorted({*result.skipped_scopes, *scopes})
    return kept


def _in_skipped_tests(findings: list[Finding], text: str) -> list[Finding]:
    """The FP8 names listed as information inside a test an NPU host skips, or a branch it never
    takes, take that reason (a named skipped scope then, moot.py), as an error there does: no
    finding of their own."""
    names = [f for f in findings if f.code == "NPU913" and f.severity == "info" and f.message.endswith(_NAMES_ONLY)]
    if not names:
        return findings
    from .testscopes import lower_in_cuda_only_tests, review_untaken_branches

    probes = [replace(f, severity="warning") for f in names]
    lowered = lower_in_cuda_only_tests(probes, text)
    branches, _typing = review_untaken_branches(lowered, text)
    if len(branches) == len(lowered):  # (one for one: none went into an `if TYPE_CHECKING:` scope)
        lowered = branches
    by_id = dict(zip(map(id, names), lowered))
    out = []
    for finding in findings:
        probe = by_id.get(id(finding))
        if probe is not None and probe.severity == "info":
            finding = replace(finding, message=probe.message)
        out.append(finding)
    return out


# ---------------------------------------------------------------------------------- Triton
def _is_triton(module: str) -> bool:
    return module == "triton" or module.startswith("triton.")


def triton_host_use(tree: ast.AST) -> Optional[tuple[list[str], list[ast.AST]]]:
    """(the host helpers used, the `do_bench_cudagraph` uses) of a file that defines no Triton
    kernel and uses Triton only through host helpers; None otherwise (a kernel, a driver query,
    `triton.runtime`, a name passed around, ...)."""
    bound: dict[str, str] = {}
    for node in astcache.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _is_triton(alias.name):
                    continue
                if alias.name not in _MODULES:
                    return None
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = "triton"
        elif isinstance(node, ast.ImportFrom) and not node.level and _is_triton(node.module or ""):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full not in _HOST and full not in _MODULES and full != _CUDAGRAPH and full != _REGISTRY:
                    return None
                bound[alias.asname or alias.name] = full
        elif isinstance(node, ast.ImportFrom) and node.module and "triton" in node.module.split(".")[-1]:
            # a project's re-export of the module (`from vllm.triton_utils import triton`)
            for alias in node.names:
                if alias.name in ("triton", "tl"):
                    bound[alias.asname or alias.name] = "triton" if alias.name == "triton" else "triton.language"
    if not bound:
        return None
    registry = {name for name, qual in bound.items() if qual == _REGISTRY}
    if registry and any(isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in registry
                        and not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)
                                 and node.slice.value.lower() not in _GPU_BACKENDS) for node in astcache.walk(tree)):
        return None  # (`backends["nvidia"].driver`: CUDA's own driver, or a name not seen)
    helpers: list[str] = []
    cudagraph: list[ast.AST] = []

    def visit(node: ast.AST) -> bool:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                name = astcache.dotted(target, strict=True) or ""
                head, _, rest = name.partition(".")
                if head in bound and bound[head] + ("." + rest if rest else "") not in _HOST:
                    return False  # a kernel (or a decorator of Triton's other than the harness)
        if isinstance(node, (ast.Attribute, ast.Name)):
            name = astcache.dotted(node, strict=True)
            if name is not None and name.split(".")[0] in bound:
                head, _, rest = name.partition(".")
                qual = bound[head] + ("." + rest if rest else "")
                if qual == _CUDAGRAPH:
                    cudagraph.append(node)
                elif qual in _HOST or _TL_CONSTANT.fullmatch(qual):
                    helpers.append(qual)
                elif qual == _REGISTRY or qual in _REGISTRY_READS:
                    helpers.append(_REGISTRY)  # (the backend registry, read: _REGISTRY)
                else:
                    return False  # a module used whole, or a name that is not a host helper
                return True  # (the chain's inner nodes are the same name)
        return all(visit(child) for child in ast.iter_child_nodes(node))

    if not visit(tree):
        return None
    return list(dict.fromkeys(helpers)), cudagraph


def _triton(findings: list[Finding], tree: ast.AST, text: str) -> list[Finding]:
    use = triton_host_use(tree)
    if use is None:
        return findings
    helpers, cudagraph = use
    if cudagraph:
        return _cudagraph(findings, cudagraph[0], text)
    if not helpers:
        return findings  # imported and never used here: nothing says what for (a re-export?)
    shown = ", ".join(f"`{h}`" for h in helpers[:4])
    reason = (f" ({_HOST_ONLY} ({shown}), which Triton-Ascend provides on an NPU host; "
              "the kernels it launches are reported where they are defined)")
    return [replace(f, severity="info", message=f.message.replace(" " + _HARNESS, "") + reason)
            if f.code == "NPU910" and not f.fixable and (f.severity != "info" or _HARNESS in f.message) else f
            for f in findings]


def _host_scopes(findings: list[Finding], result) -> list[Finding]:
    """The NPU910 about host helpers only, as a skipped scope of the file instead of a finding:
    the code runs on an NPU host as written (Triton-Ascend), so it is left as written."""
    kept, lines, why = [], [], ""
    for finding in findings:
        at = finding.message.find(f"({_HOST_ONLY} (")
        if finding.code != "NPU910" or finding.severity != "info" or at < 0 or finding.cell is not None:
            kept.append(finding)
            continue
        lines += [finding.line, *(line for line, _column, _source in finding.also)]
        why = finding.message[at + 1:].rsplit(")", 1)[0]
    if lines:  # one scope for the file's Triton lines (its imports, merged places)
        scope = (min(lines), max(lines), f"runs on an NPU host as written (NPU910): {why}")
        result.skipped_scopes = sorted([*result.skipped_scopes, scope])
    return kept


def _cudagraph(findings: list[Finding], node: ast.AST, text: str) -> list[Finding]:
    """The file's NPU910 anchored on `do_bench_cudagraph` (an error), the other places listed."""
    triton = [f for f in findings if f.code == "NPU910" and not f.fixable]
    if any(f.severity == "info" and _HARNESS not in f.message for f in triton):
        return findings  # information for another reason (a test an NPU host skips): kept so
    rule = catalogue.rule("NPU910")
    path = triton[0].path if triton else ""
    what = (f"`{_CUDAGRAPH}` times a kernel by replaying a CUDA graph, which an NPU host does not "
            "capture this way (`do_bench` is portable)")
    line = text.splitlines()[node.lineno - 1] if node.lineno <= len(text.splitlines()) else ""
    anchor = Finding(path, node.lineno, node.col_offset + 1, "NPU910", rule.message.format(what=what), False,
                     " ".join(line.split()), cell=triton[0].cell if triton else None)
    others = [replace(f, severity=anchor.severity, message=f.message.replace(" " + _HARNESS, ""))
              for f in triton]
    merged = merge_per_file([anchor, *others], secondary=lambda f: f is not anchor)
    return [f for f in findings if f not in triton] + _in_tests(merged, text)


def _in_tests(created: list[Finding], text: str) -> list[Finding]:
    """The errors this module anchored anew, lowered as the run lowers the others inside a test an
    NPU host skips (testscopes; it ran before this module)."""
    from .testscopes import lower_in_cuda_only_tests

    return lower_in_cuda_only_tests(created, text)


# ---------------------------------------------------------------------------------- FP8
def _called(node: ast.Call) -> str:
    return (astcache.dotted(node.func, strict=True) or "").rsplit(".", 1)[-1]


def _fp8_calls(tree: ast.AST) -> list[ast.Call]:
    """Calls that compute in FP8 through a helper or turn FP8 on with a config, in file order.
    A helper the file defines itself is not one: the sweep read its body (a byte view there is
    no cast), so only helpers from elsewhere are judged by their names."""
    own = {n.name for n in astcache.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = []
    for node in astcache.walk(tree):
        if isinstance(node, ast.Call):
            name = _called(node)
            if name and name not in own and (_casts(name) or _FP8_CONFIG.match(name)):
                found.append(node)
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def _rank(finding: Finding, lines: list[str]) -> int:
    """0 a scaled matmul, 1 a cast (`.to(`, a cast helper on its line), 2 anything else."""
    if _SCALED_MM.search(finding.source):
        return 0
    line = lines[finding.line - 1] if 0 < finding.line <= len(lines) else ""
    if ".to(" in line or any(_casts(name) for name in _CALLED.findall(line)):
        return 1
    return 2


def _fp8(findings: list[Finding], tree: ast.AST, text: str) -> list[Finding]:
    fp8 = [f for f in findings if f.code == "NPU913" and not f.fixable]
    lines = text.splitlines()
    errors = [f for f in fp8 if f.severity != "info"]
    names_only = [f for f in fp8 if f.severity == "info" and f.message.endswith(_NAMES_ONLY)]
    if not errors and names_only:
        calls = _fp8_calls(tree)
        if calls:  # (a conversion of a CPU model in a test is no FP8 compute on a device: fp8data.py)
            from .fp8data import FileData

            data = FileData(tree, names_only[0].path, text)
            calls = [call for call in calls if not data.cpu_call(call)]
        if calls:
            call = calls[0]
            shown = " ".join(ast.get_source_segment(text, call).split()) if ast.get_source_segment(text, call) else _called(call)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            kind = (("a cast from FP8" if _DEQUANT.search(_called(call)) else "a cast to FP8")
                    if _casts(_called(call)) else "an FP8 configuration")
            rule = catalogue.rule("NPU913")
            anchor = Finding(names_only[0].path, call.lineno, call.col_offset + 1, "NPU913",
                             rule.message.format(what=f"`{shown}` ({kind})"), False, shown, cell=names_only[0].cell)
            others = [replace(f, severity=anchor.severity, message=f.message[: -len(_NAMES_ONLY)]) for f in names_only]
            merged = merge_per_file([anchor, *others], secondary=lambda f: f is not anchor)
            return [f for f in findings if f not in names_only] + _in_tests(merged, text)
        return findings
    if len(errors) < 2:
        return findings
    best = min(errors, key=lambda f: (_rank(f, lines), f.line, f.column))
    if best is min(errors):
        return findings  # the first in file order is the strongest: the merge anchors it
    merged = merge_per_file(errors, secondary=lambda f: f is not best)
    return [f for f in findings if f not in errors] + merged
