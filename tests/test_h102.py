"""The project's NPU defaults decide more than its backend registry (issue #16, round-24 audit
BP#18, round-23 BL#35, round-22 BK#33): npu_migrate/npudefaults24.py, called from dispatch.gates
and lazyimports21. Each false case beside the nearest true one that must stay reported."""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, scopes_at, write_project

# an NPU defaults function in the project's NPU layer: it overrides the attention backend
_NPU_DEFAULTS = """\
def set_default_server_args(args):
    \"\"\"Defaults on an NPU host.\"\"\"
    args.attention_backend = "ascend"
    if args.page_size is None:
        args.page_size = 128
"""

# ... and one that only fills it in where the user left it unset
_NPU_FILL_IN = """\
def set_default_server_args(args):
    \"\"\"Defaults on an NPU host.\"\"\"
    if args.attention_backend is None:
        args.attention_backend = "ascend"
"""

_REGISTRY = """\
BACKENDS = {}


def register_attention_backend(name):
    def decorator(fn):
        BACKENDS[name] = fn
        return fn

    return decorator


@register_attention_backend("ascend")
def create_ascend_backend(runner):
    from pkg.attn.ascend_backend import AscendBackend

    return AscendBackend(runner)


@register_attention_backend("flashmla")
def create_flashmla_backend(runner):
    from pkg.mla.kernels import decode

    return decode


@register_attention_backend("triton")
def create_triton_backend(runner):
    return None
"""

_SERVER_ARGS = """\
import os

DETERMINISTIC_CHOICES = {choices}


class ServerArgs:
    attention_backend = None
    page_size = None
    enable_deterministic = False
    tp_size = 1

    def __post_init__(self):
{calls}

    def _handle_npu_backends(self):
        if self.device == "npu":
            from pkg.hw.npu.utils import set_default_server_args

            set_default_server_args(self)

    def _handle_deterministic(self):
        if self.enable_deterministic:
            os.environ["NCCL_ASYNC_ERROR_HANDLING"] = "1"
            if self.attention_backend is None:
                self.attention_backend = "triton"
            elif self.attention_backend not in DETERMINISTIC_CHOICES:
                raise ValueError(f"unsupported attention backend {{self.attention_backend}}")

            if self.tp_size > 1:
                os.environ["NCCL_ALGO"] = "allreduce:tree"
"""

_IN_ORDER = "        self._handle_npu_backends()\n        self._handle_deterministic()"
_CHOICES = '["flashinfer", "fa3", "triton"]'
_ALGO_LINE = 31  # `os.environ["NCCL_ALGO"] = ...` in _SERVER_ARGS
_ASYNC_LINE = 24  # the NCCL variable set before the check


def _project(tmp_path, defaults: str = _NPU_DEFAULTS, calls: str = _IN_ORDER, choices: str = _CHOICES,
             extra: dict | None = None, extra_class: str = ""):
    files = {
        "pkg/__init__.py": "",
        "pkg/hw/__init__.py": "",
        "pkg/hw/npu/__init__.py": "",
        "pkg/hw/npu/utils.py": defaults,
        "pkg/attn/__init__.py": "",
        "pkg/attn/registry.py": _REGISTRY,
        "pkg/attn/ascend_backend.py": "class AscendBackend:\n    def __init__(self, runner):\n        self.runner = runner\n",
        "pkg/server_args.py": _SERVER_ARGS.format(choices=choices, calls=calls) + extra_class,
        **(extra or {}),
    }
    return migrate_json(write_project(tmp_path, files))


# ------------------------------------------------------------------ BL#35 / BK#33: a check raising on the forced value


def test_a_variable_set_after_a_check_that_rejects_the_npu_default_is_a_named_scope(tmp_path):
    report = _project(tmp_path)
    assert _ALGO_LINE not in findings_at(report, "pkg/server_args.py", "NPU602")
    reason = scopes_at(report, "pkg/server_args.py", "NPU602")[_ALGO_LINE]
    assert "DETERMINISTIC_CHOICES" in reason and '"ascend"' in reason
    assert "pkg/hw/npu/utils.py:3" in reason and "overrides the user's choice" in reason
    assert "`__post_init__` calls `_handle_npu_backends`" in reason
    # the variable set before the check runs on an NPU host: it stays
    assert _ASYNC_LINE in findings_at(report, "pkg/server_args.py", "NPU602")


