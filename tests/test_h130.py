"""Round-28 audit, opt-in code (policy P1): code a benchmark reaches only through a command-line
choice whose default is off is info naming the choice (npu_migrate/optin27.py, extended by h130).
Each false case is paired with its nearest true case, which stays an error."""

from __future__ import annotations

from .precision_helpers import migrate_json, write_project

# CB#1: `if dist == "fp8":` in a helper every call of which passes `args.dist`, `--dist` defaulting
# to another value
VALUE_CHOICE = """\
import argparse

import torch


def make_logits(rows: int, dist: str):
    base = torch.randn(rows, 64, device="cuda")
    if dist == "fp8":
        return torch.cuda.CUDAGraph()
    return base


def make_inputs(rows: int, args):
    return make_logits(rows, args.dist)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--dist", choices=("indexer", "fp8", "randn"), default="indexer")
    args = parser.parse_args()
    print(make_inputs(args.rows, args))


if __name__ == "__main__":
    main()
"""

# the nearest true case: the same option, but its default is the value the branch tests
VALUE_DEFAULT = VALUE_CHOICE.replace('default="indexer"', 'default="fp8"')

# and another: a call that passes the value itself, unconditionally
VALUE_LITERAL = VALUE_CHOICE.replace("    return make_logits(rows, args.dist)",
                                     "    make_logits(rows, \"fp8\")\n    return make_logits(rows, args.dist)")

# CB#19: the flag reaches the guarded function through a parameter with no default, always passed
# from a store_true option
REQUIRED_FLAG = """\
import argparse

import torch


def main(n: int, do_profile: bool) -> None:
    def run(iters: int, profile: bool = False) -> None:
        if profile:
            torch.cuda.cudart().cudaProfilerStart()
        for _ in range(iters):
            torch.randn(n, device="cuda")

    run(3, profile=False)
    if do_profile:
        run(1, profile=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    main(args.n, do_profile=args.profile)
"""

# the nearest true case: the same required parameter, passed True by a second, plain call
REQUIRED_TRUE = REQUIRED_FLAG.replace("    main(args.n, do_profile=args.profile)",
                                      "    main(args.n, do_profile=args.profile)\n    main(args.n, True)")

# CB#1's line 75: a helper every call of which lies under `if args.graph:` (store_true)
CALLED_UNDER_OPTION = """\
import argparse

import torch


def capture(fn):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def bench(args, fn):
    fn()
    if args.graph:
        graph = capture(fn)
        graph.replay()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--graph", action="store_true")
    args = parser.parse_args()
    bench(args, lambda: torch.randn(8, device="cuda"))
"""

# the nearest true case: the same helper, also called outside the option's branch
CALLED_ALWAYS = CALLED_UNDER_OPTION.replace("    fn()\n    if args.graph:", "    capture(fn)\n    if args.graph:")

# the nearest true case of a helper: a library module (no `__main__` block) whose helper another
# module may call, though this file calls it only under the option
CALLED_LIBRARY = CALLED_UNDER_OPTION.replace('if __name__ == "__main__":\n', "def cli():\n")


def _errors(report, path, code):
    return [f for f in report["findings"] if not f["fixable"] and f["path"] == path and f["code"] == code]


def test_value_option_whose_default_is_off_is_opt_in_info(tmp_path):
    root = write_project(tmp_path, {"benchmarks/bench_choice.py": VALUE_CHOICE,
                                    "benchmarks/bench_default.py": VALUE_DEFAULT,
                                    "benchmarks/bench_literal.py": VALUE_LITERAL})
    report = migrate_json(root)
    opt = _errors(report, "benchmarks/bench_choice.py", "NPU202")
    assert opt and all(f["severity"] == "info" for f in opt), opt
    assert "reached on an NPU host only when `--dist fp8` is chosen" in opt[0]["message"]
    assert "whose default is 'indexer'" in opt[0]["message"]
    for kept in ("benchmarks/bench_default.py", "benchmarks/bench_literal.py"):
        found = _errors(report, kept, "NPU202")
        assert found and found[0]["severity"] == "error", (kept, found)


