"""Device checks in front of another module's Triton kernels stay CUDA (issue #16 section 1 across
modules, round-22 audit BI#8: vLLM's `if inputs_embeds.is_cuda and ...:` in front of a lazily
imported Triton launcher was widened, sending NPU tensors into the kernel): crossgates22.py."""

from __future__ import annotations

import json

from click.testing import CliRunner

from npu_migrate import crossgates22
from npu_migrate.cli import main
from .precision_helpers import migrate_json, write_project

KERNELS = """\
import torch
import triton
import triton.language as tl


@triton.jit
def _norm_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


def norm_concat(x, y):
    out = torch.empty_like(x)
    _norm_kernel[(1,)](x, x.numel(), BLOCK=128)
    return out


def describe():
    return "fused norm"
"""

PLAIN = """\
def add_one(x):
    return x + 1
"""

MODEL = """\
import torch

from pkg.ops.fused_norm import norm_concat as absolute_norm


def lazy(x, y):
    if x.is_cuda and x.dtype == torch.bfloat16:
        from .ops.fused_norm import norm_concat

        return norm_concat(x, y)
    return torch.cat([x, y])


def by_type(x, y):
    if x.device.type == "cuda":
        return absolute_norm(x, y)
    return torch.cat([x, y])


def by_availability(x, y):
    if torch.cuda.is_available():
        return absolute_norm(x, y)
    return torch.cat([x, y])


def plain(x):
    if x.is_cuda:
        from .ops.plain import add_one

        return add_one(x)
    return x


def not_a_launcher(x):
    if x.is_cuda:
        from .ops.fused_norm import describe

        return describe()
    return x
"""


def _project(tmp_path, model=MODEL):
    return write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/ops/__init__.py": "",
        "pkg/ops/fused_norm.py": KERNELS,
        "pkg/ops/plain.py": PLAIN,
        "pkg/model.py": model,
    })


def _rewritten_lines(report, path="pkg/model.py") -> dict[int, str]:
    return {f["line"]: f["code"] for f in report["findings"] if f["fixable"] and f["path"] == path}


def test_module_bindings_names_kernels_and_launchers_only():
    bound = dict(crossgates22.module_bindings(KERNELS.encode()))
    assert bound["_norm_kernel"] == "a Triton kernel"
    assert "_norm_kernel" in bound["norm_concat"]  # launches it
    assert "describe" not in bound and "torch" not in bound
    assert crossgates22.module_bindings(PLAIN.encode()) == []


def test_checks_in_front_of_another_modules_kernels_are_kept_others_widened(tmp_path):
    report = migrate_json(_project(tmp_path))
    rewritten = _rewritten_lines(report)
    # the three checks guarding the launcher (lazy relative import, absolute import by alias,
    # torch.cuda.is_available()) keep meaning CUDA: the NPU host takes the torch fallback
    assert 7 not in rewritten and 15 not in rewritten and 21 not in rewritten, rewritten
    kept = [s for s in report["skipped"] if s["path"] == "pkg/model.py" and "NPU110" in s["reason"]]
    assert any(s["start_line"] <= 7 <= s["end_line"] for s in kept), report["skipped"]
    # the nearest true cases: a check in front of a plain function of another module, and in front
    # of a function of the kernel module that launches nothing, are still widened
    assert rewritten.get(27) == "NPU106" and rewritten.get(35) == "NPU106", rewritten
    # the kept checks' scopes (one merged NPU110 finding) do not name the rewritten lines between
    # them as left alone (moot.to_scopes: one scope per line around a rewrite)
    assert not [s for s in report["skipped"] if s["path"] == "pkg/model.py"
                and any(s["start_line"] <= line <= s["end_line"] for line in (27, 35))], report["skipped"]


def test_a_kept_check_without_fallback_is_reported_with_the_kernel_it_guards(tmp_path):
    model = """\
from pkg.ops.fused_norm import norm_concat


def strict(x, y):
    if not x.is_cuda:
        raise RuntimeError("needs a GPU tensor")
    return norm_concat(x, y)
"""
    report = migrate_json(_project(tmp_path, model))
    assert 5 not in _rewritten_lines(report)
    finding = next(f for f in report["findings"] if f["path"] == "pkg/model.py" and f["code"] == "NPU110")
    assert finding["line"] == 5
    assert "norm_concat" in finding["message"] and "pkg/ops/fused_norm.py" in finding["message"]


def test_without_the_kernel_module_in_the_run_the_check_is_widened(tmp_path):
    root = _project(tmp_path)
    (root / "pkg/ops/fused_norm.py").write_text(KERNELS.replace("@triton.jit", "@staticmethod"))
    rewritten = _rewritten_lines(migrate_json(root))
    assert {7, 15, 27, 35} <= set(rewritten), rewritten


