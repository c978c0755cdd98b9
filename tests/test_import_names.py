"""A file's imports of CUDA-only packages are one NPU911 finding (`per_file = "code"`): the finding
names every package among its places, and a place split off again (the first import made a named
scope) names its own module, not the first one's (round-21 audit BH#28: `import deep_gemm.utils.layout`
reported as "import from `sgl_kernel`")."""

from tests.precision_helpers import findings_at, migrate_json, write_project

OPS = '''\
import torch
from sgl_kernel import fused_op


def transform(x):
    import deep_gemm.utils.layout
    return deep_gemm.utils.layout.f(x)
'''

UTILS = '''\
import torch


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda is not None
'''

GATED = '''\
import torch

from pkg.utils import is_cuda

_is_cuda = is_cuda()
if _is_cuda:
    from sgl_kernel import fused_op


def transform(x):
    import deep_gemm.utils.layout
    return deep_gemm.utils.layout.f(x)


def align(x):
    from deep_gemm.utils import align
    return align(x)
'''


def test_merged_imports_name_every_package(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/ops.py": OPS}))
    message = findings_at(report, "pkg/ops.py", "NPU911")[2]["message"]
    assert "import from `sgl_kernel`" in message and "(with imports of `deep_gemm` in this file)" in message
    assert message.endswith("(also at line 6)"), message


def test_a_split_off_import_names_its_own_module(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/__init__.py": "", "pkg/utils.py": UTILS,
                                                   "pkg/ops.py": GATED}))
    found = findings_at(report, "pkg/ops.py", "NPU911")
    assert sorted(found) == [11], found  # (line 7, under `if _is_cuda:`, is a named scope)
    message = found[11]["message"]
    assert "import of `deep_gemm.utils.layout`" in message and "sgl_kernel" not in message, message
    assert "module level" not in message  # (a function's import)
