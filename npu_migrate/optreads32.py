"""Opt-in choices made in another module that the config readers missed (issue #16, policy P1;
round-32 audit GB#31, GB#17, GC#2, GB#39, GC#4, GB#12). Read by optconfig29.py, optchoice29.py and
registryoptin28.py.

GB#31: vLLM's Step5 MoE layer builds its DeepGEMM experts only for one `--moe-backend`, read through
`getattr` with a fallback equal to the field's default:

    # vllm/config/kernel.py
    class KernelConfig:
        moe_backend: MoEBackend = "auto"

    # vllm/models/step5/nvidia/model.py
    class Step5MoE(nn.Module):
        def __init__(self, vllm_config, ...):
            kernel_config = getattr(vllm_config, "kernel_config", None)
            self.use_mega_moe = getattr(kernel_config, "moe_backend", "auto") == "deep_gemm_mega_moe"
            if self.use_mega_moe:
                from vllm.models.step5.nvidia.mega_moe import Step5MegaMoE
                self.experts = Step5MegaMoE(...)

Two readings were missing, and the experts' `torch.cuda` findings stayed errors:

* `getattr(x, "F", d)` (`getattr_field`): the field read `x.F` (its defaults and the values the
  library sets) with the constant fallback `d` among its values; a fallback that is no constant
  makes it unknown;
* `self.A` of a class when other modules store an attribute of the same name
  (`foreign_only`): optconfig29 read none then. Stores `self.A = ...` in a class of another module
  whose file names neither this class nor its bases are that class's own attribute (five other
  models' `self.use_mega_moe`), as callgates21.py reads them; any other store there (`model.A =
  v`, `setattr`) keeps it unknown.

GB#17, GC#2 (registryoptin28.py): vLLM registers `"HF3FSKVConnector"` and the weight-transfer
backend `"ipc"` (default "nccl") by name and loads their modules lazily; the registration counted for
nothing when the name appeared as a string annotation (`connector: "HF3FSKVConnector"`,
`annotation_string`: a forward reference, no value), in a second registry registering the same name
to the same module (`WeightTransferEngineFactory` and `WeightTransferTrainerFactory`: one choice), or
in the registered module itself (`backend: ClassVar[str] = "ipc"`: it loads nothing).

GB#39 (optchoice29.py): DeepSpeed stores `self.use_graph_capture = getattr(cfg, 'use_graph_capture',
False) if cfg else False`: `read_field` reads that as the field (a conditional with a False or None
branch, a `getattr` with a False or None fallback), and optchoice29's `_user_value` takes the
conditional for the user's setting passed on.

GC#4 (optconfig29.py, `_resolve_pending`): `CacheConfig.use_kda_recoverssm` (default False) is set to
a computed value only after `if not self.cache_config.use_replayssm: ...; return self`; a computed
setting behind a gate false by default (read with every computed setting unknown, the gate not
reading the field itself) leaves the field at its default and the constants the library sets.

GB#12 (optconfig29.py, `constructor_assert`): the DFlash2 beam draft layer's `__init__` asserts
`vllm_config.speculative_config is not None` (default None); its other methods run only where that
holds.

What stays (the nearest true cases): a `getattr` fallback that is another value than the default
(`getattr(cfg, "moe_backend", "deep_gemm_mega_moe")`: true by default), a computed fallback, a
`getattr` with a non-constant name; an attribute another module stores on an object
(`layer.use_mega_moe = True`) or in a class of a file naming this class; a registered name that is a
setting's default in another module, two registrations of a name to two modules; a conditional whose
other branch is computed or true; a computed setting on the default's path; an assert that holds by
default, or one under a branch of the constructor.
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache


def getattr_field(node: ast.AST, fields: dict) -> Optional[tuple]:
    """(a field read `x.F` standing for `getattr(x, "F"[, d])`, the fallback node or None) when F is a
    config field; None otherwise. The read carries the call's position (its messages' line)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and 2 <= len(node.args) <= 3 and not node.keywords):
        return None
    name = node.args[1]
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value in fields):
        return None
    receiver = node.args[0]
    if isinstance(receiver, ast.Name) and receiver.id == "self":
        return None  # (a class's own attribute read by name: not told apart here)
    read = ast.copy_location(ast.Attribute(value=receiver, attr=name.value, ctx=ast.Load()), node)
    return read, (node.args[2] if len(node.args) == 3 else None)


