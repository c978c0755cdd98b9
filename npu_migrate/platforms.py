"""Other vendors' platform code, CUDA variants beside an NPU variant, and one config value the
whole project shares: findings the whole run shows to be moot or redundant (issue #16).

* **Another platform's code.** DeepSpeed's `op_builder/hpu/fp_quantizer.py` (Habana),
  `op_builder/xpu/builder.py` (Intel SYCL) and `accelerator/mps_accelerator.py` (Apple), vLLM's
  `models/*/xpu/model.py`, torchao's FlyDSL kernels "for AMD GPUs": an NPU host never loads them
  (the project picks them for their own device). A file is such code when a folder of its path
  is a word of rules/scopes.toml [platforms.words] (`hpu/`; never `rocm_like/`), or a part of its
  stem split on `-_.` is one (a whole part: `amd` in `command` is not one), when it imports at
  module level a module only that vendor ships (`import habana_frameworks.torch`: the file cannot
  even be imported elsewhere), or when the first sentence of its module docstring says it is for
  that platform ("... on ROCm."). A name that also names CUDA, the CPU or the NPU is
  not one.
* **CUDA variants beside an NPU variant.** LLaMA-Factory ships `docker/docker-cuda/` and
  `docker/docker-npu/`: the first is the CUDA variant by design, the second is what an NPU host
  uses. A folder naming cuda/gpu/nvidia whose sibling, with that word replaced by npu/ascend, is a
  folder of the run; so is a file other than a Python module (`tests_cuda.yml` beside
  `tests_npu.yml`, `Dockerfile.cuda` beside `Dockerfile.npu`).

Their report-only findings go to info with the reason (`another platform's code (XPU): ...`,
`the CUDA variant beside ...`), which moot.py turns into named skipped scopes: nothing is
dropped, `--show-skipped` and the JSON `skipped` list name each one. Rewrites stay as they are.

* **One device value in every config.** torchtune has one recipe config per model, each with
  `device: cuda` (NPU706): 154 findings that say one thing. The NPU706 findings of config files
  (YAML, TOML) with the same value make one finding for the run, on the first file in path
  order, which names the others. When the project's own Python code reads that key through a
  device resolver that knows the NPU (a function named for the device, in a file that imports
  torch_npu or names "npu" beside "cuda", called with `cfg.device`), the value works on an NPU
  host as written: the finding is info, and says why (it stays a finding: the code runs there).

* **A project that runs Triton on its NPU.** sglang's own NPU backend
  (`hardware_backend/npu/attention/ascend_backend.py`) calls Triton kernels, and its Mamba and
  speculative-decoding Triton kernels run on Ascend through Triton-Ascend. In a project whose NPU
  backend (a path part `npu`/`ascend`) uses Triton, NPU910 is info ("verify this file's kernels on
  Triton-Ascend"), except in files using what Triton-Ascend does not compile (inline PTX, TMA
  descriptors, CUDA's libdevice, `do_bench_cudagraph`). moot.py names such a file as a scope that
  "runs as written on an NPU host": the project already runs these kernels there, and the round-7
  reviewers read each of the 76 per-file sglang findings as false.

Runs over the whole run's results after wholeprogram.review and before moot.to_scopes
(runplan.run_engine); `results` is not changed, a new list is returned.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Callable, Optional

from . import catalogue
from .findings import Finding
from .model import FileResult
from .modpaths import result_bytes

OTHER_PLATFORM = "another platform's code"
CUDA_VARIANT = "the CUDA variant beside"
MAX_NAMED = 12  # config files named in a folded NPU706 finding; the rest are counted


@functools.lru_cache(maxsize=None)
def _table():
    t = catalogue.read_table("scopes.toml")["platforms"]
    return (
        {k.lower(): v for k, v in t["words"].items()},
        frozenset(w.lower() for w in t["not_words"]),
        dict(t["vendor_modules"]),
        re.compile(t["docstring"]),
        re.compile(t["docstring_not"]),
        tuple(t["variant_words"]),
        tuple(t["npu_variants"]),
    )


def _parts(name: str) -> list[str]:
    return [p for p in re.split(r"[-_.\s]+", name.lower()) if p]


def _named_platform(name: str) -> Optional[str]:
    """The platform a folder name or file stem names (`xpu`, `hpu_accelerator`), or None."""
    words, not_words = _table()[:2]
    parts = _parts(name)
    if not_words.intersection(parts):
        return None
    found = {words[p] for p in parts if p in words}
    return found.pop() if len(found) == 1 else None


def path_platform(relpath: str) -> Optional[str]:
    """`(XPU): a folder named `xpu``-style reason for a file under a folder, or with a stem,
    naming another platform; None otherwise (and for a path that names the NPU anywhere)."""
    parts = relpath.replace("\\", "/").split("/")
    folders, name = parts[:-1], parts[-1]
    npu = _table()[6]
    if any(part.startswith(npu) for part in _parts("_".join(parts))):
        return None
    words = _table()[0]
    for folder in folders:  # a whole folder name (`rocm_like/` is not ROCm's)
        platform = words.get(folder.lower())
        if platform:
            return f"({platform}): in a folder named `{folder}`"
    stem = name.rsplit(".", 1)[0] if "." in name else name
    platform = _named_platform(stem)
    if platform:
        return f"({platform}): a {'module' if name.endswith('.py') else 'file'} named `{name}`"
    return None


_TOP_IMPORT = re.compile(rb"^(?:import|from)[ \t]+([A-Za-z_]\w*)", re.MULTILINE)
_DOCSTRING = re.compile(rb'\A(?:[ \t]*(?:#[^\n]*)?\r?\n)*[ \t]*[rRuU]?("""|\'\'\')(.*?)\1', re.DOTALL)


