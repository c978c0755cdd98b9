"""Issue #16 wave 25 (h112): a cold run parses a text once for all its whole-run passes
(npu_migrate/astcache.py, held by runplan.run_engine), within a memory budget, and no pass changes
a tree it shares."""

from __future__ import annotations

import ast
import collections

import pytest

from npu_migrate import astcache
from .precision_helpers import migrate_json, write_project

# (a lazy CUDA-library import reached only under another module's capability gate, a CUDA-only
# test of it, the platform module both read: several whole-run passes read each of these files)
FILES = {
    "pkg/__init__.py": "",
    "pkg/ops/fused.py": '''
        import torch
        from pkg.platform import current_platform

        class FusedGemm:
            def compile(self, key):
                import cutlass.cute as cute
                return cute.compile(key)

        def _get_kernel(rank):
            return FusedGemm(rank)

        def fused(x, rank):
            return _get_kernel(rank)(x)

        def warmup(sizes, rank):
            if not current_platform.has_device_capability(90):
                return
            _get_kernel(rank).warm(sizes)
    ''',
    "pkg/layer.py": '''
        import torch
        from pkg.ops.fused import fused
        from pkg.platform import current_platform

        class Layer(torch.nn.Module):
            def __init__(self, w):
                super().__init__()
                self._use_fused = w.dtype == torch.bfloat16 and current_platform.has_device_capability(90)

            def forward(self, x):
                use_fused = self._use_fused and x.shape[0] <= 64
                if use_fused:
                    return fused(x, self.rank)
                return x.cuda()
    ''',
    "pkg/platform.py": '''
        import torch

        class Platform:
            def has_device_capability(self, n):
                return torch.cuda.get_device_capability() >= (n // 10, n % 10)

        current_platform = Platform()
    ''',
    "tests/test_fused.py": '''
        import pytest
        import torch
        from pkg.ops.fused import fused

        @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
        def test_fused():
            x = torch.randn(4, device="cuda")
            torch.cuda.synchronize()
            assert fused(x, 0) is not None
    ''',
}


def _texts(root) -> dict[bytes, str]:
    return {p.read_bytes(): p.relative_to(root).as_posix() for p in root.rglob("*.py") if p.stat().st_size}


def test_a_whole_run_parses_each_file_at_most_twice(tmp_path, monkeypatch):
    """The engine's own parse (the hot-slice reduction) and one for every whole-run pass together;
    before the shared trees, the passes parsed the same files three and four times here (and about
    four times each over torch/_inductor, hundreds of files)."""
    root = write_project(tmp_path, FILES, dedent=True)
    texts = _texts(root)
    counts: collections.Counter = collections.Counter()
    real = ast.parse

    def counting(source, *args, **kwargs):
        if isinstance(source, bytes) and source in texts:
            counts[texts[source]] += 1
        return real(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting)
    astcache.clear()
    report = migrate_json(root)
    assert report["findings"]  # (the passes had something to read)
    assert set(counts) == {"pkg/ops/fused.py", "pkg/layer.py", "pkg/platform.py", "tests/test_fused.py"}
    assert max(counts.values()) <= 2, counts
    assert astcache.held() == (0, 0)  # (forgotten after the run)


def test_no_pass_changes_a_shared_tree(tmp_path, monkeypatch):
    """At the end of the whole-run passes, every kept tree still equals a fresh parse of its text
    (fields and positions): the passes only read what they share."""
    root = write_project(tmp_path, FILES, dedent=True)
    texts = list(_texts(root))
    seen: list = []
    real_clear = astcache.clear

    def checking_clear():
        seen.append((astcache.held()[1], astcache.changed(texts)))
        real_clear()

    monkeypatch.setattr(astcache, "clear", checking_clear)
    migrate_json(root)
    # (each of the four texts kept once, nothing else but the empty `__init__.py`: held bytes)
    assert seen and seen[-1][0] == sum(len(text) for text in texts) and seen[-1][1] == []


def test_the_kept_trees_stay_within_the_budget(monkeypatch):
    monkeypatch.setattr(astcache, "BUDGET", 60)
    bodies = [f"x{i} = {i}  # {'.' * 10}\n".encode() for i in range(6)]  # (21 bytes each)
    astcache.clear()
    with astcache.shared():
        trees = [astcache.parse(b) for b in bodies]
        assert astcache.held() == (2, 42)
        # the first two are kept, the last two among the recent ones, the others parsed again
        assert astcache.parse(bodies[5]) is trees[5] and astcache.parse(bodies[4]) is trees[4]
        assert astcache.parse(bodies[0]) is trees[0] and astcache.parse(bodies[1]) is trees[1]
        again = astcache.parse(bodies[2])
        assert again is not trees[2] and ast.dump(again) == ast.dump(trees[2])
        assert astcache.parse(b"def (:\n") is None
    assert astcache.held() == (0, 0)
    assert astcache.parse(bodies[5]) is not trees[5]  # (forgotten too)


def test_outside_a_run_only_the_last_two_are_kept():
    astcache.clear()
    bodies = [f"y = {i}\n".encode() for i in range(3)]
    first = astcache.parse(bodies[0])
    assert astcache.parse(bodies[0]) is first
    for body in bodies[1:]:
        astcache.parse(body)
    assert astcache.held() == (0, 0)
    assert astcache.parse(bodies[0]) is not first  # (evicted, as the two-tree cache did)
    astcache.clear()


@pytest.mark.parametrize("body", [b"z = 1\n", "z = 1\n"])
def test_bytes_and_text_each_parse(body):
    astcache.clear()
    assert ast.dump(astcache.parse(body)) == ast.dump(ast.parse(body))
    astcache.clear()


def test_the_walks_of_kept_trees_are_kept_with_them():
    """Within a run, a module's nodes and parents are worked out once, however the passes
    alternate between modules; outside, the one-module index works them out again."""
    astcache.clear()
    first, second = b"import torch\nx = torch.ones(1)\n", b"def f(y):\n    return y\n"
    with astcache.shared():
        a, b = astcache.parse(first), astcache.parse(second)
        parents_a = astcache.parents(a)
        parents_b = astcache.parents(b)
        assert astcache.parents(a) is parents_a and astcache.parents(b) is parents_b
        assert astcache.walk(a) is astcache.walk(a)
        assert [type(n) for n in astcache.walk(b)] == [type(n) for n in ast.walk(b)]
        assert astcache.changed([first, second]) == []
    a, b = ast.parse(first), ast.parse(second)
    parents_a = astcache.parents(a)
    astcache.parents(b)
    assert astcache.parents(a) is not parents_a and astcache.parents(a) == parents_a
    astcache.clear()


def test_a_text_two_files_hold_is_never_shared_between_them():
    """Two files with the same text get their own trees, as before the sharing (a pass may key
    what it learns of a file's functions by their `id`); a text one file holds is kept."""
    astcache.clear()
    twice, once = b"def helper(x):\n    return x.cuda()\n", b"import torch\n"
    others = [b"a = 1\n", b"b = 2\n"]
    with astcache.shared([twice, once, twice]):
        first, kept = astcache.parse(twice), astcache.parse(once)
        for other in others:
            astcache.parse(other)
        assert astcache.parse(once) is kept
        assert astcache.parse(twice) is not first  # (parsed again: only among the last two asked for)
        assert astcache.held()[0] == 3  # (once and the two others)
    astcache.clear()
