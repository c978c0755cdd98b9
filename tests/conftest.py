"""Session-wide test settings."""

import os
import tempfile

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_result_cache():
    """The result cache of every run in the tests (in-process and subprocesses, which inherit the
    environment) goes to a folder of this session, never the user's ~/.cache."""
    with tempfile.TemporaryDirectory(prefix="npu-migrate-test-cache-") as folder:
        # the cache's signing key too (cache.py keeps it outside the cache folder)
        config = os.path.join(folder, "config")
        os.mkdir(config, 0o700)
        saved = {name: os.environ.get(name) for name in ("NPU_MIGRATE_CACHE_DIR", "XDG_CONFIG_HOME")}
        os.environ["NPU_MIGRATE_CACHE_DIR"] = os.path.join(folder, "cache")
        os.environ["XDG_CONFIG_HOME"] = config
        yield folder
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
