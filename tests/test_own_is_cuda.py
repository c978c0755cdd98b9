"""`R.is_cuda` where the code stores `R.is_cuda` itself (round 34 IA#26, vLLM's
`examples/features/logits_processor/custom_req_init.py`): the object's own attribute, left as
written and not reported; torch's `Tensor.is_cuda` beside it is still rewritten (NPU106), and a
mock's stored `is_cuda` that the file never reads keeps its finding."""

from __future__ import annotations

from npu_migrate import catalogue
from npu_migrate.engine import migrate_source
from npu_migrate.model import Options

ENABLED = catalogue.enabled_codes()


def _run(text: str, relpath: str = "pkg/mod.py"):
    result = migrate_source(text.encode(), relpath, Options(enabled=ENABLED))
    return result.findings, (result.new or result.original).decode()


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


OWN = '''\
import torch


class Processor:
    def __init__(self, device: torch.device):
        self.is_cuda = device.type == "cuda"

    def apply(self, logits, x):
        if not self.is_cuda:
            return logits
        if x.is_cuda:
            return logits * 2
        return logits
'''


def test_a_stored_attribute_is_left_and_a_tensor_beside_it_is_rewritten():
    findings, new = _run(OWN)
    # the stored comparison is rewritten; the attribute it is stored in is the object's own
    assert "self.is_cuda = npu_compat.is_accelerator_type(device.type)" in new
    assert "if not self.is_cuda:" in new
    assert "on_accelerator(self)" not in new
    # nearest true case: a tensor's `is_cuda` in the same file
    assert "if npu_compat.on_accelerator(x):" in new
    store, read = _line(OWN, "self.is_cuda ="), _line(OWN, "not self.is_cuda")
    assert not [f for f in findings if f.line in (store, read) and f.code in ("NPU106", "NPU990")]
    assert any(f.code == "NPU106" and f.line == _line(OWN, "x.is_cuda") for f in findings)


MEMBER = '''\
import torch


class Wrapper:
    @property
    def is_cuda(self):
        return self.inner.device.type == "cuda"

    def place(self):
        return "accel" if self.is_cuda else "host"


class Plain:
    def place(self):
        return "accel" if self.is_cuda else "host"
'''


def test_a_class_defining_is_cuda_reads_its_own_member_and_another_class_does_not():
    findings, new = _run(MEMBER)
    wrapper, plain = new.split("class Plain")
    assert '"accel" if self.is_cuda else "host"' in wrapper and "on_accelerator" not in wrapper
    # nearest true case: a class without such a member reads torch's property (a Tensor subclass)
    assert '"accel" if npu_compat.on_accelerator(self) else "host"' in plain


MOCK = '''\
from unittest import mock

from pkg.ops import run


def test_run_takes_the_cuda_path():
    tensor = mock.MagicMock()
    tensor.is_cuda = True
    assert run(tensor) == "cuda path"
'''


def test_a_mocks_stored_is_cuda_the_file_never_reads_keeps_its_finding():
    findings, new = _run(MOCK, "tests/test_run.py")
    assert "tensor.is_cuda = True" in new
    assert any(f.line == _line(MOCK, "tensor.is_cuda = True") for f in findings)