def test_required_parameter_set_only_from_a_store_true_option_is_info(tmp_path):
    root = write_project(tmp_path, {"benchmarks/bench_req.py": REQUIRED_FLAG,
                                    "benchmarks/bench_true.py": REQUIRED_TRUE})
    report = migrate_json(root)
    opt = _errors(report, "benchmarks/bench_req.py", "NPU202")
    assert opt and opt[0]["severity"] == "info", opt
    assert "only when `--profile` is chosen" in opt[0]["message"]
    assert "`do_profile` of `main` is False unless set from `args.profile`" in opt[0]["message"]
    kept = _errors(report, "benchmarks/bench_true.py", "NPU202")
    assert kept and kept[0]["severity"] == "error", kept


def test_helper_called_only_under_a_store_true_option_is_info(tmp_path):
    root = write_project(tmp_path, {"benchmarks/bench_graph.py": CALLED_UNDER_OPTION,
                                    "benchmarks/bench_always.py": CALLED_ALWAYS,
                                    "pkg/graphs.py": CALLED_LIBRARY})
    report = migrate_json(root)
    opt = _errors(report, "benchmarks/bench_graph.py", "NPU202")
    assert opt and all(f["severity"] == "info" for f in opt), opt
    assert "only when `--graph` is chosen (every call of `capture` is: `args.graph`" in opt[0]["message"]
    for kept in ("benchmarks/bench_always.py", "pkg/graphs.py"):
        found = _errors(report, kept, "NPU202")
        assert found and any(f["severity"] == "error" for f in found), (kept, found)


# CA#34: a connector module a factory registers by name and loads lazily; its worker module is
# imported only by it
FACTORY = """\
import importlib


class ConnectorFactory:
    _registry = {}

    @classmethod
    def register_connector(cls, name, module_path, class_name):
        def loader():
            return getattr(importlib.import_module(module_path), class_name)

        cls._registry[name] = loader

    @classmethod
    def create(cls, config):
        return cls._registry[config.kv_connector]()()


ConnectorFactory.register_connector("PlainConnector", "pkg.connectors.plain", "PlainConnector")
ConnectorFactory.register_connector("FancyConnector", "pkg.connectors.fancy", "FancyConnector")
"""

CONFIG = """\
from dataclasses import dataclass
from typing import Optional


@dataclass
class TransferConfig:
    kv_connector: Optional[str] = None

    def uses_fancy(self) -> bool:
        return self.kv_connector == "FancyConnector"
"""

FANCY = """\
from pkg.connectors.fancy_worker import FancyWorker


class FancyConnector:
    def __init__(self):
        self.worker = FancyWorker()
"""

FANCY_WORKER = """\
import torch


class FancyWorker:
    def start(self):
        torch.cuda.cudart().cudaProfilerStart()
"""

PLAIN = """\
class PlainConnector:
    pass
"""


def _connector_project(tmp_path, config=CONFIG, extra=None):
    files = {"pkg/__init__.py": "", "pkg/connectors/__init__.py": "", "pkg/factory.py": FACTORY,
             "pkg/config.py": config, "pkg/connectors/fancy.py": FANCY,
             "pkg/connectors/fancy_worker.py": FANCY_WORKER, "pkg/connectors/plain.py": PLAIN}
    files.update(extra or {})
    return migrate_json(write_project(tmp_path, files))


def test_module_only_a_registration_by_name_loads_is_opt_in_info(tmp_path):
    report = _connector_project(tmp_path)
    found = _errors(report, "pkg/connectors/fancy_worker.py", "NPU202")
    assert found and found[0]["severity"] == "info", found
    message = found[0]["message"]
    assert "reached on an NPU host only when `FancyConnector` is chosen by name" in message
    assert "registered at pkg/factory.py:20 as `pkg.connectors.fancy`" in message
    assert "loaded only through pkg/connectors/fancy.py:1" in message


