"""Reading Dockerfiles, for test_containers.py."""

from __future__ import annotations

from pathlib import Path

Instruction = tuple[str, str]  # ("RUN", "pip install ...")


def dockerfile_stages(path: Path) -> list[list[Instruction]]:
    """The instructions of each stage, in order; continuation lines joined, comments dropped."""
    stages: list[list[Instruction]] = [[]]  # ARGs before the first FROM form stage "0"
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        pending = ""
        if keyword.upper() == "FROM":
            stages.append([])
        stages[-1].append((keyword.upper(), " ".join(rest.split())))
    return stages[1:]
