"""Reading Dockerfiles and the shell commands in README code blocks, for test_containers.py."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
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


def shell_commands(markdown: str) -> list[tuple[int, list[str]]]:
    """(line number, argv) of every command in the sh/bash code blocks of a Markdown text."""
    commands: list[tuple[int, list[str]]] = []
    in_shell_block = False
    buffer, start = "", 0
    for number, line in enumerate(markdown.splitlines(), start=1):
        fence = re.match(r"^```(\w*)", line)
        if fence:
            in_shell_block = not in_shell_block and fence.group(1) in {"sh", "bash"}
            buffer = ""
            continue
        if not in_shell_block:
            continue
        if not buffer:
            start = number
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        try:
            argv = shlex.split(buffer, comments=True)
        except ValueError:  # a quoted argument goes on over the next line
            buffer += "\n"
            continue
        if argv:
            commands.append((start, argv))
        buffer = ""
    return commands


# docker's options that take a value; any option in neither set fails the parse, so that a
# new one is classified here rather than misread as the image name.
RUN_VALUE_OPTIONS = {
    "-e", "--env", "--env-file", "-p", "--publish", "-v", "--volume", "--mount", "--name",
    "--gpus", "--network", "--ipc", "--shm-size", "--entrypoint", "--cap-add", "--user", "-u",
    "-w", "--workdir", "--security-opt", "--restart", "--runtime", "--stop-timeout",
}  # fmt: skip
RUN_FLAGS = {"-d", "--detach", "--rm", "-i", "-t", "-it", "--init", "--no-healthcheck"}
EXEC_VALUE_OPTIONS = {"-e", "--env", "-u", "--user", "-w", "--workdir"}
EXEC_FLAGS = {"-d", "--detach", "-i", "-t", "-it"}


@dataclass
class DockerInvocation:
    """`docker run [options] IMAGE args` or `docker exec [options] CONTAINER args`."""

    target: str  # the image (run) or the container (exec)
    args: list[str]
    options: dict[str, list[str]] = field(default_factory=dict)


def parse_docker(argv: list[str]) -> DockerInvocation:
    assert argv[:2] in (["docker", "run"], ["docker", "exec"]), argv
    value_options, flags = (
        (RUN_VALUE_OPTIONS, RUN_FLAGS) if argv[1] == "run" else (EXEC_VALUE_OPTIONS, EXEC_FLAGS)
    )
    options: dict[str, list[str]] = {}
    rest = argv[2:]
    while rest and rest[0].startswith("-"):
        option, has_value, value = rest.pop(0).partition("=")
        if option in flags and not has_value:
            options.setdefault(option, [])
        elif option in value_options:
            options.setdefault(option, []).append(value if has_value else rest.pop(0))
        else:
            raise AssertionError(f"unknown `docker {argv[1]}` option {option!r}: classify it")
    assert rest, f"no image or container in {argv}"
    return DockerInvocation(target=rest[0], args=rest[1:], options=options)
