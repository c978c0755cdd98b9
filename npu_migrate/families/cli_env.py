"""Environment variables and command-line device options (NPU6xx)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from typing import Optional

import libcst as cst

from .. import astcache, catalogue
from .base import Example, Family
from .context import cuda_literal, dotted_name, keyword_arg, string_value


@functools.lru_cache(maxsize=None)
def _tables():
    env = catalogue.env_table()
    return dict(env["rename"]), re.compile(env["report"]["pattern"])



@functools.lru_cache(maxsize=None)
def _prose_calls() -> frozenset:
    """Calls whose positional strings are messages for people (rules/sweep.toml [commands])."""
    return frozenset(catalogue.read_table("sweep.toml")["commands"]["prose_calls"])


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
            and node.value.id == "os") or (isinstance(node, ast.Name) and node.id == "environ")


def _environ_read(node: ast.AST, var: str) -> bool:
    """`os.environ[var]`, `os.environ.get(var, ...)`, `os.getenv(var, ...)`: the value already set."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
        return isinstance(node.slice, ast.Name) and node.slice.id == var
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == var:
        func = node.func
        return isinstance(func, ast.Attribute) and (
            (func.attr == "get" and _is_environ(func.value))
            or (func.attr == "getenv" and isinstance(func.value, ast.Name) and func.value.id == "os"))
    return False


def _only_forwards(nodes, var: str, keys=()) -> bool:
    """Every use of the loop variable `var` in `nodes` reads the environment's value for it
    (`os.environ[var]`, `var in os.environ`) or is the key `keys` allows; at least one read."""
    allowed: set[int] = {id(k) for k in keys}
    reads = 0
    for root in nodes:
        for node in ast.walk(root):
            if _environ_read(node, var):
                reads += 1
                allowed.update(id(n) for n in ast.walk(node))
            elif (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == var
                  and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn))
                  and _is_environ(node.comparators[0])):
                allowed.add(id(node.left))
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript) \
                    and not _is_environ(node.targets[0].value) and _environ_read(node.value, var) \
                    and isinstance(node.targets[0].slice, ast.Name) and node.targets[0].slice.id == var:
                allowed.add(id(node.targets[0].slice))  # `env[var] = os.environ[var]`: a copy
    uses = [n for root in nodes for n in ast.walk(root) if isinstance(n, ast.Name) and n.id == var]
    return reads > 0 and all(id(n) in allowed for n in uses)


def _forwarding_loop(node: ast.AST) -> list[ast.AST]:
    """What a `for` loop or dict comprehension iterates when it only copies the environment's
    existing values for the names it iterates (`env[k] = os.environ[k]` under `if k in
    os.environ`): those names are passed on, not set."""
    if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and not node.orelse:
        return [node.iter] if _only_forwards(node.body, node.target.id) else []
    if isinstance(node, ast.DictComp) and len(node.generators) == 1:
        gen = node.generators[0]
        if isinstance(gen.target, ast.Name) and isinstance(node.key, ast.Name) and node.key.id == gen.target.id \
                and _environ_read(node.value, gen.target.id) \
                and _only_forwards([node.key, node.value, *gen.ifs], gen.target.id, keys=(node.key,)):
            return [gen.iter]
    return []

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

    A copied environment handed to a subprocess is rewritten the same way, whatever shape the copy
    takes: `env = os.environ.copy()` or `dict(os.environ)` then `env["CUDA_VISIBLE_DEVICES"] = ...`,
    `{**os.environ, "CUDA_VISIBLE_DEVICES": ...}`, `env.update(CUDA_VISIBLE_DEVICES=...)` and
    `mock.patch.dict(os.environ, CUDA_VISIBLE_DEVICES=...)` (the keyword becomes
    `**{npu_compat.env_name(...): ...}`, which passes the very same key on a CUDA or CPU host).
    A variable set inside a command string (`"CUDA_VISIBLE_DEVICES=0 python train.py"`,
    `f"CUDA_VISIBLE_DEVICES={rank} ..."`) is reported by the leftover sweep (NPU604), not rewritten:
    such text is often compared with a string built elsewhere (a test's expected command, a shell
    script), and a rewrite of one end only would make them disagree on an Ascend host. The
    assertion `"CUDA_VISIBLE_DEVICES" in cmd` is rewritten like any other use of the name: it then
    holds on an Ascend host exactly when `cmd` is built with `npu_compat.env_name` too, which is
    what NPU604 asks for. The name inside prose (docstrings, log, print, warning and exception
    messages, help texts) is neither rewritten nor reported.

    A lookup that already falls back between the Ascend and the CUDA name
    (`os.environ.get("ASCEND_RT_VISIBLE_DEVICES") or os.environ.get("CUDA_VISIBLE_DEVICES")`) is
    left as written (NPU991, information only): rewritten, its fallback would read the Ascend name
    twice on an Ascend host.
    """

    NAME = "cli_env"
    TITLE = "Environment variables and command-line options"
    CODES = ("NPU601", "NPU602", "NPU603", "NPU604")  # NPU604: reported by the leftover sweep
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
            codes=('NPU602',),
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
            note='a copied environment for a subprocess, in each of its shapes',
            before="""\
