"""Gates an NPU host answers, bitsandbytes functions it has, CI lines already reported (issue #16, round 15).

`review(results, paths)` is called once, from runplan.whole_run_passes (before moot.to_scopes). Each
shape reads only files whose bytes name what it looks for, and each lowers or folds a finding with
its reason in the message: nothing is dropped.

- **A lazy import reached only when `get_accelerator().is_triton_supported()` passes, in a project
  whose NPU accelerator answers it with a literal False** (NPU918/NPU910/NPU911/..., AO#40:
  DeepSpeed's `_load_liger_vocab_ce` imports Liger in `try`/`except ImportError`, called only from
  `_liger_vocab_cross_entropy`, called only under `use_liger = backend == "liger" and
  _liger_can_run(...)`, whose every `return` is False or an `and` holding
  `get_accelerator().is_triton_supported()`; `NPU_Accelerator.is_triton_supported` is `return
  False`). The import is never reached on an NPU host, Triton-Ascend or not: info with
  predicates.NPU_ACCELERATOR_NO_TRITON (a moot.PHRASES entry: a named skipped scope). The reach is
  samefile.opt_in_gates' (private functions of the file, a few steps). A probe other than
  `is_triton_supported` on an accelerator, a gate function with another `return`, a call reached
  without such a gate, or a project whose NPU accelerator answers anything but a literal False
  keeps the finding.

- **Triton kernels imported only behind a gate that needs CUDA** (NPU910 info, AL#38: xformers'
  `tiled_matmul_kernels` is imported only under `... and _should_use_triton(...)`, whose leading
  `if ...: return False` exits include `if not _is_triton_available(): return False`, and that
  function (`from .. import`, or `pkg._is_triton_available()` with `import pkg`) returns False where
  `torch.cuda.is_available()` is False, a check the run leaves as written: labels7.requires_cuda_exit,
  environment opt-ins named in the reason). Every import site of the module in the run must sit
  under such a Triton test: info with CUDA_GATED_TRITON (a moot.PHRASES entry), in place of "with
  Triton-Ascend installed these kernels run there". A gate that only probes Triton's import, or a
  CUDA check the run rewrote, keeps the finding.

- **A bitsandbytes import whose names only call functions the NPU backend has** (NPU914 warning,
  AN#12: peft's `dequantize_bnb_weight` imports `bitsandbytes as bnb` in its body and only calls
  `bnb.functional.dequantize_4bit` and `bnb.functional.int8_vectorwise_dequant`, testing the latter
  with `hasattr`). bitsandbytes >= 0.45 registers those for every device (pure-torch default
  kernels, an Ascend plugin backend): the function runs as written on an NPU host. Info with
  BNB_NPU_FUNCTIONS (a moot.AS_WRITTEN entry). Every place of the finding must be such an import
  inside a function, and every read of what it binds must be such a call (or the `hasattr` test);
  an optimizer, a layer class (`bnb.nn.Linear8bitLt`), `bnb.functional` passed on, or a module-level
  import keeps the warning.

- **A build argument of a command already reported** (NPU703, AP#4: vLLM's release pipeline passes
  `--build-arg NCCL_VERSION=2.32.3` to the `docker buildx build` whose `--build-arg
  FINAL_BASE_IMAGE=nvidia/cuda:...` is an NPU707 error). When every place of an NPU703 finding is a
  `--build-arg` line of a backslash-continued command holding a place of another finding of a
  different code (error or warning), its places join that finding's `also` lines (with FOLDED_ARG
  in the host's message): the command is reported once. A lone build argument stays a finding.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from . import astcache

# (moot.AS_WRITTEN holds it: the finding becomes a named skipped scope)
BNB_NPU_FUNCTIONS = "bitsandbytes functions its NPU backend provides, called as written"
FOLDED_ARG = "with the command's CUDA build arguments"

_SWEEP_CODES = frozenset({"NPU910", "NPU911", "NPU914", "NPU915", "NPU918", "NPU502"})
# bitsandbytes.functional entries with a default (pure-torch) kernel and an Ascend one (>= 0.45)
_BNB_NPU = frozenset({"dequantize_4bit", "quantize_4bit", "int8_vectorwise_dequant", "int8_vectorwise_quant",
                      "dequantize_blockwise", "quantize_blockwise", "int8_mm_dequant"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def review(results: list, paths: dict) -> list:
    results = _review_accelerator_gates(results, paths)
    results = _review_cuda_gated_triton(results, paths)
    results = _review_bnb(results, paths)
    return _fold_build_args(results, paths)


def _places(finding) -> list[int]:
    return [finding.line, *(line for line, _c, _s in finding.also)]


def _lower(finding, why: str):
    return dataclasses.replace(finding, severity="info", message=f"{finding.message} ({why})")


# ----------------------------------------------------------------------------- is_triton_supported()
def _accelerator_probe(call: ast.AST) -> bool:
    """`get_accelerator().is_triton_supported()` (or `<...accelerator...>.is_triton_supported()`)."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "is_triton_supported"):
        return False
    receiver = call.func.value
    if isinstance(receiver, ast.Call):
        receiver = receiver.func
    return "accelerator" in (astcache.dotted(receiver) or "").lower()


