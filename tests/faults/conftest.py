"""One server killed mid-load, and the server restarted on its ledger, for the package."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.engine.server import ServerProcess
from tests.faults.kill_mid_load import AfterAKill, kill_mid_load


@pytest.fixture(scope="package")
def after_a_kill(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AfterAKill]:
    found = kill_mid_load(tmp_path_factory.mktemp("kill"))
    yield found
    found.restarted.stop(signal.SIGKILL)  # the fault tests end its life; this, if they did not


@pytest.fixture(scope="package")
def server(after_a_kill: AfterAKill) -> ServerProcess:
    """The fault tests' server: the one restarted after the kill."""
    return after_a_kill.restarted
