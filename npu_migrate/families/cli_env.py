"""Environment variables and command-line device options (NPU6xx)."""

from __future__ import annotations

import functools
import re
from typing import Optional

import libcst as cst

from .. import catalogue
from .base import Example, Family
from .context import cuda_literal, dotted_name, keyword_arg, string_value


@functools.lru_cache(maxsize=None)
def _tables():
    env = catalogue.env_table()
    return dict(env["rename"]), re.compile(env["report"]["pattern"])


class CliEnv(Family):
    """CUDA environment variables and the device choices of a program's command line.

    The name of a CUDA environment variable with an Ascend counterpart (`CUDA_VISIBLE_DEVICES` ->
    `ASCEND_RT_VISIBLE_DEVICES`, ...) becomes `npu_compat.env_name("CUDA_VISIBLE_DEVICES")`
    (NPU601), which answers the Ascend name on an Ascend host and the CUDA name elsewhere, wherever
    the name is read or set: `os.environ[...]`, `os.getenv(...)`, `dict(os.environ, NAME=...)`.
    NCCL tuning variables (`NCCL_*`) are reported (NPU602): HCCL has its own, with other names and
    meanings. An argparse option whose `choices` list "cuda" gains `type=npu_compat.device_arg`
    and a click option with a `click.Choice` of devices gains `callback=npu_compat.click_device_arg`
    (NPU603): a user who types `--device cuda` on an Ascend host gets the NPU.
    """

    NAME = "cli_env"
    TITLE = "Environment variables and command-line options"
    CODES = ("NPU601", "NPU602", "NPU603")
    EXAMPLES = (
        Example(
            note='environment variables with an NPU counterpart',
            before="""\
import os

os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
""",
            after="""\
import os

import npu_compat

os.environ[npu_compat.env_name("CUDA_VISIBLE_DEVICES")] = "0,1"
os.environ.setdefault(npu_compat.env_name("PYTORCH_CUDA_ALLOC_CONF"), "expandable_segments:True")
os.environ[npu_compat.env_name("TORCH_NCCL_ASYNC_ERROR_HANDLING")] = "1"
""",
            codes=('NPU601', 'NPU601', 'NPU601'),
        ),
        Example(
            note='reading a variable',
            before="""\
import os

visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
num_devices = len(visible.split(",")) if visible else 0
""",
            after="""\
import os

import npu_compat

visible = os.environ.get(npu_compat.env_name("CUDA_VISIBLE_DEVICES"), "")
num_devices = len(visible.split(",")) if visible else 0
""",
            codes=('NPU601',),
        ),
        Example(
            note='NCCL tuning variables: no one-to-one HCCL counterpart',
            before="""\
import os

os.environ["NCCL_DEBUG"] = "INFO"
os.environ["NCCL_IB_DISABLE"] = "1"
""",
            codes=('NPU602', 'NPU602'),
        ),
        Example(
            note='an argparse device option',
            before="""\
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
args = parser.parse_args()
""",
            after="""\
import argparse

import npu_compat

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda", choices=["cuda", "npu", "cpu"], type=npu_compat.device_arg)
args = parser.parse_args()
""",
            codes=('NPU603', 'NPU105'),
        ),
        Example(
            note='a click device option',
            before="""\
import click


@click.command()
@click.option("--device", type=click.Choice(["cuda", "cpu"]))
def main(device):
    print(device)
""",
            after="""\
import click

import npu_compat


@click.command()
@click.option("--device", type=click.Choice(["cuda", "npu", "cpu"]), callback=npu_compat.click_device_arg)
def main(device):
    print(device)
""",
            codes=('NPU603', 'NPU105'),
        ),
        Example(
            note='variables that are not CUDA-specific',
            before="""\
import os

os.environ["OMP_NUM_THREADS"] = "8"
os.environ["MASTER_PORT"] = "29500"
""",
        ),
        Example(
            note='"CUDA_VISIBLE_DEVICES" inside prose, and choices that are not devices',
            before="""\
import argparse

parser = argparse.ArgumentParser(description="set CUDA_VISIBLE_DEVICES to choose devices")
parser.add_argument("--precision", choices=["fp16", "bf16", "fp32"])
""",
        ),
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.env_rename, self.nccl_env_re = _tables()

    def visit_Call(self, node: cst.Call) -> Optional[bool]:
        """`npu_compat.env_name("CUDA_VISIBLE_DEVICES")`: written by an earlier run; not again."""
        if self.ctx.is_own_literal_call(node) and node.func.attr.value == "env_name":
            self.ctx.claim(node)
            return False
        return None

    # ------------------------------------------------------------------ names (NPU601/602)
    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString):
        value = string_value(original)
        if value is None:
            return None
        if value in self.env_rename:
            new = self.ctx.shim_call("env_name", [updated])
            return self.ctx.rewrite("NPU601", original, new, name=value) or updated
        if self.nccl_env_re.match(value):
            self.ctx.report("NPU602", original, name=value)
            return updated
        return None

    def leave_Call(self, original: cst.Call, updated: cst.Call):
        func = original.func
        if isinstance(func, cst.Name) and func.value == "dict":
            return self._env_dict_keywords(original, updated)
        if isinstance(func, cst.Attribute) and func.attr.value == "add_argument":
            return self._argparse_option(original, updated)
        if (dotted_name(func) or "").split(".")[-1] in ("option", "argument"):
            return self._click_option(original, updated)
        return None

    def _env_dict_keywords(self, original: cst.Call, updated: cst.Call):
        """dict(os.environ, CUDA_VISIBLE_DEVICES="0") -> dict(os.environ, **{npu_compat.env_name(...): "0"})."""
        args = list(updated.args)
        changed = False
        for i, arg in enumerate(original.args):
            name = arg.keyword.value if arg.keyword is not None else None
            if name in self.env_rename:
                key = self.ctx.shim_call("env_name", [cst.SimpleString(f'"{name}"')])
                mapping = cst.Dict([cst.DictElement(key, args[i].value)])
                new_arg = cst.Arg(value=mapping, star="**", comma=args[i].comma)
                if self.ctx.rewrite("NPU601", arg, new_arg, name=name) is not None:
                    args[i] = new_arg
                    changed = True
            elif name is not None and self.nccl_env_re.match(name):
                self.ctx.report("NPU602", arg, name=name)
        return updated.with_changes(args=args) if changed else updated

    # ------------------------------------------------------------------ device options (NPU603)
    def _claim_default(self, original: cst.Call) -> None:
        """A `default="cuda"` goes through the shim's device argument too: handled."""
        for arg in original.args:
            if arg.keyword is not None and arg.keyword.value == "default" and cuda_literal(arg.value):
                self.ctx.claim(arg.value)

    def _click_option(self, original: cst.Call, updated: cst.Call):
        """@click.option(..., type=click.Choice(["cuda", ...])): add callback=npu_compat.click_device_arg."""
        type_arg = next((a for a in original.args if a.keyword is not None and a.keyword.value == "type"), None)
        if type_arg is None or not isinstance(type_arg.value, cst.Call):
            return updated
        choice = type_arg.value
        if (dotted_name(choice.func) or "").split(".")[-1] != "Choice" or not choice.args:
            return updated
        if not self.ctx.device_values(choice.args[0].value):
            return updated
        if any(a.keyword is not None and a.keyword.value == "callback" for a in original.args):
            return updated  # the user's own callback: NPU105 still adds "npu" to the choices
        args = list(updated.args)
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(keyword_arg("callback", self.ctx.shim_attr("click_device_arg")))
        self._claim_default(original)
        return self.ctx.rewrite("NPU603", type_arg, updated.with_changes(args=args)) or updated

    def _argparse_option(self, original: cst.Call, updated: cst.Call):
        """argparse option whose choices list "cuda": add type=npu_compat.device_arg (NPU603)."""
        choices = next((a for a in original.args if a.keyword is not None and a.keyword.value == "choices"), None)
        if choices is None or not isinstance(choices.value, (cst.List, cst.Tuple, cst.Set)):
            return updated
        if not self.ctx.device_values(choices.value):
            return updated
        args = list(updated.args)
        type_index = next((i for i, a in enumerate(original.args) if a.keyword is not None and a.keyword.value == "type"), None)
        device_arg = self.ctx.shim_attr("device_arg")
        if type_index is None:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(keyword_arg("type", device_arg))
        elif isinstance(original.args[type_index].value, cst.Name) and original.args[type_index].value.value == "str":
            args[type_index] = args[type_index].with_changes(value=device_arg)
        else:
            return updated
        self._claim_default(original)
        return self.ctx.rewrite("NPU603", choices, updated.with_changes(args=args)) or updated