def content_platform(data: bytes) -> Optional[str]:
    """The reason a Python file's text shows it is another platform's code, or None: an import,
    at module level and outside any `if`/`try`, of a module only that vendor ships; or the first
    sentence of the module docstring saying it is for that platform."""
    vendor_modules, docstring, docstring_not = _table()[2:5]
    for match in _TOP_IMPORT.finditer(data):
        module = match.group(1).decode("ascii", "replace")
        if module in vendor_modules:
            return f"({vendor_modules[module]}): imports `{module}` at module level"
    doc = _DOCSTRING.match(data)
    if doc:
        text = doc.group(2).decode("utf-8", "replace").strip()
        first = re.split(r"\.(?:\s|$)|\n\s*\n", text, maxsplit=1)[0]
        first = " ".join(first.split())
        said = docstring.search(first)
        if said and not docstring_not.search(first):
            return f"({said.group(1)}): its docstring says \"{first[:80]}\""
    return None


def _npu_sibling(path: str, existing: set) -> Optional[str]:
    """`path` with its last name's cuda/gpu/nvidia replaced by npu/ascend (same case), when that
    path is in `existing`; else None."""
    parent, _, name = path.rpartition("/")
    lower = name.lower()
    variant_words, npu_variants = _table()[5:7]
    for word in variant_words:
        at = lower.find(word)
        if at < 0:
            continue
        original = name[at:at + len(word)]
        for npu in npu_variants:
            replaced = npu.upper() if original.isupper() else npu.capitalize() if original[:1].isupper() else npu
            sibling = name[:at] + replaced + name[at + len(word):]
            sibling = f"{parent}/{sibling}" if parent else sibling
            if sibling in existing:
                return sibling
    return None


def _variants(relpaths: list[str]) -> dict[str, str]:
    """CUDA variant (a folder's path with a trailing `/`, or a file's path) -> its NPU sibling,
    among the folders and files of the run. Files only when not Python modules: a CI workflow, a
    Dockerfile, a script (`tests_cuda.yml` beside `tests_npu.yml`); a Python module beside an NPU
    one may still be imported on an NPU host."""
    folders = set()
    for rel in relpaths:
        parts = rel.split("/")[:-1]
        folders.update("/".join(parts[:k]) for k in range(1, len(parts) + 1))
    out = {}
    for folder in folders:
        sibling = _npu_sibling(folder, folders)
        if sibling is not None:
            out[folder + "/"] = sibling + "/"
    files = set(relpaths)
    for rel in relpaths:
        if not rel.endswith((".py", ".pyw", ".ipynb")):
            sibling = _npu_sibling(rel, files)
            if sibling is not None:
                out[rel] = sibling
    return out


def _under(relpath: str, variant: str) -> bool:
    """The file is the variant (a file) or lies in it (a folder, with its trailing `/`)."""
    return relpath == variant or (variant.endswith("/") and relpath.startswith(variant))