import os
import subprocess


def launch(rank, script):
    env = os.environ.copy()
    env["CUDA_VISIBLE_DEVICES"] = str(rank)
    subprocess.run(["python", script], env=env, check=True)


def launch_pair(script):
    env = dict(os.environ)
    env.update(CUDA_VISIBLE_DEVICES="0,1")
    subprocess.run(["python", script], env=env, check=True)
    subprocess.run(["python", script], env={**os.environ, "CUDA_VISIBLE_DEVICES": "2"}, check=True)
""",
            after="""\
import os
import subprocess

import npu_compat


def launch(rank, script):
    env = os.environ.copy()
    env[npu_compat.env_name("CUDA_VISIBLE_DEVICES")] = str(rank)
    subprocess.run(["python", script], env=env, check=True)


def launch_pair(script):
    env = dict(os.environ)
    env.update(**{npu_compat.env_name("CUDA_VISIBLE_DEVICES"): "0,1"})
    subprocess.run(["python", script], env=env, check=True)
    subprocess.run(["python", script], env={**os.environ, npu_compat.env_name("CUDA_VISIBLE_DEVICES"): "2"}, check=True)
""",
            codes=('NPU601', 'NPU601', 'NPU601'),
        ),
        Example(
            note='a test that patches the environment',
            before="""\
import os
from unittest import mock


@mock.patch.dict(os.environ, CUDA_VISIBLE_DEVICES="0", NCCL_DEBUG="INFO")
def test_single_device():
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
""",
            after="""\
import os
from unittest import mock

import npu_compat


@mock.patch.dict(os.environ, **{npu_compat.env_name("CUDA_VISIBLE_DEVICES"): "0"}, NCCL_DEBUG="INFO")
def test_single_device():
    assert os.environ[npu_compat.env_name("CUDA_VISIBLE_DEVICES")] == "0"
""",
            codes=('NPU601', 'NPU602', 'NPU601'),
        ),
        Example(
            note='a variable set inside a command string, and a test that pins it',
            before="""\
import subprocess


def command(rank):
    return f"CUDA_VISIBLE_DEVICES={rank} python train.py"


def run_all():
    subprocess.run("CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc-per-node 2 train.py", shell=True)


def test_command():
    cmd = command(3)
    assert "CUDA_VISIBLE_DEVICES" in cmd
    assert cmd == f"CUDA_VISIBLE_DEVICES={3} python train.py"
""",
            after="""\
import subprocess

import npu_compat


def command(rank):
    return f"CUDA_VISIBLE_DEVICES={rank} python train.py"


def run_all():
    subprocess.run("CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc-per-node 2 train.py", shell=True)


def test_command():
    cmd = command(3)
    assert npu_compat.env_name("CUDA_VISIBLE_DEVICES") in cmd
    assert cmd == f"CUDA_VISIBLE_DEVICES={3} python train.py"
""",
            codes=('NPU604', 'NPU604', 'NPU601', 'NPU604'),
        ),
        Example(
            note='"CUDA_VISIBLE_DEVICES=0" in a docstring, a log message, an error message and a help text',
            before="""\
import argparse
import logging

logger = logging.getLogger(__name__)


def main():
    \"\"\"Run as `CUDA_VISIBLE_DEVICES=0 python main.py`.\"\"\"
    parser = argparse.ArgumentParser(epilog="example: CUDA_VISIBLE_DEVICES=0,1 python main.py")
    parser.add_argument("--gpus", help="like CUDA_VISIBLE_DEVICES=0,1")
    args = parser.parse_args()
    logger.info("launch with CUDA_VISIBLE_DEVICES=%s", args.gpus)
    if not args.gpus:
        raise ValueError(f"set CUDA_VISIBLE_DEVICES={args.gpus!r} or --gpus")
""",
        ),
        Example(
            note='a lookup that already tries the Ascend name first is left as written',
            before="""\
import os

visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES") or os.environ.get("CUDA_VISIBLE_DEVICES")
""",
            codes=('NPU991',),
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
        Example(
            note='a docstring or a logged message that is exactly the variable name is text, not a lookup',
            before="""\