def test_a_warm_run_gives_the_same_answer_from_the_cache(tmp_path):
    root = _project(tmp_path)
    cache = tmp_path / "cache"
    outputs = []
    for _ in range(2):
        result = CliRunner().invoke(main, ["migrate", str(root), "--dry-run", "--cache-dir", str(cache),
                                           "--isolated", "--allow-dirty", "-j", "1", "--output-format", "json"],
                                    catch_exceptions=False)
        report = json.loads(result.stdout)
        outputs.append((sorted(_rewritten_lines(report).items()), report["skipped"]))
    assert outputs[0] == outputs[1]
    assert 7 not in dict(outputs[1][0])


def test_a_warm_run_hits_the_cache_for_both_migrations_of_a_file(tmp_path):
    """crossgates22 migrates pkg/model.py a second time, with the kernels it imports: the cache
    keeps both results (one per options key), so a warm run migrates nothing again. Before, the
    second result replaced the first and a warm run missed both, every time."""
    from npu_migrate import catalogue
    from npu_migrate.cache import Cache
    from npu_migrate.discover import discover
    from npu_migrate.runplan import make_options, run_engine

    root = _project(tmp_path)
    items = discover(root)
    options = make_options(root, items, catalogue.enabled_codes(), "npu_compat")
    runs = []
    for _ in range(3):
        cache = Cache.open(tmp_path / "cache", root)
        results = run_engine(items, options, cache=cache)
        cache.save(root)
        runs.append((cache.hits, cache.misses, [(r.relpath, r.new, r.findings) for r in results], cache.review_hits))
    (cold_hits, cold_misses, answer, cold_reviews), (hits, misses, warm, reviews), (hits3, misses3, warm3, _r) = runs
    assert cold_hits == 0 and cold_misses == len(items) + 1 and cold_reviews == 0  # model.py twice
    assert (hits, misses) == (hits3, misses3) == (len(items) + 1, 0)
    assert reviews == 1  # (and the whole-run passes' result is reused too)
    assert answer == warm == warm3


def test_check_reports_the_kept_check_too(tmp_path):
    model = MODEL + """

def strict(x, y):
    if not x.is_cuda:
        raise RuntimeError("needs a GPU tensor")
    return absolute_norm(x, y)
"""
    root = _project(tmp_path, model)
    result = CliRunner().invoke(main, ["check", str(root), "--no-cache", "--isolated", "--output-format", "json"],
                                catch_exceptions=False)
    report = json.loads(result.stdout)
    lines = model.splitlines()
    strict = lines.index("    if not x.is_cuda:") + 1
    codes = {(f["line"], f["code"]) for f in report["findings"] if f["path"].endswith("pkg/model.py")}
    assert (strict, "NPU110") in codes, codes
    assert (7, "NPU106") not in codes and (27, "NPU106") in codes, codes


def test_a_name_a_package_init_re_exports_is_followed(tmp_path):
    root = _project(tmp_path, """\
import torch

from .ops import norm_concat


def through_init(x, y):
    if x.is_cuda:
        return norm_concat(x, y)
    return torch.cat([x, y])


def other(x):
    if x.is_cuda:
        return x + 1
    return x
""")
    (root / "pkg/ops/__init__.py").write_text("from .fused_norm import norm_concat\n")
    rewritten = _rewritten_lines(migrate_json(root))
    assert 7 not in rewritten and rewritten.get(13) == "NPU106", rewritten


def test_migrating_for_real_twice_changes_nothing_the_second_time(tmp_path):
    root = _project(tmp_path)
    for _ in range(2):
        result = CliRunner().invoke(main, ["migrate", str(root), "--no-cache", "--isolated", "--allow-dirty",
                                           "-j", "1", "--output-format", "json"], catch_exceptions=False)
        assert result.exit_code in (0, 1), result.output
        report = json.loads(result.stdout)
        assert not report["errors"], report["errors"]
        text = (root / "pkg/model.py").read_text()
        assert "if x.is_cuda and x.dtype == torch.bfloat16:" in text  # the kept check, as written
        assert "npu_compat.on_accelerator(x)" in text  # the widened one
    assert not [f for f in report["findings"] if f["fixable"] and f["path"] == "pkg/model.py"]


# ----------------------------------------------------------------------------- beyond Triton
# A module whose own top-level statements import a package an NPU host never has (flashinfer)
# fails at import there, whatever is taken from it: a device check in front of such an import
# kept NPU tensors (and the import) away from it, and widened it would crash where the original
# took the torch path.
FAILING = """\
import torch
import flashinfer


def fused_sample(logits):
    return flashinfer.sampling.top_k_sampling(logits, 5)
"""

