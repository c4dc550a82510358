"""Real-engine tests with --engine-layout one: one speculative engine serves both routes.

A documented subset of tests/engine runs here against a server in this layout (see
test_shared_suite.py), plus what only this layout has. One server for the package.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import astuple

import pytest

from app.routing.goodput import CPU_STEP_PRIOR
from tests.engine.conftest import ADMISSION_ARGS, async_client, model_dir, sync_client
from tests.engine.server import ServerProcess, package_server

__all__ = ["async_client", "model_dir", "sync_client"]


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("server_one") / "specgate.log"
    # The draft planner holds the CPU prior's step-cost line: these tests check what the rule
    # does with each request's acceptance, and a line learned on a machine that others' work
    # slows would make that depend on the machine (a poem drafted half its replay there).
    step_cost = ",".join(str(term) for term in astuple(CPU_STEP_PRIOR))
    args = [
        "--engine-layout", "one",
        "--routing-exploration", "0",
        "--draft-step-cost", step_cost,
        *ADMISSION_ARGS,
    ]  # fmt: skip
    with package_server(args, log) as process:
        yield process
