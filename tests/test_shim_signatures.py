"""The shim matches the real torch_npu, call by call (issue #16, section 3).

Every name the shim forwards (``npu_compat.X`` -> ``torch.cuda.X`` / ``torch.npu.X``) is compared:
the parameters of the real ``torch.cuda`` object in the installed torch against the parameters the
API table (rules/torch_npu_api.json, read from the real wheels) records for each supported
torch_npu version. Where they differ, the shim adapts the call (``_NPU_PARAMETERS``) or the rule
reports the name (rules/cuda_api.toml: not in [shared]). Then the adapters are run against the fake
torch_npu, whose signatures must equal the real ones.
"""

from __future__ import annotations

import importlib
import inspect
import json
import textwrap

import pytest
import torch

from npu_migrate import catalogue, npu_api
from tests.shim_fixtures import FAKE_NPU, check, run_python

shim = importlib.import_module("npu_migrate.shim")
VERSIONS = npu_api.versions()
KEYWORD_KINDS = ("positional_or_keyword", "keyword_only")


def _forwarded():
    """(shim name, the torch.cuda object, its torch_npu qualified name) of every forwarded callable."""
    out = [(n, getattr(torch.cuda, n), "torch_npu.npu." + n) for n in shim.SHARED_NAMES]
    out += [(n, getattr(torch.cuda.amp, n), "torch_npu.npu.amp." + n) for n in shim.AMP_NAMES]
    return out


def _cuda_params(obj):
    return [(p.name, p.kind.name.lower(), p.default) for p in inspect.signature(obj).parameters.values()]


def _npu_params(qualname, version):
    """[(name, kind, has_default)] for ``version``, or None when torch_npu lacks the name."""
    entry = npu_api.lookup(qualname)
    if entry is None or version not in entry["versions"]:
        return None
    assert "params" in entry, f"{qualname}: the table has no parameters for it"
    return [
        (p["name"], p.get("kind", "positional_or_keyword"), "default" in p)
        for p in entry["params"]
        if version in p.get("versions", entry["versions"])
    ]


def _binds_alike(cuda, npu):
    """A call written for ``cuda`` means the same with ``npu``: the same positional parameters in
    the same order, every CUDA keyword accepted, no NPU parameter left without a value."""
    npu_any_keyword = any(kind == "var_keyword" for _, kind, _ in npu)
    npu_positional = [n for n, kind, _ in npu if kind in ("positional_only", "positional_or_keyword")]
    cuda_positional = [n for n, kind, _ in cuda if kind in ("positional_only", "positional_or_keyword")]
    if cuda_positional != npu_positional[: len(cuda_positional)]:
        return False
    npu_keywords = {n for n, kind, _ in npu if kind in KEYWORD_KINDS}
    for name, kind, _ in cuda:
        if kind in KEYWORD_KINDS and name not in npu_keywords and not npu_any_keyword:
            return False
    cuda_names = {n for n, _, _ in cuda}
    return all(has_default or kind.startswith("var_") or name in cuda_names for name, kind, has_default in npu)


def _classify():
    """{version: {name: "same" | "adapted" | "reported"}}; AssertionError for an uncovered difference."""
    api = catalogue.cuda_api()
    rewritten = set(api["shared"]["names"]) | set(api["amp"]["names"])  # NPU201 / NPU401
    result = {}
    for version in VERSIONS:
        out = result[version] = {}
        for name, obj, qualname in _forwarded():
            cuda, npu = _cuda_params(obj), _npu_params(qualname, version)
            if npu is not None and [(n, k) for n, k, _ in cuda] == [(n, k) for n, k, _ in npu]:
                out[name] = "same"
            elif npu is not None and name not in shim._NPU_PARAMETERS and _binds_alike(cuda, npu):
                out[name] = "same"  # e.g. custom_fwd(fwd=None, **kwargs) takes cast_inputs=
            elif npu is not None and name in shim._NPU_PARAMETERS:
                out[name] = "adapted"
            elif name not in rewritten:  # NPU202: the rule reports torch.cuda.<name>, never rewrites it
                out[name] = "reported"
            else:
                raise AssertionError(f"torch_npu {version} {name}: CUDA {cuda} vs NPU {npu}: adapt it "
                                     "in the shim's _NPU_PARAMETERS or report it in rules/cuda_api.toml")
    return result


