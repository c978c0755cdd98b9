"""Round-21 audit, helper h88: CUDA-only modules that only guarded or name-selected imports load
(npu_migrate/lazyimports21.py; audit BF#17, BF#25, BF#39, BH#31). Each false case beside the
nearest true case that keeps its error."""

from __future__ import annotations

from npu_migrate.lazyimports21 import LOADED_ONLY
from tests.precision_helpers import migrate_json, write_project

_PHRASE = LOADED_ONLY.split(":")[0].split(", but ")[1]  # ("no import an NPU host runs by default loads it")

_BACKEND = '''\
from sgl_kernel import merge_state_v2


class FastBackend:
    def __init__(self, runner):
        self.runner = runner

    def merge(self, a, b):
        return merge_state_v2(a, b)
'''

_REGISTRY = '''\
BACKENDS = {}


def register_backend(name):
    def wrap(fn):
        BACKENDS[name] = fn
        return fn
    return wrap


@register_backend("fast3")
def create_fast3_backend(runner):
    from app.layers.fast_backend import FastBackend

    return FastBackend(runner)


@register_backend("plain")
def create_plain_backend(runner):
    return runner
'''

_DRAFT = '''\
class DraftBackendFactory:
    def __init__(self, runner, name):
        self.runner, self.name = runner, name

    def create(self):
        table = {
            "fast3": self._create_fast3_backend,
            "plain": self._create_plain_backend,
        }
        return table[self.name]()

    def _create_fast3_backend(self):
        from app.layers.fast_backend import FastBackend

        return FastBackend(self.runner)

    def _create_plain_backend(self):
        return self.runner
'''