def _needs_triton_supported(function: ast.AST) -> bool:
    """Every `return` of the function is False or an `and` holding the accelerator probe (nested
    functions aside)."""
    returns, stack = [], list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return):
            returns.append(node)
        stack.extend(ast.iter_child_nodes(node))
    if not returns:
        return False
    for node in returns:
        value = node.value
        if isinstance(value, ast.Constant) and value.value is False:
            continue
        if not (isinstance(value, ast.BoolOp) and isinstance(value.op, ast.And)
                and any(_accelerator_probe(v) for v in value.values)):
            return False
    return True


def _review_accelerator_gates(results: list, paths: dict) -> list:
    from .modpaths import result_bytes
    from .moot import is_moot
    from .predicates import NPU_ACCELERATOR_NO_TRITON, npu_accelerator_without_triton
    from .samefile import opt_in_gates

    def candidate(f) -> bool:
        return f.code in _SWEEP_CODES and not f.fixable and f.cell is None and not is_moot(f)

    todo = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(candidate(f) for f in r.findings)]
    texts: dict[int, Optional[bytes]] = {}

    def text_of(i: int) -> Optional[bytes]:
        if i not in texts:
            texts[i] = result_bytes(results[i], paths)
        return texts[i]

    todo = [i for i in todo if b"is_triton_supported" in (text_of(i) or b"")]
    if not todo:
        return results
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    where = npu_accelerator_without_triton(results, python, text_of)
    if where is None:
        return results
    out = list(results)
    for i in todo:
        tree = astcache.parse(text_of(i))
        if tree is None:
            continue
        functions = {n.name: n for n in tree.body if isinstance(n, _FUNCTIONS)}
        findings, changed = [], False
        for finding in results[i].findings:
            found = opt_in_gates(finding, tree, results[i].findings) if candidate(finding) else None
            if found and all(probe == "is_triton_supported" and gate in functions
                             and _needs_triton_supported(functions[gate]) for gate, probe in found[1]):
                gate = found[1][0][0]
                finding = _lower(finding, f"{NPU_ACCELERATOR_NO_TRITON} ({where}): `{found[0]}` runs only when "
                                          f"`{gate}()` passes, which needs `get_accelerator().is_triton_supported()`")
                changed = True
            findings.append(finding)
        if changed:
            out[i] = dataclasses.replace(results[i], findings=findings)
    return out


# ----------------------------------------------------------------------------- bitsandbytes functions
def _bound(statement: ast.AST) -> Optional[dict[str, str]]:
    """{name: what it stands for} of a bitsandbytes import: "" the package, "functional" its
    functional module, "fn:<name>" one of its functions; None for anything else."""
    out = {}
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            if alias.name != "bitsandbytes":
                return None
            out[alias.asname or alias.name] = ""
    elif isinstance(statement, ast.ImportFrom) and not statement.level:
        for alias in statement.names:
            if statement.module == "bitsandbytes" and alias.name == "functional":
                out[alias.asname or alias.name] = "functional"
            elif statement.module == "bitsandbytes.functional" and alias.name in _BNB_NPU:
                out[alias.asname or alias.name] = "fn:" + alias.name
            else:
                return None
    return out or None