def _report_only(finding: Finding) -> bool:
    return not finding.fixable and finding.cell is None and finding.code[3:4] not in ("0", "")


_COPIES = re.compile(r"\(byte-identical cop(?:y|ies): ([^()]*)\)")


def _copies_also(finding: Finding, covered: Callable[[str], bool]) -> bool:
    """A finding that stands for byte-identical copies (textfiles._group_identical_sources) may
    go only when every copy it names is covered too (`and N more`: not all named, so it stays)."""
    for match in _COPIES.finditer(finding.message):
        if re.search(r" and \d+ more$", match.group(1)):
            return False
        if not all(covered(name) for name in re.findall(r"`([^`]+)`", match.group(1))):
            return False
    return True


def _lower(result: FileResult, reason: str, covered: Callable[[str], bool]) -> FileResult:
    from .moot import is_moot

    changed, findings = False, []
    for finding in result.findings:
        if _report_only(finding) and not is_moot(finding) and _copies_also(finding, covered):
            finding = dataclasses.replace(finding, severity="info", message=f"{finding.message} ({reason})")
            changed = True
        findings.append(finding)
    return dataclasses.replace(result, findings=findings) if changed else result


def review(results: list[FileResult], paths: Optional[dict[str, str]] = None) -> list[FileResult]:
    """Lower the report-only findings of other platforms' code and of CUDA variant folders to
    info with their reason; fold the NPU706 findings of config files (see the module docstring)."""
    paths = paths or {}
    out = list(results)
    variants = None
    for i, result in enumerate(results):
        if not any(_report_only(f) for f in result.findings):
            continue
        why = path_platform(result.relpath)
        if why is None and result.relpath.endswith(".py"):
            data = result_bytes(result, paths)
            why = content_platform(data) if data else None
        if why is not None:
            out[i] = _lower(result, f"{OTHER_PLATFORM} {why}", lambda rel: path_platform(rel) is not None)
            continue
        if variants is None:
            variants = _variants([r.relpath for r in results])
        variant = next((v for v in variants if _under(result.relpath, v)), None)
        if variant is not None:
            out[i] = _lower(result, f"{CUDA_VARIANT} `{variants[variant]}`: `{variant}` is the project's CUDA "
                                    "variant, an NPU host uses the other",
                            lambda rel, v=variant: _under(rel, v))
    return triton_on_npu(fold_config_devices(out, paths), paths)


# ------------------------------------------------------------------ a project that runs Triton on its NPU

# What Triton-Ascend does not compile: inline PTX, TMA descriptors, CUDA's libdevice, CUDA-graph
# benchmarking. A file holding one keeps its NPU910 error.
_NOT_PORTABLE = (b"inline_asm", b"asm volatile", b"make_tensor_descriptor", b"_experimental_descriptor",
                 b"TensorDescriptor", b"tl.extra.cuda", b"do_bench_cudagraph", b"cp.async")
_UNGUARDED = re.compile(r"; imported unguarded at module level, so the module fails to import where it is "
                        r"not installed")
TRITON_ON_NPU = "the project runs Triton on its own NPU backend"


def _npu_part(relpath: str) -> bool:
    parts = [p for folder in relpath.split("/") for p in re.split(r"[-_.]", folder.lower())]
    return "npu" in parts or "ascend" in parts


def _triton_backend(results: list[FileResult], paths: dict[str, str]) -> Optional[str]:
    """A Python file of the project's own NPU backend (a path part `npu`/`ascend`) that uses Triton
    (sglang's `hardware_backend/npu/attention/ascend_backend.py` calls Triton kernels): the project
    runs Triton on an NPU host through Triton-Ascend."""
    for result in results:
        if result.relpath.endswith(".py") and _npu_part(result.relpath):
            data = result_bytes(result, paths)
            if data and b"triton" in data and _imports_triton(data):
                return result.relpath
    return None


