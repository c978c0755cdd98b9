"""Environment switches off by default, read by optconfig29.py's reading of a gate (issue #16, policy
P1; round-32 audit GB#30).

vLLM's Model Runner V2 counts the NaNs of its logits only when its user sets a variable:

    # vllm/envs.py
    "VLLM_COMPUTE_NANS_IN_LOGITS": lambda: bool(int(os.getenv("VLLM_COMPUTE_NANS_IN_LOGITS", "0"))),

    # vllm/v1/worker/gpu/sample/sampler.py
    class Sampler:
        def __init__(self, ...):
            self.compute_nans = envs.VLLM_COMPUTE_NANS_IN_LOGITS  # False by default.
        def __call__(self, logits, ...):
            num_nans = get_num_nans(logits) if self.compute_nans else None

    # vllm/v1/worker/gpu/spec_decode/rejection_sampler.py (another class)
            num_nans = get_num_nans(logits) if self.sampler.compute_nans else None

`get_num_nans` launches a Triton kernel (gpu/metrics/logits.py), reported as an error. registryoptin28
reads such switches (`_env_switches`: an entry of the project's `envs.py` table off by default that no
library file sets itself) only around imports, and envskips29 around test skips; optconfig29's
reading of a gate knew config fields, not switches. Two readings are added there:

* `envs.X` (`EnvSwitches.read`), X such a switch, stored in a local or in `self.A`: False, "`X` is
  off unless it or `VLLM_RAISE_ON_LOGIT_NANS` is set (vllm/envs.py:N)" (registryoptin28 now reads a
  table entry `bool(int(getenv("X", "0")) or int(getenv("Y", "0")))` too: optreads32.either_switch);
  so `self.compute_nans` (every store of it in its class reads so) is false by default. A test of
  `envs.X` itself stays registryoptin28's (its imports) and its words;
* `<obj>.A` with another receiver than `self` (`single_class_store`): where the library's one
  module storing `.A` stores it only as `self.A = ...` inside one class, the attribute is read as that
  class's `self.A` (`self.sampler.compute_nans`).

What stays (the nearest true cases): a switch on by default (`os.getenv("X", "1")`), one the library
sets itself (`os.environ["X"] = "1"`), a variable outside the table, an attribute stored by two
modules or two classes, or stored on another object (`sampler.compute_nans = True` in library code).
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache


class EnvSwitches:
    """The run's environment switches off by default (registryoptin28's table), read once."""

    def __init__(self, run, test_side) -> None:
        self.run, self.test_side = run, test_side
        self._switches: Optional[dict] = None

    def switches(self) -> dict:
        if self._switches is None:
            from .registryoptin28 import env_switches

            run = self.run
            if not any(r.relpath.rsplit("/", 1)[-1] == "envs.py" for r in run.results):
                self._switches = {}
                return self._switches
            library = [j for j, r in enumerate(run.results) if r.relpath.endswith(".py") and not self.test_side(r.relpath)]
            self._switches = env_switches(run.results, library, run.text_of, run)
        return self._switches

    def read(self, node: ast.AST) -> Optional[str]:
        """What `envs.X` reads when X is a switch off by default ("`X` is off unless set (path:line)"), else None."""
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "envs"):
            return None
        return self.switches().get(node.attr)


def single_class_store(run, stored_at: set, attr: str) -> Optional[ast.Attribute]:
    """The first store `self.attr = ...` of the one module in `stored_at`, when every store of `.attr`
    there is `self.attr` inside one class; else None."""
    if len(stored_at) != 1:
        return None
    tree = run.tree(next(iter(stored_at)))
    if tree is None:
        return None
    parents = astcache.parents(tree)
    first, owner = None, None
    for node in astcache.nodes(tree, ast.Attribute):
        if node.attr != attr or isinstance(node.ctx, ast.Load):
            continue
        if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
            return None
        current = parents.get(id(node))
        while current is not None and not isinstance(current, ast.ClassDef):
            current = parents.get(id(current))
        if current is None or (owner is not None and current is not owner):
            return None
        owner, first = current, first or node
    return first