GUARDED = """\
try:
    import flashinfer
except ImportError:
    flashinfer = None


def guarded_sample(logits):
    return flashinfer.sampling.top_k_sampling(logits, 5)
"""

SAMPLER = """\
import torch

import pkg.ops.fused_norm as fn
from pkg.ops import fi_sampler as top_level_failing


def by_module(logits):
    if logits.is_cuda:
        from .ops import fi_sampler

        return fi_sampler.fused_sample(logits)
    return torch.argmax(logits, -1)


def by_name(logits):
    if logits.device.type == "cuda":
        from pkg.ops.fi_sampler import fused_sample

        return fused_sample(logits)
    return torch.argmax(logits, -1)


def guarded_import(logits):
    if logits.is_cuda:
        # (another name than fused_sample: the file's bindings are by name, and a name bound to
        # CUDA-only code anywhere in the file counts in every check)
        from .ops.fi_guarded import guarded_sample

        return guarded_sample(logits)
    return torch.argmax(logits, -1)


def module_alias_launcher(x, y):
    if x.is_cuda:
        return fn.norm_concat(x, y)
    return torch.cat([x, y])


def module_alias_plain(x):
    if x.is_cuda:
        return fn.describe()
    return x
"""


def _sampler_project(tmp_path, sampler=SAMPLER):
    root = _project(tmp_path)
    (root / "pkg/ops/fi_sampler.py").write_text(FAILING)
    (root / "pkg/ops/fi_guarded.py").write_text(GUARDED)
    (root / "pkg/sampler.py").write_text(sampler)
    return root


def test_module_bindings_marks_a_module_failing_at_import():
    assert dict(crossgates22.module_bindings(FAILING.encode())) == {"*": "`flashinfer` imported at module level"}
    # the import under try/except ImportError does not fail the module
    assert crossgates22.module_bindings(GUARDED.encode()) == []
    # a package an NPU host may have (apex has an Ascend build) does not count
    assert crossgates22.module_bindings(FAILING.replace("flashinfer", "apex").encode()) == []


def test_checks_in_front_of_a_module_failing_at_import_are_kept(tmp_path):
    report = migrate_json(_sampler_project(tmp_path))
    rewritten = _rewritten_lines(report, "pkg/sampler.py")
    lines = SAMPLER.splitlines()

    def line_of(name):  # the device check: the line after `def name(`
        return next(i for i, text in enumerate(lines, 1) if text.startswith(f"def {name}(")) + 1

    kept = {line_of("by_module"), line_of("by_name"), line_of("module_alias_launcher")}
    assert not kept & set(rewritten), rewritten
    scopes = [s for s in report["skipped"] if s["path"] == "pkg/sampler.py"]
    for line in kept:
        assert any(s["start_line"] <= line <= s["end_line"] for s in scopes), (line, scopes)
    # the nearest true cases are widened: a module whose flashinfer import is guarded, and a plain
    # function of the kernel module reached through the module's alias
    assert rewritten.get(line_of("guarded_import")) == "NPU106", rewritten
    assert rewritten.get(line_of("module_alias_plain")) == "NPU106", rewritten


def test_an_importer_that_fails_first_at_its_own_top_level_import_is_widened(tmp_path):
    sampler = """\
import torch

from pkg.ops.fi_sampler import fused_sample


def top_level(logits):
    if logits.is_cuda:
        return fused_sample(logits)
    return torch.argmax(logits, -1)
"""
    rewritten = _rewritten_lines(migrate_json(_sampler_project(tmp_path, sampler)), "pkg/sampler.py")
    # the file itself fails at its line-3 import on an NPU host: nothing in it runs there, and a
    # kept check would only add a finding the import's own already covers
    assert rewritten.get(7) == "NPU106", rewritten


def test_a_kept_check_without_fallback_names_the_failing_module(tmp_path):
    sampler = """\
def strict(logits):
    if not logits.is_cuda:
        raise RuntimeError("needs a GPU tensor")
    from .ops.fi_sampler import fused_sample

    return fused_sample(logits)
"""
    report = migrate_json(_sampler_project(tmp_path, sampler))
    assert 2 not in _rewritten_lines(report, "pkg/sampler.py")
    finding = next(f for f in report["findings"] if f["path"] == "pkg/sampler.py" and f["code"] == "NPU110")
    assert "flashinfer" in finding["message"] and "pkg/ops/fi_sampler.py" in finding["message"], finding
