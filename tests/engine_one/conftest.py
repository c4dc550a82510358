"""Real-engine tests with --engine-layout one: one speculative engine serves both routes.

A documented subset of tests/engine runs here against a server in this layout (see
test_shared_suite.py), plus what only this layout has. One server for the package.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.engine.conftest import (
    ADMISSION_ARGS,
    HELD_CPU_STEP_COST,
    NGRAM_ARGS,
    async_client,
    model_dir,
    sync_client,
)
from tests.engine.server import ServerProcess, package_server

__all__ = ["async_client", "model_dir", "sync_client"]


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("server_one") / "specgate.log"
    # These tests check what the rule does with each request's acceptance: the line is held.
    args = [
        "--engine-layout", "one",
        *NGRAM_ARGS,
        "--routing-exploration", "0",
        *HELD_CPU_STEP_COST,
        *ADMISSION_ARGS,
    ]  # fmt: skip
    with package_server(args, log) as process:
        yield process