def _npu_use(name: ast.Name, kind: str, parent: dict) -> Optional[str]:
    """The backend function a read of a bound name calls (or tests with `hasattr`), or None."""
    chain, node = [], name
    while isinstance(parent.get(id(node)), ast.Attribute) and parent[id(node)].value is node:
        node = parent[id(node)]
        chain.append(node.attr)
    holder = parent.get(id(node))
    # the attributes between the bound name and the function: `bnb.functional.f`, `F.f`, `f`
    module = ["functional"] if kind == "" else []
    if kind.startswith("fn:"):
        called = kind[3:] if not chain else None
    else:
        called = chain[-1] if len(chain) == len(module) + 1 and chain[:-1] == module else None
    if called in _BNB_NPU and isinstance(holder, ast.Call) and holder.func is node:
        return called
    if (not kind.startswith("fn:") and chain == module and isinstance(holder, ast.Call)
            and isinstance(holder.func, ast.Name) and holder.func.id == "hasattr" and len(holder.args) == 2
            and holder.args[0] is node and isinstance(holder.args[1], ast.Constant)
            and holder.args[1].value in _BNB_NPU):
        return holder.args[1].value
    return None


def npu_backend_calls(tree: ast.Module, lines: list[int]) -> Optional[list[str]]:
    """The bitsandbytes functions the imports at `lines` are used for, when each is an import inside
    a function and every read of what it binds there calls (or `hasattr`-tests) a function the NPU
    backend has; None otherwise."""
    parent = astcache.parents(tree)
    used: set[str] = set()
    for line in lines:
        statements = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line]
        if len(statements) != 1:
            return None
        bound = _bound(statements[0])
        function = parent.get(id(statements[0]))
        while function is not None and not isinstance(function, _FUNCTIONS):
            function = parent.get(id(function))
        if bound is None or function is None:
            return None
        reads = 0
        for node in ast.walk(function):
            if isinstance(node, (ast.Global, ast.Nonlocal)) and set(node.names) & set(bound):
                return None
            if isinstance(node, ast.Name) and node.id in bound:
                if not isinstance(node.ctx, ast.Load):
                    return None
                called = _npu_use(node, bound[node.id], parent)
                if called is None:
                    return None
                used.add(called)
                reads += 1
        if not reads:
            return None
    return sorted(used)


def _review_bnb(results: list, paths: dict) -> list:
    from .modpaths import result_bytes
    from .optionalguards import BNB_DEFAULT

    out = list(results)
    for i, result in enumerate(results):
        if not result.relpath.endswith(".py") or not any(
                f.code == "NPU914" and f.severity == "warning" and BNB_DEFAULT in f.message for f in result.findings):
            continue
        data = result_bytes(result, paths)
        tree = astcache.parse(data) if data and b"bitsandbytes" in data else None
        if tree is None:
            continue
        findings = []
        for finding in result.findings:
            if finding.code == "NPU914" and finding.severity == "warning" and BNB_DEFAULT in finding.message \
                    and not finding.fixable and finding.cell is None:
                called = npu_backend_calls(tree, _places(finding))
                if called:
                    finding = _lower(finding, f"{BNB_NPU_FUNCTIONS}: " + ", ".join(f"`{c}`" for c in called))
            findings.append(finding)
        out[i] = dataclasses.replace(result, findings=findings)
    return out


# ----------------------------------------------------------------------------- build arguments
_BUILD_ARG = re.compile(r"--build-arg\b")


def _command(lines: list[str], line: int) -> tuple[int, int]:
    """The 1-based span of the backslash-continued command holding `line`."""
    first = last = line
    while first > 1 and lines[first - 2].rstrip().endswith("\\"):
        first -= 1
    while last < len(lines) and lines[last - 1].rstrip().endswith("\\"):
        last += 1
    return first, last


command_span = _command  # (dockerargs29.py: the command a CI image argument belongs to)