def _by_path(report: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in report["findings"]:
        if not f["fixable"] and f["code"] in ("NPU910", "NPU911"):
            out.setdefault(f["path"], []).append(f)
    return out


def test_backend_imported_only_by_registry_creators_and_name_keyed_methods_is_info(tmp_path):
    root = write_project(tmp_path, {
        "app/__init__.py": "from app import registry\n",
        "app/registry.py": _REGISTRY,
        "app/draft.py": _DRAFT,
        "app/layers/__init__.py": "",
        "app/layers/fast_backend.py": _BACKEND,
    })
    found = _by_path(migrate_json(root))["app/layers/fast_backend.py"]
    assert [f["severity"] for f in found] == ["info"], found
    message = found[0]["message"]
    assert _PHRASE in message and "imported unguarded at module level" not in message
    assert 'app/registry.py:13 in `create_fast3_backend`, registered as `@register_backend("fast3")`' in message
    assert 'app/draft.py:13 in `_create_fast3_backend`, chosen by the "fast3" entry' in message


def test_backend_a_default_module_imports_keeps_its_error(tmp_path):
    # (the nearest true case: a module the package's __init__ loads imports it at module level)
    root = write_project(tmp_path, {
        "app/__init__.py": "from app import registry, runner\n",
        "app/registry.py": _REGISTRY,
        "app/runner.py": "from app.layers.fast_backend import FastBackend\n\nBACKEND = FastBackend\n",
        "app/layers/__init__.py": "",
        "app/layers/fast_backend.py": _BACKEND,
    })
    found = _by_path(migrate_json(root))["app/layers/fast_backend.py"]
    assert [f["severity"] for f in found] == ["error"], found
    assert "imported unguarded at module level" in found[0]["message"]


def test_backend_imported_lazily_by_an_unselected_function_keeps_its_error(tmp_path):
    # (a lazy import in a plain function, which a default path may call: not decided here)
    root = write_project(tmp_path, {
        "app/__init__.py": "from app import registry, runner\n",
        "app/registry.py": _REGISTRY,
        "app/runner.py": ("def build(runner):\n"
                          "    from app.layers.fast_backend import FastBackend\n\n"
                          "    return FastBackend(runner)\n"),
        "app/layers/__init__.py": "",
        "app/layers/fast_backend.py": _BACKEND,
    })
    found = _by_path(migrate_json(root))["app/layers/fast_backend.py"]
    assert [f["severity"] for f in found] == ["error"], found


_CUTE_INIT = '''\
import cutlass.cute as cute


def flash_attn_func(q, k, v):
    return cute.compile(q, k, v)
'''


def _fa4(handler: str) -> str:
    return ("import torch\n\n"
            "try:\n"
            "    from app.vendor.cute import flash_attn_func as _flash_attn_func\n"
            f"except Exception as _e:\n{handler}\n\n\n"
            "def flash_attn(q, k, v):\n"
            "    if _flash_attn_func is None:\n"
            "        raise ImportError('FA4 needs the CuTe DSL')\n"
            "    return _flash_attn_func(q, k, v)\n")


def test_vendored_package_whose_only_importer_degrades_in_try_is_info(tmp_path):
    root = write_project(tmp_path, {
        "app/__init__.py": "from app import fa4\n",
        "app/fa4.py": _fa4("    _flash_attn_func = None"),
        "app/vendor/__init__.py": "",
        "app/vendor/cute/__init__.py": _CUTE_INIT,
    })
    found = _by_path(migrate_json(root))["app/vendor/cute/__init__.py"]
    assert [f["severity"] for f in found] == ["info"], found
    message = found[0]["message"]
    assert "app/fa4.py:4 in a module-level `try`/`except Exception` that binds `_flash_attn_func` instead" in message
    assert "calling what the importer binds in its place" in message


def test_vendored_package_whose_importer_re_raises_keeps_its_error(tmp_path):
    root = write_project(tmp_path, {
        "app/__init__.py": "from app import fa4\n",
        "app/fa4.py": _fa4("    raise ImportError('install the CuTe DSL') from _e"),
        "app/vendor/__init__.py": "",
        "app/vendor/cute/__init__.py": _CUTE_INIT,
    })
    found = _by_path(migrate_json(root))["app/vendor/cute/__init__.py"]
    assert [f["severity"] for f in found] == ["error"], found


_TRITON_QUANT = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _quant_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def quantize(x):
    y = torch.empty_like(x)
    _quant_kernel[(1,)](x, y, x.numel(), BLOCK=1024)
    return y
'''


def _setup(default: str) -> str:
    return (f"def setup_backend(model, impl{default}):\n"
            "    if impl == \"FA3\":\n"
            "        from app.attn.fa3.ops import run_ops\n"
            "    else:\n"
            "        raise ValueError(impl)\n"
            "    return run_ops(model)\n")


def _triton_project(tmp_path, default: str):
    return write_project(tmp_path, {
        "app/__init__.py": "",
        "app/attn/__init__.py": "from app.attn.api import apply_attention\n",
        "app/attn/api.py": ("from app.attn.setup import setup_backend\n\n\n"
                            "def apply_attention(model):\n"
                            "    return setup_backend(model, \"FA3\")\n"),
        "app/attn/setup.py": _setup(default),
        "app/attn/quant/__init__.py": "from app.attn.quant.triton_quant import quantize\n",
        "app/attn/quant/triton_quant.py": _TRITON_QUANT,
        "app/attn/fa3/__init__.py": "from app.attn.fa3.ops import run_ops\n",
        "app/attn/fa3/ops.py": "from app.attn.quant import quantize\n\n\ndef run_ops(model):\n    return quantize(model)\n",
    })


def test_triton_module_reached_only_through_a_name_selected_lazy_import_is_info(tmp_path):
    found = _by_path(migrate_json(_triton_project(tmp_path, ": str")))["app/attn/quant/triton_quant.py"]
    assert [f["severity"] for f in found] == ["info"], found
    assert "app/attn/setup.py:3 in `setup_backend` under `impl == 'FA3'`" in found[0]["message"]


def test_triton_module_whose_selecting_branch_is_the_default_keeps_its_error(tmp_path):
    # (the parameter defaults to the selected name: the default path loads the kernels)
    found = _by_path(migrate_json(_triton_project(tmp_path, "=\"FA3\"")))["app/attn/quant/triton_quant.py"]
    assert [f["severity"] for f in found] == ["error"], found


def _opt_in_project(tmp_path, default: str):
    return write_project(tmp_path, {
        "app/__init__.py": "from app import args, worker\n",
        "app/args.py": ("import dataclasses\n\n\n@dataclasses.dataclass\nclass ServerArgs:\n"
                        f"    enable_fast_draft: bool = {default}\n"),
        "app/worker.py": ("def create_worker(server_args):\n"
                          "    if server_args.enable_fast_draft:\n"
                          "        from app.fast_worker import FastWorker\n\n"
                          "        return FastWorker\n"
                          "    return None\n"),
        "app/fast_worker.py": ("class FastWorker:\n"
                               "    def init_backend(self):\n"
                               "        from app.layers.fast_backend import FastBackend\n\n"
                               "        return FastBackend(self)\n"),
        "app/layers/__init__.py": "",
        "app/layers/fast_backend.py": _BACKEND,
    })


def test_backend_loaded_only_by_a_worker_behind_a_false_default_flag_is_info(tmp_path):
    found = _by_path(migrate_json(_opt_in_project(tmp_path, "False")))["app/layers/fast_backend.py"]
    assert [f["severity"] for f in found] == ["info"], found
    assert ("app/worker.py:3 in `create_worker` under the opt-in `server_args.enable_fast_draft` (False by default)"
            in found[0]["message"])


def test_backend_loaded_by_a_worker_behind_a_true_default_flag_keeps_its_error(tmp_path):
    found = _by_path(migrate_json(_opt_in_project(tmp_path, "True")))["app/layers/fast_backend.py"]
    assert [f["severity"] for f in found] == ["error"], found


def test_backend_behind_the_instance_own_flag_keeps_its_error(tmp_path):
    # (`self.x` is the instance's state, set from a call: a field `x: bool = False` elsewhere of
    # the same name is not its default)
    root = write_project(tmp_path, {
        "app/__init__.py": "from app import args, model\n",
        "app/args.py": "import dataclasses\n\n\n@dataclasses.dataclass\nclass Args:\n    is_parallel: bool = False\n",
        "app/model.py": ("def parallel_enabled():\n    return True\n\n\n"
                         "class Model:\n"
                         "    def __init__(self):\n"
                         "        self.is_parallel = parallel_enabled()\n"
                         "        if self.is_parallel:\n"
                         "            from app.layers.fast_backend import FastBackend\n\n"
                         "            self.backend = FastBackend(self)\n"),
        "app/layers/__init__.py": "",
        "app/layers/fast_backend.py": _BACKEND,
    })
    found = _by_path(migrate_json(root))["app/layers/fast_backend.py"]
    assert [f["severity"] for f in found] == ["error"], found


def test_backend_behind_a_parameter_false_by_default_is_info(tmp_path):
    root = write_project(tmp_path, {
        "app/__init__.py": "from app import runner\n",
        "app/runner.py": ("def build(runner, use_fast_backend=False):\n"
                          "    if use_fast_backend:\n"
                          "        from app.layers.fast_backend import FastBackend\n\n"
                          "        return FastBackend(runner)\n"
                          "    return runner\n"),
        "app/layers/__init__.py": "",
        "app/layers/fast_backend.py": _BACKEND,
    })
    found = _by_path(migrate_json(root))["app/layers/fast_backend.py"]
    assert [f["severity"] for f in found] == ["info"], found
    assert "app/runner.py:3 in `build` under the opt-in `use_fast_backend` (False by default)" in found[0]["message"]
