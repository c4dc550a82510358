"""What every benchmark run leaves (bench/manifest.py), and the one server launcher that
benchmarks and tests share (bench/servers.py), on a server that starts in a second."""

from __future__ import annotations

import json
import signal
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from bench import manifest
from bench.servers import ServerError, ServerProcess, module_spec, serve


def test_a_run_records_its_command_commit_machine_and_times(tmp_path: Path) -> None:
    with manifest.recorded_run("bench.relay", tmp_path / "run", ["--repeats", "1"]) as run:
        during = json.loads((run.folder / "manifest.json").read_text())
        assert during["outcome"] == "running" and during["ended"] is None
    written = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert written["command"] == "python -m bench.relay --repeats 1"
    assert written["argv"][1:] == ["-m", "bench.relay", "--repeats", "1"]
    assert len(written["git"]["commit"]) == 40 and isinstance(written["git"]["dirty"], bool)
    machine = written["machine"]
    assert machine["cpu_cores"] >= 1 and machine["memory_gib"] > 0 and machine["cpu_model"]
    assert machine["python"] and machine["os"] and "gpu" in machine
    started = datetime.fromisoformat(written["started"])
    assert started.utcoffset() is not None and written["started"].endswith("+00:00")
    assert datetime.fromisoformat(written["ended"]) >= started
    assert written["outcome"] == "completed" and written["reconstructed"] is False


def test_a_failed_run_says_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError), manifest.recorded_run("bench.run", tmp_path, []):
        raise ValueError("a server did not start")
    assert json.loads((tmp_path / "manifest.json").read_text())["outcome"] == "failed"


def test_each_run_gets_a_folder_of_its_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(manifest, "RESULTS", tmp_path)
    run = manifest.start_run("bench.load_phases", None, [])
    commit = run.git["commit"][:7]
    assert run.folder.parent == tmp_path / "load_phases"
    assert run.folder.name == f"{run.started:%Y%m%dT%H%M%SZ}-{commit}"
    assert (run.folder / "manifest.json").exists()


def test_every_committed_result_has_a_manifest() -> None:
    results = manifest.RESULTS
    for data in results.rglob("results.json"):
        assert data.parent.parent.parent == results, f"{data}: not in <entry>/<run id>/"
        found = json.loads((data.parent / "manifest.json").read_text())
        assert found["entry"].endswith(data.parent.parent.name), data
        assert len(found["git"]["commit"]) == 40 and "started" in found, data
        # A manifest written afterwards says where its facts came from.
        assert found["started"] or found["reconstructed"], data
        assert not found["reconstructed"] or found["sources"], data


def test_the_launcher_starts_waits_and_stops_a_server(tmp_path: Path) -> None:
    spec = module_spec("bench.stream_upstream", ["--tokens", "4"], name="upstream")
    with serve(spec, 0, tmp_path, startup_timeout_s=60) as server:
        assert server.port and server.startup_s > 0
        pid = server.process.pid
        assert psutil.Process(pid).pid == pid
    assert server.process.returncode is not None
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert (tmp_path / "upstream.log").exists()


def test_a_server_that_exits_at_start_is_an_error_with_its_log(tmp_path: Path) -> None:
    spec = module_spec("bench.stream_upstream", ["--no-such-flag"], name="broken")
    server = ServerProcess(spec, tmp_path / "broken.log")
    with pytest.raises(ServerError, match="no-such-flag"):
        server.wait_ready(timeout_s=60)
    assert server.stop(signal.SIGTERM) == []
