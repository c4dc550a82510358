"""`make install ENGINE=gpu` refuses pip sources that would give it a CPU build of torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO

SCRIPT = REPO / "scripts" / "check_torch_source.py"


def check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # Only what the test sets: no pip configuration files, no inherited PIP_* variables.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    clean["PIP_CONFIG_FILE"] = os.devnull
    return subprocess.run(
        [sys.executable, str(SCRIPT)], env={**clean, **env}, capture_output=True, text=True
    )


def test_a_cpu_only_index_is_refused_with_the_way_out() -> None:
    done = check({"PIP_EXTRA_INDEX_URL": "https://download.pytorch.org/whl/cpu"})
    assert done.returncode == 2
    assert "PIP_EXTRA_INDEX_URL: https://download.pytorch.org/whl/cpu" in done.stderr
    assert "unset PIP_EXTRA_INDEX_URL" in done.stderr


def test_a_folder_of_cpu_wheels_is_refused(tmp_path: Path) -> None:
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    done = check({"PIP_FIND_LINKS": str(tmp_path)})
    assert done.returncode == 2
    assert "holds a CPU build of torch" in done.stderr


def test_ordinary_sources_pass(tmp_path: Path) -> None:
    (tmp_path / "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    done = check(
        {"PIP_EXTRA_INDEX_URL": "https://pypi.org/simple", "PIP_FIND_LINKS": str(tmp_path)}
    )
    assert done.returncode == 0, done.stderr


def test_only_the_gpu_install_runs_the_check(tmp_path: Path) -> None:
    def recipe(engine: str) -> str:
        return subprocess.run(
            ["make", "-n", "install", f"ENGINE={engine}", f"VENV={tmp_path / engine}"],
            cwd=SCRIPT.parent.parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    assert "check_torch_source.py" in recipe("gpu")
    assert "check_torch_source.py" not in recipe("cpu")
