"""``torch_npu`` and ``torch.npu`` with exactly the names of the torch_npu API table.

For the emulated torch_npu version (``NPU_MIGRATE_VNPU_VERSION``, default 2.7.1; any version of
rules/torch_npu_api.json):

- a name the table lacks for that version raises ``AttributeError``, as the real module would;
- a name the table has and the virtual NPU emulates is the emulation; an emulated function is
  called through the table's signature for the version, so a keyword the real function lacks
  raises ``TypeError`` (a CUDA-only keyword, say);
- a name the table has but the virtual NPU does not emulate is a stand-in: a function or class
  that raises ``NotImplementedError`` naming it when called, a module whose attributes follow
  these same rules (an ``import`` statement of such a module raises), and for other objects
  ``NotImplementedError`` on access. (Raising on access for functions would break
  ``hasattr``, which is True on the real module.)

``emulated_share()`` gives the share of the table's ``torch.npu`` functions that are emulated.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import os
import sys
import types

from npu_migrate import npu_api

VERSION_ENV = "NPU_MIGRATE_VNPU_VERSION"
DEFAULT_VERSION = "2.7.1"
_CALLABLE_KINDS = ("function", "class", "op", "atb_op", "method", "staticmethod", "unresolved")


def emulated_version() -> str:
    version = os.environ.get(VERSION_ENV) or DEFAULT_VERSION
    if version not in npu_api.versions():
        raise ImportError(f"{VERSION_ENV}={version!r}: the torch_npu API table has versions "
                          f"{', '.join(npu_api.versions())}")
    return version


def entry(qualname: str, version: str) -> dict | None:
    found = npu_api.lookup(qualname)
    if found is None or version not in found.get("versions", ()):
        return None
    return found


def children(prefix: str, version: str) -> dict[str, dict]:
    """Direct children ``name -> entry`` of ``prefix`` in the table for ``version``."""
    out = {}
    depth = prefix.count(".") + 1
    for name, found in npu_api.load_table()["names"].items():
        if name.startswith(prefix + ".") and name.count(".") == depth \
                and version in found.get("versions", ()):
            out[name.rsplit(".", 1)[1]] = found
    return out


_SENTINEL = object()
_KINDS = {
    "positional_only": inspect.Parameter.POSITIONAL_ONLY,
    "positional_or_keyword": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "var_positional": inspect.Parameter.VAR_POSITIONAL,
    "keyword_only": inspect.Parameter.KEYWORD_ONLY,
    "var_keyword": inspect.Parameter.VAR_KEYWORD,
}


def table_signature(found: dict, version: str) -> inspect.Signature | None:
    if "params" not in found:
        return None
    params = []
    for p in found["params"]:
        if version not in p.get("versions", found["versions"]):
            continue
        kind = _KINDS[p.get("kind", "positional_or_keyword")]
        default = _SENTINEL if "default" in p else inspect.Parameter.empty
        if kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            default = inspect.Parameter.empty
        params.append(inspect.Parameter(p["name"], kind, default=default))
    try:
        return inspect.Signature(params)
    except ValueError:
        return None


def _checked(qualname: str, impl, signature: inspect.Signature):
    @functools.wraps(impl)
    def call(*args, **kwargs):
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{qualname.rsplit('.', 1)[1]}() {exc}") from None
        return impl(*args, **kwargs)

    call.__signature__ = signature
    return call


def not_emulated_message(qualname: str, version: str) -> str:
    return (f"{qualname} is in torch_npu {version} but the virtual NPU (npu-migrate vnpu) does "
            f"not emulate it")


def _stub(qualname: str, found: dict, version: str):
    message = not_emulated_message(qualname, version)
    if found.get("kind") == "class":
        def __init__(self, *args, **kwargs):
            raise NotImplementedError(message)

        return type(qualname.rsplit(".", 1)[1], (), {"__init__": __init__, "__doc__": message,
                                                     "__module__": qualname.rsplit(".", 1)[0]})

    def stub(*args, **kwargs):
        raise NotImplementedError(message)

    stub.__name__ = stub.__qualname__ = qualname.rsplit(".", 1)[1]
    stub.__doc__ = message
    stub.__vnpu_stub__ = True
    return stub


class TableModule(types.ModuleType):
    """A module whose missing attributes are answered from the API table."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        qualname = f"{self.__name__}.{name}"
        version = emulated_version()
        found = entry(qualname, version)
        if found is None:
            raise AttributeError(f"module '{self.__name__}' has no attribute '{name}'")
        kind = found.get("kind")
        if kind == "module":
            value = stub_module(qualname)
        elif kind in _CALLABLE_KINDS:
            value = _stub(qualname, found, version)
        else:
            raise NotImplementedError(not_emulated_message(qualname, version))
        setattr(self, name, value)
        return value

    def __dir__(self):
        names = set(children(self.__name__, emulated_version()))
        names.update(k for k in self.__dict__ if not k.startswith("_"))
        return sorted(names)


def stub_module(qualname: str) -> TableModule:
    module = sys.modules.get(qualname)
    if module is None:
        module = TableModule(qualname, not_emulated_message(qualname, emulated_version()))
        module.__vnpu_stub__ = True
        module.__path__ = []  # a package: ``import`` of its submodules reaches StubFinder
        sys.modules[qualname] = module
    return module


def populate(module: types.ModuleType, pool: dict, version: str, private: dict = ()) -> list:
    """Set on ``module`` each table child that ``pool`` emulates; returns their names."""
    placed = []
    for name, found in children(module.__name__, version).items():
        impl = pool.get(name)
        if impl is None or found.get("kind") == "module":
            continue
        if found.get("kind") == "function" and callable(impl) and not isinstance(impl, type):
            signature = table_signature(found, version)
            if signature is not None:
                impl = _checked(f"{module.__name__}.{name}", impl, signature)
        setattr(module, name, impl)
        placed.append(name)
    for name, impl in dict(private).items():
        setattr(module, name, impl)
    return placed


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import torch_npu.X`` for a module X of the table that is not emulated raises
    NotImplementedError naming it (importing such a module may have effects the virtual NPU
    does not reproduce, torch_npu.contrib.transfer_to_npu's patching of torch.cuda say)."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("torch_npu."):
            return None
        found = entry(fullname, emulated_version())
        if found is None or found.get("kind") != "module":
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return stub_module(spec.name)

    def exec_module(self, module):
        # a package of the table (torch_npu.contrib) imports, so that its submodules can be
        # reached; a module without children in the table (transfer_to_npu) raises
        if not children(module.__name__, emulated_version()):
            sys.modules.pop(module.__name__, None)
            raise NotImplementedError(not_emulated_message(module.__name__, emulated_version()))


def emulated_share(version: str = DEFAULT_VERSION) -> tuple[int, int, list[str]]:
    """(emulated, total, missing names) over the table's ``torch.npu`` functions for a version.

    A function counts as emulated when the virtual NPU implements it (runtime.implementations);
    the functions are the table's direct children of ``torch_npu.npu`` of kind ``function``.
    """
    from . import runtime

    pool = runtime.implementations()
    functions = sorted(name for name, found in children("torch_npu.npu", version).items()
                       if found.get("kind") == "function")
    missing = [name for name in functions if name not in pool]
    return len(functions) - len(missing), len(functions), missing