def _fold_build_args(results: list, paths: dict) -> list:
    from .modpaths import result_bytes

    out = list(results)
    for i, result in enumerate(results):
        if result.relpath.endswith(".py") or not any(
                f.code == "NPU703" and not f.fixable and f.cell is None for f in result.findings):
            continue
        hosts = [f for f in result.findings if f.code != "NPU703" and f.severity in ("error", "warning")
                 and f.cell is None]
        if not hosts:
            continue
        data = result_bytes(result, paths)
        if not data or b"--build-arg" not in data:
            continue
        lines = data.decode("utf-8", "replace").splitlines()
        host_of = {}  # a host finding's place -> the host
        for host in hosts:
            for line in _places(host):
                host_of.setdefault(line, host)
        folds: dict[int, list] = {}  # id(host) -> the places it takes
        kept = []
        for finding in result.findings:
            if finding.code != "NPU703" or finding.fixable or finding.cell is not None:
                kept.append(finding)
                continue
            targets = []
            for line, column, source in [(finding.line, finding.column, finding.source), *finding.also]:
                if not (0 < line <= len(lines) and _BUILD_ARG.search(lines[line - 1])):
                    break
                first, last = _command(lines, line)
                host = next((host_of[n] for n in range(first, last + 1) if n in host_of), None)
                if host is None:
                    break
                targets.append((host, (line, column, source)))
            else:
                if targets:
                    for host, place in targets:
                        folds.setdefault(id(host), []).append(place)
                    continue
            kept.append(finding)
        if not folds:
            continue
        findings = []
        for finding in kept:
            if id(finding) in folds:
                places = [p for p in folds[id(finding)] if p[0] not in _places(finding)]
                finding = dataclasses.replace(
                    finding, also=tuple(sorted((*finding.also, *places))),
                    message=f"{finding.message} ({FOLDED_ARG}: lines "
                            f"{', '.join(str(p[0]) for p in sorted(folds[id(finding)]))})")
            findings.append(finding)
        out[i] = dataclasses.replace(result, findings=findings)
    return out


# ----------------------------------------------------------------------------- a Triton gate needing CUDA
# (moot.PHRASES holds it: the finding becomes a named skipped scope)
CUDA_GATED_TRITON = ("imported only behind a Triton gate that needs `torch.cuda.is_available()`, a check the run "
                     "leaves as written: false on an NPU host, Triton-Ascend or not")


def _module_of(results: list, relpath: str, tree: ast.Module, call: ast.AST) -> Optional[tuple[list, str]]:
    """([indices of the run's files the called name may come from], the function's name) of a call
    without arguments to `pkg.f()` (`import pkg`) or `f()` (`from pkg import f`, relative or not)."""
    from .modpaths import module_names, resolve_relative

    if not (isinstance(call, ast.Call) and not call.args and not call.keywords):
        return None
    dotted = astcache.dotted(call.func, strict=True)
    if dotted is None:
        return None
    module, _, name = dotted.rpartition(".")
    stems: set[str] = set()
    if module:
        if not any(isinstance(n, ast.Import) and any(a.name == module and a.asname is None for a in n.names)
                   for n in tree.body):
            return None
    else:
        source = next((n for n in tree.body if isinstance(n, ast.ImportFrom)
                       and any((a.asname or a.name) == name and a.name == name for a in n.names)), None)
        if source is None:
            return None
        if source.level:
            base = resolve_relative(relpath, source.level, source.module or "")
            stems = {base, base + "/__init__"}
        else:
            module = source.module or ""
    found = [k for k, r in enumerate(results) if r.relpath.endswith(".py") and (
        r.relpath[:-3] in stems if stems else module in module_names(r.relpath))]
    return (found, name) if found else None


def _cuda_gated_call(results: list, paths: dict, relpath: str, tree: ast.Module, call: ast.AST,
                     texts: dict) -> Optional[str]:
    """"path:line (opt-in)" when `call` calls a function of the run that returns False where
    `torch.cuda.is_available()` is False, a check left as written (labels7.requires_cuda_exit)."""
    from .labels7 import requires_cuda_exit
    from .modpaths import result_bytes

    target = _module_of(results, relpath, tree, call)
    if target is None:
        return None
    indices, name = target
    for k in indices:
        if k not in texts:
            texts[k] = result_bytes(results[k], paths)
        data = texts[k]
        if data is None or f"def {name}(".encode() not in data or b"torch.cuda.is_available" not in data:
            continue
        module = astcache.parse(data)
        function = next((n for n in getattr(module, "body", ()) if isinstance(n, ast.FunctionDef)
                         and n.name == name), None)
        found = requires_cuda_exit(function) if function is not None else None
        if found is None or any(f.fixable and f.line == found[0] for f in results[k].findings):
            return None
        opt_in = f", unless the opt-in `{found[1][0][:60]}` holds" if found[1] else ""
        return f"{results[k].relpath}:{found[0]}{opt_in}"
    return None


