"""`make gpu-check` on this CPU (quick): every line a GPU host runs, with the embedded model,
so the check never rots. Its own two servers, started together and measured in turn: a
package of its own, so the shared server of tests/engine has stopped by then."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_the_gpu_check_passes_on_the_cpu(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu_check", "--platform", "cpu", "--quick", "--out-dir",
         str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    servers = results["servers"]
    assert set(servers) == {"specgate-ngram-one", "vllm-plain"}
    for name, found in servers.items():
        assert found["itl_ms_c1"] > 0 and found["itl_ms_c4"] > 0, name
        if name.startswith("specgate"):
            assert found["k2_drafts_some"] and found["k2_never_longer_than_2"], found
            assert found["off_drafts_nothing"] and found["greedy_equal"], found
    assert "| specgate-ngram-one |" in (tmp_path / "summary.md").read_text()
