"""The rule families: one module each, read top to bottom as its own documentation.

Each family (a `Family` subclass, see `base.py`) holds a docstring for users, the codes it emits,
its examples (tests and docs are generated from them: tests/test_family_examples.py,
docs/rules.md) and the hooks the dispatcher (`dispatch.py`) calls during the one traversal of a
file. Families never import each other; what they share is in `context.py`. The knowledge they
apply (which names, calls and keywords) is in the `rules/` tables.

`FAMILIES` is the order in which the dispatcher asks them about a node. The order matters only
where two families could decide on the same node: `CudaApi` answers for every `torch.cuda` name
(NPU202 for what it does not know), so it comes after the families that own a part of
`torch.cuda` (`Amp`: torch.cuda.amp; `Diagnostics`: CUDA graphs that capture training).
To add a rule: put it in the family whose codes it shares (its hundreds digit), with an example;
a new family is a new module here and one entry below.
"""

from __future__ import annotations

from .amp import Amp
from .attention import Attention
from .base import Example, Family
from .cli_env import CliEnv
from .cuda_api import CudaApi
from .device import Device
from .diagnostics import Diagnostics
from .distributed import Distributed

FAMILIES: tuple[type[Family], ...] = (Device, Distributed, Amp, Attention, CliEnv, Diagnostics, CudaApi)

__all__ = [
           "FAMILIES",
           "Amp",
           "Attention",
           "CliEnv",
           "CudaApi",
           "Device",
           "Diagnostics",
           "Distributed",
           "Example",
           "Family",
]