def _early_false(statement: ast.stmt) -> Optional[ast.AST]:
    """The test of `if TEST: return False` (no `else`), or None."""
    if (isinstance(statement, ast.If) and not statement.orelse and len(statement.body) == 1
            and isinstance(statement.body[0], ast.Return) and isinstance(statement.body[0].value, ast.Constant)
            and statement.body[0].value.value is False):
        return statement.test
    return None


def _gate_needs_cuda(results, paths, relpath, tree, test, texts) -> Optional[str]:
    """Where the Triton test needs CUDA: each disjunct (but `TYPE_CHECKING`) has a conjunct that is
    such a call, or a call of a module-level function of the file whose leading `if ...: return
    False` exits include `if not <such a call>: return False`."""
    from .tritonguards import operands

    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    disjuncts = [d for d in operands(test, ast.Or) if (astcache.dotted(d) or "").rsplit(".", 1)[-1] != "TYPE_CHECKING"]
    where = None
    for disjunct in disjuncts:
        found = None
        for conjunct in operands(disjunct, ast.And):
            found = _cuda_gated_call(results, paths, relpath, tree, conjunct, texts)
            if found is None and isinstance(conjunct, ast.Call) and isinstance(conjunct.func, ast.Name) \
                    and conjunct.func.id in functions:
                body = functions[conjunct.func.id].body
                if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    body = body[1:]
                for statement in body:
                    exit_test = _early_false(statement)
                    if exit_test is None:
                        break
                    if isinstance(exit_test, ast.UnaryOp) and isinstance(exit_test.op, ast.Not):
                        found = _cuda_gated_call(results, paths, relpath, tree, exit_test.operand, texts)
                        if found:
                            found = f"{found}, through `{conjunct.func.id}()`"
                            break
            if found:
                break
        if found is None:
            return None
        where = where or found
    return where


def _review_cuda_gated_triton(results: list, paths: dict) -> list:
    from .importgates import is_test
    from .modpaths import module_names
    from .moot import is_moot
    from .tritonguards import TRITON_GATED_IMPORTERS, parents, run_imports, tests_triton

    def candidate(f) -> bool:
        return (f.code == "NPU910" and not f.fixable and f.cell is None and f.severity == "info"
                and TRITON_GATED_IMPORTERS in f.message and not is_moot(f))

    todo = [i for i, r in enumerate(results) if r.relpath.endswith(".py") and any(candidate(f) for f in r.findings)]
    if not todo:
        return results
    python = [i for i, r in enumerate(results) if r.relpath.endswith(".py")]
    imports, text_of = run_imports(results, python, paths)
    texts: dict = {}
    trees: dict = {}
    out = list(results)
    for i in todo:
        relpath = results[i].relpath
        names, stem = set(module_names(relpath)), relpath[:-3]
        # (the project's own importers first: the reason names one of them)
        sites = sorted({(j, line) for j in python if j != i for name, line, relative in imports[j]
                        if (relative and name in (stem, stem.removesuffix("/__init__")))
                        or (not relative and name in names)}, key=lambda s: (is_test(results[s[0]].relpath), s))
        where = None
        for j, line in sites:
            if j not in trees:
                data = text_of(j)
                trees[j] = astcache.parse(data) if data else None
            tree = trees[j]
            if tree is None:
                where = None
                break
            parent = parents(tree)
            statements = [n for n in astcache.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and n.lineno == line]
            found = None
            for statement in statements:
                child, current = statement, parent.get(id(statement))
                while current is not None and not isinstance(current, ast.Module):
                    if isinstance(current, ast.If) and child in current.body and tests_triton(current.test):
                        found = _gate_needs_cuda(results, paths, results[j].relpath, tree, current.test, texts)
                        break
                    child, current = current, parent.get(id(current))
                if found is None:
                    break
            if not statements or found is None:
                where = None
                break
            where = where or f"{results[j].relpath}:{line}: {found}"
        if where is None:
            continue
        findings = [_lower(f, f"{CUDA_GATED_TRITON} ({where})") if candidate(f) else f for f in results[i].findings]
        out[i] = dataclasses.replace(results[i], findings=findings)
    return out