def test_registered_name_as_a_default_keeps_the_error(tmp_path):
    # the nearest true case: the same registration, but the configuration chooses it by default
    report = _connector_project(tmp_path, CONFIG.replace("Optional[str] = None", 'Optional[str] = "FancyConnector"'))
    found = _errors(report, "pkg/connectors/fancy_worker.py", "NPU202")
    assert found and found[0]["severity"] == "error", found


def test_worker_an_ordinary_module_imports_keeps_the_error(tmp_path):
    # the nearest true case: the same worker, also imported by a library module no registration guards
    report = _connector_project(tmp_path, extra={"pkg/engine.py": "from pkg.connectors.fancy_worker import FancyWorker\n\n"
                                                                   "WORKER = FancyWorker()\n"})
    found = _errors(report, "pkg/connectors/fancy_worker.py", "NPU202")
    assert found and found[0]["severity"] == "error", found


# CC#19: a kernel module imported only under `if envs.X:`, X an environment switch off by default
# in the project's envs.py table
ENVS = """\
import os

environment_variables = {
    "PKG_USE_FAST_DEQUANT": lambda: bool(int(os.getenv("PKG_USE_FAST_DEQUANT", "0"))),
    "PKG_USE_FAST_ON": lambda: bool(int(os.getenv("PKG_USE_FAST_ON", "1"))),
}


def __getattr__(name):
    return environment_variables[name]()
"""

OPS = """\
import torch

from pkg import envs


def dequantize(x):
    if envs.PKG_USE_FAST_DEQUANT:
        from pkg.fast_dequant import fast_dequantize

        return fast_dequantize(x)
    return x.float()
"""

FAST = """\
import torch


def fast_dequantize(x):
    torch.cuda.cudart().cudaProfilerStart()
    return x.float()
"""


def _env_project(tmp_path, ops=OPS, extra=None):
    files = {"pkg/__init__.py": "", "pkg/envs.py": ENVS, "pkg/ops.py": ops, "pkg/fast_dequant.py": FAST,
             "tests/test_fast.py": "from pkg.fast_dequant import fast_dequantize\n"}
    files.update(extra or {})
    return migrate_json(write_project(tmp_path, files))


def test_module_imported_only_under_an_off_environment_switch_is_info(tmp_path):
    report = _env_project(tmp_path)
    found = _errors(report, "pkg/fast_dequant.py", "NPU202")
    assert found and found[0]["severity"] == "info", found
    message = found[0]["message"]
    assert "reached on an NPU host only when the environment variable `PKG_USE_FAST_DEQUANT` is set" in message
    assert "pkg/ops.py:8 under `if envs.PKG_USE_FAST_DEQUANT:`" in message
    assert "`PKG_USE_FAST_DEQUANT` is off unless set (pkg/envs.py:4)" in message


def test_switch_on_by_default_keeps_the_error(tmp_path):
    # the nearest true case: the same import, under a switch whose default is on
    report = _env_project(tmp_path, OPS.replace("PKG_USE_FAST_DEQUANT", "PKG_USE_FAST_ON"))
    found = _errors(report, "pkg/fast_dequant.py", "NPU202")
    assert found and found[0]["severity"] == "error", found


def test_switch_the_library_sets_itself_keeps_the_error(tmp_path):
    # the nearest true case: the library turns the switch on by itself on some path
    setter = "import os\n\n\ndef prefer_fast():\n    os.environ[\"PKG_USE_FAST_DEQUANT\"] = \"1\"\n"
    report = _env_project(tmp_path, extra={"pkg/platform.py": setter})
    found = _errors(report, "pkg/fast_dequant.py", "NPU202")
    assert found and found[0]["severity"] == "error", found
