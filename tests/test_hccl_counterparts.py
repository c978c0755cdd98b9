"""NCCL variables with an HCCL counterpart (rules/env.toml `[hccl_counterpart]`): the NPU602
message names the counterpart and what differs in its values, so that a value valid for NCCL is
not carried over to HCCL blindly (NCCL_IB_TIMEOUT=22 is out of HCCL_RDMA_TIMEOUT's 5-20 on A2/A3)."""

from npu_migrate import catalogue
from tests.precision_helpers import findings_at, migrate_json, write_project

RDMA = '''\
import os


def tune_rdma():
    os.environ["NCCL_IB_TIMEOUT"] = "22"
    os.environ["NCCL_IB_QPS_PER_CONNECTION"] = "4"
    os.environ["NCCL_IB_HCA"] = "mlx5"
'''


def test_every_counterpart_says_what_differs_in_its_values():
    env = catalogue.env_table()
    pairs, values = env["hccl_counterpart"], env["hccl_counterpart_values"]
    assert set(values) == set(pairs)
    for nccl, hccl in pairs.items():
        assert nccl.startswith("NCCL_") and hccl.startswith("HCCL_"), (nccl, hccl)


def test_rdma_timeout_and_queue_pairs_name_counterpart_and_value_range(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/rdma.py": RDMA}))
    findings = findings_at(report, "pkg/rdma.py", "NPU602")
    assert sorted(findings) == [5], findings  # one block of settings, one finding
    message = findings[5]["message"]
    assert "`HCCL_RDMA_TIMEOUT`" in message and "5-20" in message, message
    # the counterpart of a variable folded into the block's finding is named too, the variable
    # with none (NCCL_IB_HCA, the HCA device list) is not given one
    assert "`NCCL_IB_QPS_PER_CONNECTION` -> `HCCL_RDMA_QPS_PER_CONNECTION`" in message, message
    assert "NCCL_IB_HCA` ->" not in message
    assert message.endswith("(also at lines 6, 7)"), message
    assert findings[5]["severity"] == "info"


def test_block_without_counterparts_names_none(tmp_path):
    report = migrate_json(write_project(tmp_path, {"pkg/hca.py": HCA}))
    message = findings_at(report, "pkg/hca.py", "NPU602")[5]["message"]
    assert "no one-to-one HCCL counterpart" in message and "HCCL counterparts:" not in message, message


HCA = '''\
import os


def tune_hca():
    os.environ["NCCL_IB_HCA"] = "mlx5"
    os.environ["NCCL_IB_GID_INDEX"] = "3"
'''


SCRIPT = '''\
#!/bin/bash
export NCCL_CROSS_NIC=0
export NCCL_IB_TIMEOUT=22
export NCCL_IB_TC=106
python train.py

export NCCL_IB_SL=3
export NCCL_IB_HCA=mlx5
'''


def test_script_variables_name_their_counterparts_too(tmp_path):
    """NPU703 (scripts and configs) said "no one-to-one Ascend counterpart" for every NCCL variable,
    also for the ones HCCL has (round-20 audit BC#1 lists NCCL_IB_TIMEOUT and NCCL_IB_TC in such a
    block)."""
    report = migrate_json(write_project(tmp_path, {"scripts/run.sh": SCRIPT}))
    findings = findings_at(report, "scripts/run.sh", "NPU703")
    assert sorted(findings) == [2, 7], findings
    block = findings[2]["message"]  # NCCL_CROSS_NIC has none; the two folded into it have one
    assert block.startswith("Environment variable `NCCL_CROSS_NIC` has no one-to-one"), block
    assert "`NCCL_IB_TIMEOUT` -> `HCCL_RDMA_TIMEOUT`, `NCCL_IB_TC` -> `HCCL_RDMA_TC`" in block, block
    own = findings[7]["message"]  # the anchor has one itself, the HCA list folded into it has none
    assert "has the HCCL counterpart `HCCL_RDMA_SL`" in own and "0-7" in own, own
    assert "no one-to-one" not in own and "NCCL_IB_HCA` ->" not in own, own