def foreign_only(run, stored_at: set, own: int, attr: str, cls: ast.ClassDef) -> bool:
    """Every store of `.attr` in the modules `stored_at` other than module `own` is `self.attr = ...`
    in a class of a file that does not name `cls` or one of its bases: that class's own attribute."""
    words = {cls.name.encode()} | {(astcache.dotted(b) or "").rsplit(".", 1)[-1].encode() for b in cls.bases}
    words.discard(b"")
    for j in stored_at:
        if j == own:
            continue
        text = run.text_of(j) or b""
        if any(w in text for w in words if w not in (b"Module", b"object")):
            return False
        tree = run.tree(j)
        if tree is None:
            return False
        parents = astcache.parents(tree)
        for node in astcache.nodes(tree, ast.Attribute):
            if node.attr != attr or isinstance(node.ctx, ast.Load):
                continue
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                return False
            current = parents.get(id(node))
            while current is not None and not isinstance(current, ast.ClassDef):
                current = parents.get(id(current))
            if current is None:
                return False
    return True


def annotation_string(node: ast.AST, parents: dict) -> bool:
    """A string constant that is (part of) an annotation, `connector: "HF3FSKVConnector"`: a forward
    reference to a class, no value a setting takes (registryoptin28.py, round 32 GB#17)."""
    child, current = node, parents.get(id(node))
    while isinstance(current, (ast.Subscript, ast.Tuple, ast.BinOp, ast.Attribute, ast.List)):
        child, current = current, parents.get(id(current))
    if isinstance(current, ast.arg):
        return child is current.annotation
    if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return child is current.returns
    if isinstance(current, ast.AnnAssign):
        return child is current.annotation
    return False


def either_switch(body: ast.AST, reader) -> Optional[list]:
    """The variables of `bool(int(os.getenv("X", "0")) or int(os.getenv("Y", "0")))`, every operand of
    the `or` a switch off by default by `reader` (tritonguards23.env_opt_in); else None (round 32
    GB#30: `VLLM_COMPUTE_NANS_IN_LOGITS`, also on under `VLLM_RAISE_ON_LOGIT_NANS`)."""
    while isinstance(body, ast.Call) and (astcache.dotted(body.func) or "") == "bool" \
            and len(body.args) == 1 and not body.keywords:
        body = body.args[0]
    if not (isinstance(body, ast.BoolOp) and isinstance(body.op, ast.Or)):
        return None
    names = [reader(value) for value in body.values]
    return names if all(names) else None


def _falsy(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and (node.value is False or node.value is None)


def read_field(value: ast.AST, table: dict) -> Optional[str]:
    """The field F a stored value reads: `<x>.F`, `getattr(x, "F", <False/None>)`, or either of those
    as one branch of a conditional whose other branch is False or None (DeepSpeed's
    `getattr(cfg, 'use_graph_capture', False) if cfg else False`, round 32 GB#39: optchoice29.py)."""
    if isinstance(value, ast.IfExp):
        if _falsy(value.orelse):
            return read_field(value.body, table)
        if _falsy(value.body):
            return read_field(value.orelse, table)
        return None
    if isinstance(value, ast.Attribute):
        return value.attr if value.attr in table else None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "getattr" \
            and len(value.args) == 3 and not value.keywords and _falsy(value.args[2]) \
            and isinstance(value.args[1], ast.Constant) and value.args[1].value in table:
        return value.args[1].value
    return None


def constructor_assert(node: ast.AST, parents: dict, off) -> Optional[str]:
    """What `off` says of an `assert <test>` in the top-level body of the `__init__` of the class whose
    other method holds `node`: an object built only where the test holds, so its methods run only
    then (vLLM's DFlash2 draft layer asserts `vllm_config.speculative_config is not None`, round 32
    GB#12: optconfig29.py). None otherwise."""
    method = parents.get(id(node))
    while method is not None and not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
        method = parents.get(id(method))
    cls = parents.get(id(method)) if method is not None else None
    if not isinstance(cls, ast.ClassDef) or method.name == "__init__":
        return None
    init = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
    for stmt in init.body if init is not None else ():
        if isinstance(stmt, ast.Assert):
            said = off(stmt.test)
            if said is not None:
                return f"{said}; `{cls.name}.__init__` asserts it (line {stmt.lineno})"
    return None