def test_every_forwarded_name_is_compared_and_each_difference_is_covered():
    classified = _classify()
    forwarded = {name for name, _, _ in _forwarded()}
    for version in VERSIONS:
        assert set(classified[version]) == forwarded
    # what the torch_npu 2.7.1 wheel shows (issue #16): these must be seen as different
    v271 = classified["2.7.1"]
    for name in ("GradScaler", "get_device_name", "is_bf16_supported", "can_device_access_peer",
                 "StreamContext"):
        assert v271[name] == "adapted", name
    for name in ("ExternalStream", "get_per_process_memory_fraction", "host_memory_stats",
                 "host_memory_stats_as_nested_dict", "reset_peak_host_memory_stats",
                 "reset_accumulated_host_memory_stats"):
        assert _npu_params("torch_npu.npu." + name, "2.7.1") is None, name
        assert v271[name] == "reported", name
    assert v271["synchronize"] == v271["custom_fwd"] == "same"


def test_every_adapter_lists_torch_cuda_parameters_exactly():
    """The adapters' CUDA side is the real torch.cuda signature: names, order and defaults."""
    forwarded = {name: obj for name, obj, _ in _forwarded()}
    for name, spec in shim._NPU_PARAMETERS.items():
        cuda = _cuda_params(forwarded[name])
        assert [c for c, _, _ in spec] == [n for n, _, _ in cuda], name
        for (cuda_name, _, default), (_, _, real) in zip(spec, cuda, strict=True):
            if default is shim._REQUIRED:
                assert real is inspect.Parameter.empty, (name, cuda_name)
            elif default is not shim._ANY:
                assert default == real, (name, cuda_name, default, real)


def test_every_adapter_reaches_a_real_torch_npu_parameter():
    """Each torch_npu name an adapter passes exists in some supported version, and no torch_npu
    parameter without a default is left without a value."""
    qualnames = {name: qualname for name, _, qualname in _forwarded()}
    for name, spec in shim._NPU_PARAMETERS.items():
        versions = [v for v in VERSIONS if _npu_params(qualnames[name], v) is not None]
        assert versions, name
        known = set()
        for version in versions:
            npu = _npu_params(qualnames[name], version)
            known |= {n for n, _, _ in npu}
            passed = {npu_name for _, npu_name, _ in spec}
            required = [n for n, kind, has_default in npu if not has_default and not kind.startswith("var_")]
            assert set(required) <= passed, (name, version, required)
        for cuda_name, npu_name, default in spec:
            # a name torch_npu never has is only dropped when it is the CUDA default
            assert npu_name in known or default is not shim._REQUIRED, (name, cuda_name)


def test_figures_per_version(capsys):
    classified = _classify()
    with capsys.disabled():
        for version in VERSIONS:
            counts = {k: sum(1 for v in classified[version].values() if v == k) for k in ("same", "adapted", "reported")}
            print(f"\ntorch_npu {version}: {len(classified[version])} forwarded names compared: {counts}")
    assert all(classified[v]["GradScaler"] == "adapted" for v in VERSIONS)


# ------------------------------------------------------------------------------------------------
# The fake torch_npu has the real signatures


