"""Helpers of a test module reached on an NPU host only from its skipped tests or when the module is run
as a script (issue #16, round-29 audit DC#12; policy P1). Per file, from run.migrate_file (after
mocked29.py).

testscopes.py turns a module-level helper into a named scope when every reference to it lies in a
test an NPU host skips (`HELPER_NOTE`). vLLM's `tests/models/deepseek_v41/nvidia/specialized_decode/
test_numerics.py` also runs its checks as a script:

    def _worker(rank, port, replays, skip_path):     # ... _check_replays(...): torch.cuda.CUDAGraph()
    def run(replays):                                 # torch.multiprocessing.spawn(_worker, ...)

    @pytest.mark.skipif(not current_platform.is_device_capability_family(100), reason="needs SM100")
    def test_specialized_decode_numerics():
        ...
        skipped = run(REPLAYS)

    if __name__ == "__main__":
        ...
        skipped = run(parser.parse_args().replays)

The reference in the `__main__` block kept `run` (and all it reaches) reported as errors. Under
pytest the test is skipped on an NPU host; the helpers run there only when a user runs the test
module itself as a script (`python tests/.../test_numerics.py`): an explicit choice, read as policy
P1 reads an opt-in. Their report-only errors and warnings become info naming that block and the
skip, never a scope (the user may run it there): "reached on an NPU host only when this test module
is run as a script (...)".

Where this holds: a test file (importgates.is_test) with a module-level `if __name__ == "__main__":`
block and at least one test testscopes skips off CUDA; the helper (a module-level function) has
every reference in such a skipped test, in another such helper, or in that block, and at least one
not in the block (a helper only the script calls is the script's own code: kept).

Kept (the nearest true cases): a helper a test that runs on an NPU host also calls, a test module
with no skipped test (its `__main__` block is then its plain entry), and code of the block itself.
"""

from __future__ import annotations

import ast
from typing import Optional

from . import astcache

SCRIPT = ("reached on an NPU host only when this test module is run as a script (its `if __name__ == "
          "\"__main__\":` block, line {line}): under pytest the tests that call it are skipped there ({skip})")


def _main_block(tree: ast.Module) -> Optional[ast.If]:
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare) and len(stmt.test.ops) == 1 \
                and isinstance(stmt.test.ops[0], ast.Eq) and astcache.dotted(stmt.test.left) == "__name__" \
                and isinstance(stmt.test.comparators[0], ast.Constant) and stmt.test.comparators[0].value == "__main__":
            return stmt
    return None


def review(findings: list, text: str, relpath: str) -> list:
    """`findings`, with the open places in such helpers lowered to info (P1)."""
    from .importgates import is_test
    from .testscopes import HELPER_NOTE, cuda_only_test_scopes, helper_scopes

    wanted = [f for f in findings if not f.fixable and f.cell is None and f.severity in ("error", "warning")]
    if not wanted or not is_test(relpath) or "__main__" not in text:
        return findings
    tree = astcache.parse(text.encode("utf-8", "surrogatepass"))
    block = None if tree is None else _main_block(tree)
    if block is None:
        return findings
    scopes = [s for s in cuda_only_test_scopes(text) if not s[2].startswith(HELPER_NOTE)]
    if not scopes:
        return findings
    marker = "\0script"
    first, last = block.lineno, block.end_lineno or block.lineno
    with_script = helper_scopes(tree, [*scopes, (first, last, marker)])
    without = {(a, b) for a, b, _w in helper_scopes(tree, scopes)}
    # (a helper only the script reaches is the script's own: `helper_scopes` names the first
    # reference's reason, so one reached from a skipped test shows that test's condition)
    spans = [(a, b, why.split(": ", 1)[-1]) for a, b, why in with_script if (a, b) not in without]
    spans = [(a, b, why) for a, b, why in spans if why != marker]
    if not spans:
        return findings
    from .envskips29 import lower_places

    def reason_of(line: int) -> Optional[str]:
        span = next((s for s in spans if s[0] <= line <= s[1]), None)
        return None if span is None else SCRIPT.format(line=first, skip=f"`{span[2]}`")

    out, changed = [], False
    for finding in findings:
        pieces = lower_places(finding, reason_of) if any(finding is w for w in wanted) else None
        changed = changed or pieces is not None
        out.extend([finding] if pieces is None else pieces)
    return sorted(out) if changed else findings