import logging


def visible():
    "CUDA_VISIBLE_DEVICES"
    logging.info("CUDA_VISIBLE_DEVICES")
""",
        ),
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.env_rename, self.nccl_env_re = _tables()
        self._removed: Optional[set[tuple[int, str]]] = None  # see _removed_names

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
            if self._is_prose(original):
                return None  # a docstring or a logged name: text for people (the sweep decides)
            new = self.ctx.shim_call("env_name", [updated])
            return self.ctx.rewrite("NPU601", original, new, name=value) or updated
        if self.nccl_env_re.match(value):
            if (self.ctx.position(original)[0], value) in self._removed_names():
                self.ctx.claim(original)  # removed from an environment, not set: no tuning
                return updated
            self.ctx.report("NPU602", original, name=value)
            return updated
        return None

    def _removed_names(self) -> set[tuple[int, str]]:
        """(line, name) of the string literals that name a variable removed from an environment,
        read from the whole file's ast: the key of `.pop("NCCL_X", ...)`, `del env["NCCL_X"]`,
        `unsetenv("NCCL_X")`, and the elements of a tuple, list or set bound to a name that a
        `for` loop iterates into one of those (`for k in _STRIP: os.environ.pop(k, None)`); also
        the names a loop or dict comprehension only forwards when already set (`{k: os.environ[k]
        for k in ("NCCL_X", ...) if k in os.environ}`): nothing is set, nothing tuned."""
        if self._removed is not None:
            return self._removed
        removed: set[tuple[int, str]] = set()
        tree = self.ctx._ast()
        nodes = list(astcache.walk(tree)) if tree is not None else []

        def removes(stmt: ast.AST, key) -> bool:
            """Whether `stmt` removes the key `key` (a predicate on the key expression)."""
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
                    called = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
                    if called in ("pop", "unsetenv") and node.args and key(node.args[0]):
                        return True
                if isinstance(node, ast.Delete) and any(
                        isinstance(t, ast.Subscript) and key(t.slice) for t in node.targets):
                    return True
            return False

        def literal(node: ast.AST) -> bool:
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                removed.add((node.lineno, node.value))
                return True
            return False

        strip_lists: set[str] = set()
        for node in nodes:
            if isinstance(node, (ast.Call, ast.Delete)):
                removes(node, literal)
            elif isinstance(node, ast.For) and isinstance(node.iter, ast.Name) and isinstance(node.target, ast.Name):
                var = node.target.id
                if any(removes(stmt, lambda k: isinstance(k, ast.Name) and k.id == var) for stmt in node.body):
                    strip_lists.add(node.iter.id)
        # names whose existing values are only copied on (forwarded to a child's environment)
        for node in nodes:
            for iterated in _forwarding_loop(node):
                if isinstance(iterated, (ast.Tuple, ast.List, ast.Set)):
                    for element in iterated.elts:
                        literal(element)
                elif isinstance(iterated, ast.Name):
                    strip_lists.add(iterated.id)
        for node in nodes if strip_lists else ():
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id in strip_lists for t in targets) and isinstance(
                    node.value, (ast.Tuple, ast.List, ast.Set)):
                for element in node.value.elts:
                    literal(element)
        self._removed = removed
        return removed

    def _is_prose(self, original: cst.SimpleString) -> bool:
        """The string is a statement of its own (a docstring) or the message of a print, log or
        warning call: rewriting it would change `__doc__` or a message, not an environment lookup."""
        parent = self.ctx.parent()
        if isinstance(parent, cst.Expr):
            return True
        if isinstance(parent, cst.Arg) and parent.keyword is None:
            call = self.ctx.parent(2)
            if isinstance(call, cst.Call):
                name = (dotted_name(call.func) or "").rpartition(".")[2]
                return name in _prose_calls()
        return False

    def leave_Call(self, original: cst.Call, updated: cst.Call):
        func = original.func
        if isinstance(func, cst.Name) and func.value == "dict":
            return self._env_dict_keywords(original, updated)
        if self._updates_env_mapping(func) and self._env_keyword_args(original):
            return self._env_dict_keywords(original, updated)
        if isinstance(func, cst.Attribute) and func.attr.value == "add_argument":
            return self._argparse_option(original, updated)
        if (dotted_name(func) or "").split(".")[-1] in ("option", "argument"):
            return self._click_option(original, updated)
        return None

    @staticmethod
    def _updates_env_mapping(func: cst.BaseExpression) -> bool:
        """`env.update(...)` (a copied environment, `os.environ` itself) and `mock.patch.dict(...)`:
        calls whose keywords are a mapping's keys, like `dict(...)`'s."""
        if isinstance(func, cst.Attribute) and func.attr.value == "update":
            return True
        return (dotted_name(func) or "") in ("patch.dict", "mock.patch.dict", "unittest.mock.patch.dict")

    def _env_keyword_args(self, original: cst.Call) -> bool:
        return any(
            arg.keyword is not None
            and (arg.keyword.value in self.env_rename or self.nccl_env_re.match(arg.keyword.value))
            for arg in original.args
        )

    def _env_dict_keywords(self, original: cst.Call, updated: cst.Call):
        """dict(os.environ, CUDA_VISIBLE_DEVICES="0") -> dict(os.environ, **{npu_compat.env_name(...): "0"}).

        The same for `env.update(CUDA_VISIBLE_DEVICES="0")` on a copied environment
        (`env = os.environ.copy()`) and `mock.patch.dict(os.environ, CUDA_VISIBLE_DEVICES="0")`:
        `f(**{"NAME": v})` passes exactly what `f(NAME=v)` passes, so on a CUDA or CPU host the call
        is unchanged, whatever `f` is. NCCL keywords are reported (NPU602).
        """
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
    def _claim_default(self, original: cst.Call, backend: bool = False) -> None:
        """A `default="cuda"` (`backend`: "nccl") goes through the shim's converter too: handled."""
        for arg in original.args:
            if arg.keyword is not None and arg.keyword.value == "default" and (
                    string_value(arg.value) == "nccl" if backend else cuda_literal(arg.value)):
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

    def _flowing_device_default(self, original: cst.Call, kind: str = "device") -> Optional[cst.Arg]:
        """The `default="cuda..."` argument of an option `--device` whose parsed value the file
        passes to a device position (`kind` "backend": the `default="nccl"` of a `--backend` that
        reaches `init_process_group`), else None (devflows24.option_flows)."""
        from .. import devflows24

        names = [string_value(a.value) for a in original.args if a.keyword is None]
        dest = next((string_value(a.value) for a in original.args if a.keyword is not None
                     and a.keyword.value == "dest"), None)
        long = next((n for n in names if n and n.startswith("--")), None)
        dest = dest or (long[2:].replace("-", "_") if long else None)
        default = next((a for a in original.args if a.keyword is not None and a.keyword.value == "default"), None)
        if dest is None or default is None:
            return None
        if kind == "backend":
            if string_value(default.value) != "nccl" or not dest.endswith("backend"):
                return None
        elif cuda_literal(default.value) is None or not self.ctx.named_like_device(cst.Name(dest)):
            return None
        if not devflows24.option_flows(self.ctx.file_text(), dest, frozenset(self.ctx.device_keywords), kind):
            return None
        return default

    def _argparse_option(self, original: cst.Call, updated: cst.Call):
        """argparse option whose choices list "cuda", or a `--device` default "cuda" that the file
        passes to a device position: add type=npu_compat.device_arg (NPU603)."""
        choices = next((a for a in original.args if a.keyword is not None and a.keyword.value == "choices"), None)
        converter = "device_arg"
        if choices is None:
            choices = self._flowing_device_default(original)  # (`--device` default "cuda:0": devflows24.py)
            if choices is None:  # (`--backend` default "nccl" that reaches `init_process_group`)
                choices, converter = self._flowing_device_default(original, "backend"), "dist_backend"
        elif not isinstance(choices.value, (cst.List, cst.Tuple, cst.Set)) or not self.ctx.device_values(choices.value):
            return updated
        if choices is None:
            return updated
        args = list(updated.args)
        type_index = next((i for i, a in enumerate(original.args) if a.keyword is not None and a.keyword.value == "type"), None)
        device_arg = self.ctx.shim_attr(converter)
        if type_index is None:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(keyword_arg("type", device_arg))
        elif isinstance(original.args[type_index].value, cst.Name) and original.args[type_index].value.value == "str":
            args[type_index] = args[type_index].with_changes(value=device_arg)
        else:
            return updated
        from .. import devflows24

        self._claim_default(original, converter == "dist_backend")
        before = len(self.ctx.findings)
        new = self.ctx.rewrite("NPU603", choices, updated.with_changes(args=args))
        if new is not None and converter == "dist_backend" and len(self.ctx.findings) > before:
            self.ctx.findings[-1] = dataclasses.replace(self.ctx.findings[-1], message=(
                f"{devflows24.BACKEND_OPTION}: converted with `npu_compat.dist_backend` "
                "(\"nccl\" is \"hccl\" on an NPU host)"))
        return new or updated