FAKE_SIGNATURES = textwrap.dedent(
    """
    import inspect, json, sys, torch, torch_npu
    amp = sys.modules["torch_npu.npu.amp"]
    out = {}
    for prefix, module in (("torch_npu.npu.", torch_npu.npu), ("torch_npu.npu.amp.", amp)):
        for name, obj in vars(module).items():
            if name.startswith("_") or not callable(obj) or getattr(obj, "__module__", "").split(".")[0] != "torch_npu":
                continue
            try:
                params = inspect.signature(obj).parameters.values()
            except (TypeError, ValueError):
                continue
            out[prefix + name] = [[p.name, p.kind.name.lower()] for p in params]
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize("version", ["2.7.1", "2.14.0"])
def test_fake_torch_npu_signatures_equal_the_real_ones(version, tmp_path):
    out = check(run_python(FAKE_SIGNATURES, path=[FAKE_NPU], cwd=tmp_path,
                           env={"FAKE_TORCH_NPU_VERSION": version}))
    fake = json.loads(out.strip().splitlines()[-1])
    assert "torch_npu.npu.get_device_name" in fake and "torch_npu.npu.amp.GradScaler" in fake
    wrong = {}
    for qualname, params in fake.items():
        entry = npu_api.lookup(qualname)
        if entry is None or "params" not in entry:
            continue  # names are checked by tests/test_shim.py; a class without a constructor
        real = _npu_params(qualname, version)
        if real is None:
            continue
        if [tuple(p) for p in params] != [(n, k) for n, k, _ in real]:
            wrong[qualname] = (params, real)
    assert not wrong


# ------------------------------------------------------------------------------------------------
# The adapters on the NPU path (fake torch_npu), and the CUDA path unchanged

ADAPTERS = textwrap.dedent(
    """
    import pickle, sys, torch, torch_npu, npu_compat as s
    amp = sys.modules["torch_npu.npu.amp"]
    def calls(name):
        return [c for c in torch_npu.calls if c[0] == name]
    def error(call):
        try:
            call()
        except (TypeError, AttributeError) as exc:
            return type(exc).__name__ + ": " + str(exc)
        return "no error"
    # GradScaler: CUDA's 5th positional is enabled (torch_npu's is dynamic)
    scaler = s.GradScaler(1024.0, 2.0, 0.5, 100, False)
    print("scaler", scaler.enabled, scaler.init_scale, isinstance(scaler, amp.GradScaler))
    print("scaler-isinstance", isinstance(amp.GradScaler(), s.GradScaler), issubclass(amp.GradScaler, s.GradScaler))
    print("scaler-same", s.GradScaler is s.GradScaler, pickle.loads(pickle.dumps(s.GradScaler)) is s.GradScaler)
    print("grad_scaler", s.grad_scaler(8.0, 2.0, 0.5, 10, False).enabled)
    print("too-many", error(lambda: s.GradScaler(1.0, 2.0, 0.5, 10, True, True)))
    print("unknown", error(lambda: s.GradScaler(dynamic=False)))
    # keywords renamed
    print("name", s.get_device_name(device=1), calls("get_device_name")[-1][1])
    print("peer", s.can_device_access_peer(device=0, peer_device=1), calls("can_device_access_peer")[-1][1])
    print("bf16", s.is_bf16_supported(including_emulation=False), s.is_bf16_supported(), calls("is_bf16_supported")[-1][1])
    stream = s.Stream()
    with s.StreamContext(stream=stream) as entered:
        print("ctx", entered is stream, isinstance(s.StreamContext(stream), torch.npu.StreamContext))
    event = s.Event(True, False, False, False)
    print("event", isinstance(event, torch.npu.Event), isinstance(torch.npu.Event(), s.Event))
    print("event-external", error(lambda: s.Event(external=True)))
    print("snapshot", s.memory_snapshot(), error(lambda: s.memory_snapshot(include_traces=False)))
    # names torch_npu lacks in this version
    print("absent", hasattr(s, "host_memory_stats"), error(lambda: s.get_per_process_memory_fraction))
    print("backend", s.dist_backend(None), s.dist_backend())
    print("env", *(s.env_name(n) for n in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT",
                                          "CUDA_VISIBLE_DEVICES")))
    print("capable", s.is_bf16_capable(), s.get_device_capability() >= (8, 0))
    """
)


def _lines(out):
    return dict(line.split(" ", 1) for line in out.strip().splitlines())


@pytest.fixture()
def shim_dir(tmp_path):
    from tests.shim_fixtures import install_shim

    install_shim(tmp_path)
    return tmp_path


def test_adapters_on_torch_npu_2_7_1(shim_dir):
    out = _lines(check(run_python(ADAPTERS, path=[shim_dir, FAKE_NPU], cwd=shim_dir)))
    assert out["scaler"] == "False 1024.0 True"  # enabled=False reached torch_npu as enabled
    assert out["scaler-isinstance"] == "True True"
    assert out["scaler-same"] == "True True"
    assert out["grad_scaler"] == "False"
    assert out["too-many"].startswith("TypeError: GradScaler() takes at most 5 positional")
    assert out["unknown"] == "TypeError: GradScaler() got an unexpected keyword argument 'dynamic'"
    assert out["name"] == "Ascend910B-fake (1,)"
    assert out["peer"] == "True (0, 1)"
    assert out["bf16"] == "True True ()"  # 2.7.1 has no parameter: the NPU's own answer
    assert out["ctx"] == "True True"
    assert out["event"] == "True True"
    assert out["event-external"].startswith("TypeError: Event(): torch_npu has no counterpart of CUDA's external=True")
    assert out["snapshot"].startswith("[] TypeError: memory_snapshot(): torch_npu has no counterpart")
    assert out["absent"].startswith("False AttributeError: torch_npu 2.7.1")
    assert "get_per_process_memory_fraction" in out["absent"]
    assert out["backend"] == "None hccl"
    assert out["env"] == "HCCL_ASYNC_ERROR_HANDLING HCCL_BLOCKING_WAIT ASCEND_RT_VISIBLE_DEVICES"
    assert out["capable"] == "True False"  # capability (0, 0) would have chosen float32


def test_adapters_on_torch_npu_2_14_0(shim_dir):
    probe = ADAPTERS + 'print("fraction", s.get_per_process_memory_fraction(0))\n'
    out = _lines(check(run_python(probe, path=[shim_dir, FAKE_NPU], cwd=shim_dir,
                                  env={"FAKE_TORCH_NPU_VERSION": "2.14.0"})))
    assert out["bf16"] == "True True (False,)"  # 2.14.0 takes including_emulation: passed on
    assert out["fraction"] == "1.0"
    assert out["env"] == "TORCH_HCCL_ASYNC_ERROR_HANDLING TORCH_HCCL_BLOCKING_WAIT ASCEND_RT_VISIBLE_DEVICES"
    assert out["scaler"] == "False 1024.0 True"


def test_unknown_names_do_not_detect_the_accelerator(shim_dir):
    check(run_python("""
        import sys, npu_compat as s
        assert not hasattr(s, "no_such_thing") and not hasattr(s, "CUDAGraph")
        assert "torch_npu" not in sys.modules and s._forwards is None
        s.synchronize
        assert "torch_npu" in sys.modules and s._forwards is not None
    """, path=[shim_dir, FAKE_NPU], cwd=shim_dir))


def test_cpu_path_is_the_torch_cuda_objects_and_sees_patches(shim_dir):
    check(run_python("""
        import torch, unittest.mock, npu_compat as s
        for name in s.SHARED_NAMES:
            assert getattr(s, name) is getattr(torch.cuda, name), name
        for name in s.AMP_NAMES:
            assert getattr(s, name) is getattr(torch.cuda.amp, name), name
        assert s.dist_backend(None) is None and s.dist_backend() == "nccl"
        assert s.env_name("TORCH_NCCL_BLOCKING_WAIT") == "TORCH_NCCL_BLOCKING_WAIT"
        with unittest.mock.patch("torch.cuda.synchronize") as fake:  # patched after the first access
            s.synchronize()
        assert fake.call_count == 1
        try:
            torch.cuda.get_device_capability()
            expected = None
        except Exception as exc:
            expected = type(exc)
        try:
            s.is_bf16_capable()
            got = None
        except Exception as exc:
            got = type(exc)
        assert got is expected  # no CUDA here: the same error as the original comparison
    """, path=[shim_dir], cwd=shim_dir))


def test_env_versions_match_the_table():
    table = catalogue.env_table()["rename_by_version"]
    assert shim.LEGACY_ENV_NAMES == table["legacy"]
    assert set(shim.LEGACY_ENV_NAMES) <= set(shim.ENV_NAMES)
    since = tuple(int(x) for x in table["torch_names_since"].split(".")[:2])
    assert shim.TORCH_HCCL_NAMES_SINCE == since
    assert table["torch_names_since"] in VERSIONS  # a version whose wheel was read
