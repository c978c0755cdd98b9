"""Wave-21 helper h92: wording, severity and single cases left from rounds 20-21 (issue #16)."""

from __future__ import annotations

from tests.precision_helpers import findings_at, migrate_json, scopes_at, write_project


def test_sdp_kernel_that_only_switches_fast_kernels_off_is_a_scope(tmp_path):
    """Round 21 BG#33: `sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True)`
    keeps the math backend; an NPU host ignores the switch: a named scope. Turning math off (only
    a fast kernel may run) stays a warning."""
    root = write_project(tmp_path, {"gen.py": (
        "import torch\n"
        "import torch.nn.functional as F\n"
        "\n"
        "\n"
        "def step(q, k, v):\n"
        "    with torch.backends.cuda.sdp_kernel(\n"
        "        enable_flash=False, enable_mem_efficient=False, enable_math=True\n"
        "    ):\n"
        "        return F.scaled_dot_product_attention(q, k, v)\n"
        "\n"
        "\n"
        "def fast(q, k, v):\n"
        "    with torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False):\n"
        "        return F.scaled_dot_product_attention(q, k, v)\n"
    )})
    report = migrate_json(root)
    found = findings_at(report, "gen.py", "NPU405")
    assert 6 not in found
    assert "only switches CUDA fast kernels off" in scopes_at(report, "gen.py", "NPU405")[6]
    assert found[13]["severity"] == "warning"