def test_a_check_whose_choices_hold_the_npu_default_keeps_the_variable(tmp_path):
    report = _project(tmp_path, choices='["ascend", "fa3", "triton"]')
    assert _ALGO_LINE in findings_at(report, "pkg/server_args.py", "NPU602")


def test_defaults_that_only_fill_in_an_unset_backend_keep_the_variable(tmp_path):
    # (the user's explicit choice stands there: "fa3" passes the check)
    report = _project(tmp_path, defaults=_NPU_FILL_IN)
    assert _ALGO_LINE in findings_at(report, "pkg/server_args.py", "NPU602")


def test_a_check_run_before_the_npu_defaults_keeps_the_variable(tmp_path):
    report = _project(tmp_path, calls="        self._handle_deterministic()\n        self._handle_npu_backends()")
    assert _ALGO_LINE in findings_at(report, "pkg/server_args.py", "NPU602")


_ADJUST = """

    def is_backend_unset(self):
        return self.attention_backend is None

    def _handle_model_adjustments(self):
        if self.is_backend_unset():
            self.attention_backend = "fa3"
        if self.attention_backend == "fa3" and self.page_size == 1:
            self.attention_backend = "triton"
"""

_ADJUST_ALWAYS = """

    def _handle_model_adjustments(self):
        if self.page_size == 1:
            self.attention_backend = "triton"
"""

_WITH_ADJUST = "        self._handle_npu_backends()\n        self._handle_model_adjustments()\n        self._handle_deterministic()"


def test_a_method_between_that_writes_the_field_only_where_it_is_unset_keeps_the_scope(tmp_path):
    report = _project(tmp_path, calls=_WITH_ADJUST, extra_class=_ADJUST)
    assert _ALGO_LINE + 1 in scopes_at(report, "pkg/server_args.py", "NPU602")


def test_a_method_between_that_may_write_another_value_keeps_the_variable(tmp_path):
    # (a user's `page_size` turns the backend to "triton", which the check accepts)
    report = _project(tmp_path, calls=_WITH_ADJUST, extra_class=_ADJUST_ALWAYS)
    assert _ALGO_LINE + 1 in findings_at(report, "pkg/server_args.py", "NPU602")


# ------------------------------------------------------------------ BP#18: ways in backends the defaults never select

_KERNELS = {
    "pkg/mla/__init__.py": "",
    "pkg/mla/kernels.py": "from sgl_kernel import mla_decode\n\n\ndef decode(q):\n    return mla_decode(q)\n",
    "pkg/spec/__init__.py": "",
    "pkg/spec/worker.py": (
        "class MultiLayerWorker:\n"
        "    def init_attention_backend(self, runner):\n"
        "        from pkg.mla.kernels import decode\n\n"
        "        self.decode = decode\n"),
    "pkg/spec/select.py": (
        "class Options:\n"
        "    enable_multi_layer: bool = False\n\n\n"
        "def create_worker(server_args):\n"
        "    if server_args.enable_multi_layer:\n"
        "        from pkg.spec.worker import MultiLayerWorker\n\n"
        "        return MultiLayerWorker\n"
        "    return None\n"),
}


def test_a_module_loaded_by_an_unselected_backend_names_the_npu_default_and_keeps_the_open_way(tmp_path):
    report = _project(tmp_path, extra=_KERNELS)
    finding = findings_at(report, "pkg/mla/kernels.py", "NPU911")[1]
    assert finding["severity"] == "info"
    message = finding["message"]
    # the way a user can still take on an NPU host comes first
    assert message.index("pkg/spec/select.py:7") < message.index("ways the NPU defaults close: ")
    assert ('pkg/attn/registry.py:21 under `@register_attention_backend("flashmla")`, while an NPU host selects '
            '"ascend" (pkg/hw/npu/utils.py:3), assigned unconditionally there') in message


def test_without_npu_defaults_the_registered_way_is_listed_as_before(tmp_path):
    report = _project(tmp_path, defaults=_NPU_FILL_IN, extra=_KERNELS)
    message = findings_at(report, "pkg/mla/kernels.py", "NPU911")[1]["message"]
    assert "the NPU defaults close" not in message
    assert 'registered as `@register_attention_backend("flashmla")`' in message
