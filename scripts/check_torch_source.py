"""Refuse a GPU install that would get a CPU build of torch (make install ENGINE=gpu).

vLLM's CUDA wheel pins torch==2.13.0, and a CPU build (2.13.0+cpu) satisfies that pin: pip
takes it wherever a CPU-only index or a folder of CPU wheels is configured (as for
ENGINE=cpu), and the install "succeeds" with an engine that cannot see the GPU. This finds
such sources in pip's configuration and environment before anything is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CPU_INDEX_MARK = "/whl/cpu"


def pip_settings(python: str) -> dict[str, str]:
    """pip's effective index and find-links settings, as `pip config list` reports them."""
    done = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    )
    settings: dict[str, str] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(("index-url", "find-links")):
            settings[key] = value.strip("'\"")
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"):
        if os.environ.get(name):
            settings[name] = os.environ[name]
    return settings


def cpu_sources(settings: dict[str, str]) -> list[str]:
    found = []
    for key, value in settings.items():
        for source in value.split():
            if CPU_INDEX_MARK in source:
                found.append(f"{key}: {source}")
            elif "find-links" in key.lower() or key == "PIP_FIND_LINKS":
                folder = Path(source.removeprefix("file://"))
                if folder.is_dir() and any(folder.glob("torch-*+cpu*.whl")):
                    found.append(f"{key}: {source} (holds a CPU build of torch)")
    return found


def main() -> int:
    found = cpu_sources(pip_settings(sys.argv[1] if len(sys.argv) > 1 else sys.executable))
    if not found:
        return 0
    print(
        "ENGINE=gpu, but pip is set to find CPU builds of torch, which satisfy vLLM's "
        "torch pin and would give an engine that cannot use the GPU:\n  "
        + "\n  ".join(found)
        + "\nRemove them for this install (unset PIP_EXTRA_INDEX_URL / PIP_FIND_LINKS, or "
        "`pip config unset global.extra-index-url`), or use a fresh machine, and run again.",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