def _imports_triton(data: bytes) -> bool:
    """The file imports Triton or a Triton kernel by name (`from sgl_kernel_npu.attention import
    attention_sinks_triton`); a mention (DeepSpeed's `def is_triton_supported(self): return False`)
    is not one."""
    import ast

    from . import astcache

    tree = astcache.parse(data)
    if tree is None:
        return False
    for node in astcache.walk(tree):
        if isinstance(node, ast.Import) and any("triton" in a.name for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and ("triton" in (node.module or "")
                                                 or any("triton" in a.name for a in node.names)):
            return True
    return False


def _to_verify(finding: Finding) -> bool:
    """A Triton finding still to verify: an error or warning, or the info tritonguards leaves on a module
    imported only behind a Triton-availability test ("with Triton-Ascend installed these kernels run
    there: verify them", or "its importer's own unguarded Triton import fails first"), which the project's
    own Triton NPU backend answers the same way."""
    from .tritonguards import RESTATED, TRITON_GATED_IMPORTERS

    return finding.severity != "info" or TRITON_GATED_IMPORTERS in finding.message or RESTATED in finding.message


def triton_on_npu(results: list[FileResult], paths: dict[str, str]) -> list[FileResult]:
    """In a project whose own NPU backend runs Triton, its Triton kernels elsewhere are the ones
    that backend shares (sglang runs its Mamba and speculative-decoding kernels on Ascend through
    Triton-Ascend): NPU910 says "verify on Triton-Ascend" at info, not "does not run" at error. A
    file using what Triton-Ascend lacks (inline PTX, TMA descriptors, CUDA's libdevice) keeps it."""
    if not any(f.code == "NPU910" and _to_verify(f) and _report_only(f)
               for r in results for f in r.findings):
        return results
    backend = _triton_backend(results, paths)
    if backend is None:
        return results
    reason = (f"{TRITON_ON_NPU} (`{backend}`): Triton-Ascend compiles its kernels on an NPU host; verify "
              "this file's kernels there")
    out = []
    for result in results:
        targets = [f for f in result.findings if f.code == "NPU910" and _to_verify(f) and _report_only(f)]
        data = result_bytes(result, paths) if targets else None
        probed = None
        if targets and data is not None and any(marker in data for marker in _NOT_PORTABLE):
            from .dominators22 import probed_descriptors  # (TMA descriptors behind a probe: BK#40)

            from .tritonprobes24 import probed_aliases  # (descriptor aliases behind `hasattr` probes: BQ#35)

            probed = probed_descriptors(data, _NOT_PORTABLE) or probed_aliases(data, _NOT_PORTABLE)
            if probed is None:
                out.append(result)
                continue
        if not targets or data is None:
            out.append(result)
            continue
        note = f"{reason}; {probed}" if probed else reason
        findings = [dataclasses.replace(f, severity="info", message=f"{_UNGUARDED.sub('', f.message)} ({note})")
                    if f in targets else f for f in result.findings]
        out.append(dataclasses.replace(result, findings=findings))
    return out


# ------------------------------------------------------------------ one device value in every config

_CONFIG_SUFFIXES = (".yaml", ".yml", ".toml")


def _config_device(finding: Finding, relpath: str) -> bool:
    return (finding.code == "NPU706" and not finding.fixable and finding.severity != "info"
            and relpath.lower().endswith(_CONFIG_SUFFIXES))


def _key_of(finding: Finding) -> str:
    """The key a config finding sets (`device` of `device: cuda`)."""
    match = re.match(r"[\"']?([\w.-]+)", finding.source or "")
    return match.group(1).rsplit(".", 1)[-1] if match else ""


_RESOLVER_DEF = re.compile(rb"^([ \t]*)def[ \t]+(\w*device\w*)[ \t]*\(", re.MULTILINE | re.IGNORECASE)
_NPU_STRING = re.compile(rb"""["']npu["']""")
_CUDA_STRING = re.compile(rb"""["']cuda["']""")
_CONFIG = rb"\b(?:cfg|config|conf|args|opts?|hparams|params|settings)\w*(?:\.|\.get\(\s*[\"']|\[[\"'])"


def _body(data: bytes, match: re.Match) -> bytes:
    """The text of the function whose `def` line `match` is (its extent by indentation: up to
    the next line as little indented that is not a signature's closing bracket or a comment)."""
    indent = len(match.group(1))
    at = data.find(b"\n", match.end())
    while at != -1:
        end = data.find(b"\n", at + 1)
        line = data[at + 1:end if end != -1 else len(data)]
        stripped = line.lstrip(b" \t")
        if stripped and not stripped.startswith((b")", b"#")) and len(line) - len(stripped) <= indent:
            return data[match.start():at]
        at = end
    return data[match.start():]


def _resolvers(texts: dict[str, bytes]) -> dict[str, tuple[str, int]]:
    """{name: (file, line)} of the public functions named for the device that know the NPU: in a
    file that imports torch_npu, or whose own body names "npu" beside "cuda"."""
    found: dict[str, tuple[str, int]] = {}
    for rel, data in sorted(texts.items()):
        if not (b"torch_npu" in data or b"'npu'" in data or b'"npu"' in data) or b"def " not in data:
            continue  # (substring tests first: this runs over every Python file of the run)
        imports_npu = re.search(rb"^[ \t]*(?:import|from)[ \t]+torch_npu\b", data, re.M) is not None
        for match in _RESOLVER_DEF.finditer(data):
            name = match.group(2).decode("ascii", "replace")
            if name.startswith("_") or name.lower() in ("to_device", "set_device"):
                continue
            body = _body(data, match)
            if imports_npu or (_NPU_STRING.search(body) and _CUDA_STRING.search(body)):
                found.setdefault(name, (rel, data.count(b"\n", 0, match.start()) + 1))
    return found


def device_resolver(texts: dict[str, bytes], key: str,
                    resolvers: Optional[dict[str, tuple[str, int]]] = None) -> Optional[str]:
    """Where the project's own code reads config key `key` through a device resolver that knows
    the NPU: `get_device` (pkg/utils/_device.py:151), called as `get_device(device=cfg.device)`
    in recipes/x.py:109; None when no such pair is found."""
    if not key:
        return None
    resolvers = _resolvers(texts) if resolvers is None else resolvers
    word = re.escape(key.encode())
    for name, (where, line) in sorted(resolvers.items()):
        call = re.compile(rb"\b" + re.escape(name.encode()) + rb"\((?:[^()]*?\b" + word + rb"[ \t]*=[ \t]*)?[ \t]*"
                          + _CONFIG + word + rb"\b")
        needle = name.encode() + b"("
        for rel, data in sorted(texts.items()):
            found = call.search(data) if needle in data else None
            if found:
                at = data.count(b"\n", 0, found.start()) + 1
                call_text = " ".join(found.group(0).decode("utf-8", "replace").split())
                return (f"the project reads `{key}` through its device resolver `{name}` ({where}:{line}), "
                        f"which knows \"npu\": `{call_text})` in {rel}:{at}")
    return None


def fold_config_devices(results: list[FileResult], paths: dict[str, str]) -> list[FileResult]:
    """The NPU706 findings of config files, one per run and value (module docstring)."""
    groups: dict[tuple[str, str], list[tuple[int, Finding]]] = {}
    for i, result in enumerate(results):
        for finding in result.findings:
            if _config_device(finding, result.relpath):
                # (by value and key: a file's own "(also at line N)" does not split its group)
                value = re.match(r"[^`]*`([^`]*)`", finding.message)
                group = (value.group(1) if value else finding.message, _key_of(finding))
                groups.setdefault(group, []).append((i, finding))
    if not groups:
        return results
    texts, resolvers = None, None
    out = list(results)
    for (_value, key), members in groups.items():
        members.sort(key=lambda m: (results[m[0]].relpath, m[1].line))
        files = sorted({results[i].relpath for i, _f in members})
        if texts is None:
            texts = {r.relpath: t for r in results if r.relpath.endswith(".py")
                     for t in [result_bytes(r, paths)] if t and b"device" in t}
            resolvers = _resolvers(texts)
        resolver = device_resolver(texts, key, resolvers)
        if len(files) < 2 and resolver is None:
            continue
        first_index, first = members[0]
        extra = ""
        if len(files) > 1:
            others = [f"{results[i].relpath}:{f.line}" for i, f in members[1:]]
            shown = ", ".join(others[:MAX_NAMED])
            more = f" and {len(others) - MAX_NAMED} more" if len(others) > MAX_NAMED else ""
            extra = f"{len(files)} config files set it, reported once for the project; also {shown}{more}"
        if resolver is not None:
            extra = f"{extra}; {resolver}" if extra else resolver
        folded = dataclasses.replace(first, message=f"{first.message} ({extra})",
                                     severity="info" if resolver is not None else first.severity)
        dropped = {(i, id(f)) for i, f in members[1:]}
        for i in {i for i, _f in members}:
            kept = []
            for finding in out[i].findings:
                if i == first_index and finding is first:
                    kept.append(folded)
                elif (i, id(finding)) not in dropped:
                    kept.append(finding)
            out[i] = dataclasses.replace(out[i], findings=kept)
    return out
