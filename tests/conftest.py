"""Session-wide test settings."""

import os
import tempfile

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_result_cache():
    """The result cache of every run in the tests (in-process and subprocesses, which inherit the
    environment) goes to a folder of this session, never the user's ~/.cache."""
    with tempfile.TemporaryDirectory(prefix="npu-migrate-test-cache-") as folder:
        previous = os.environ.get("NPU_MIGRATE_CACHE_DIR")
        os.environ["NPU_MIGRATE_CACHE_DIR"] = folder
        yield folder
        if previous is None:
            os.environ.pop("NPU_MIGRATE_CACHE_DIR", None)
        else:
            os.environ["NPU_MIGRATE_CACHE_DIR"] = previous
