"""Where the corpora of the robustness, comparison and benchmark scripts are: the installed torch
package, the standard library, or a folder named on the command line."""

from __future__ import annotations

import importlib.util
import sysconfig
from pathlib import Path


def corpus_root(name: str) -> Path:
    """The folder of corpus `name` ("torch", "stdlib" or a folder); LookupError when there is none."""
    if name == "torch":
        spec = importlib.util.find_spec("torch")  # finds the package without importing it
        if spec is None or not spec.submodule_search_locations:
            raise LookupError("torch is not installed in this interpreter (pip install torch==2.13.0)")
        return Path(next(iter(spec.submodule_search_locations)))
    if name == "stdlib":
        return Path(sysconfig.get_paths()["stdlib"])
    if Path(name).is_dir():
        return Path(name).absolute()
    raise LookupError(f"{name}: not a corpus name (torch, stdlib, both) nor a folder")
