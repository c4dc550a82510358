"""`make image-check`'s plan, checked without building: the runtime and its flags, the
stand-ins, the pip sources the build receives, and the run arguments (scripts/image_check.py).
The build and the run themselves are a documented command, too slow for CI (docs/deployment.md).
"""

from __future__ import annotations

import http.client
from pathlib import Path

import pytest

from app.encoders.common import route_headers
from scripts import gpu_image_check
from scripts.image_check import CPU_DOCKERFILE, ROUTE_HEADERS, serving
from scripts.image_plan import (
    CERT_IN_BUILD,
    CERT_SECRET,
    STOP_TIMEOUT_SECONDS,
    base_images,
    choose_runtime,
    full_name,
    pip_settings,
    pip_sources,
    run_flags,
    stand_in_packages,
    stream_ended_cleanly,
)
from tests.docker_text import dockerfile_stages, parse_docker, shell_commands
from tests.paths import REPO

LIMITS = {"nofile": (20000, 20000), "nproc": (96367, 96367)}
PODMAN = choose_runtime(docker_answers=False, podman=True, runc=True, **LIMITS)
DOCKER = choose_runtime(docker_answers=True, podman=True, runc=True, **LIMITS)
# This machine's `pip config list`, as the image check met it.
LISTING = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.find-links='/opt/wheels'
global.cert='/etc/other.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/srv/ignored'
"""


# -- runtime ----------------------------------------------------------------------------------


def test_docker_is_used_when_its_engine_answers_else_podman() -> None:
    assert DOCKER.cli == "docker" and DOCKER("build") == ["docker", "build"]
    assert PODMAN.cli == "podman" and PODMAN("run") == ["podman", "--runtime", "runc", "run"]
    with pytest.raises(SystemExit, match="Podman is missing"):
        choose_runtime(docker_answers=False, podman=False, runc=False, **LIMITS)


def test_containers_get_limits_the_sandbox_can_set_and_builds_keep_the_healthcheck() -> None:
    limits = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]
    for runtime in (DOCKER, PODMAN):
        assert runtime.run_flags == tuple(limits)
        assert ["--network", "host"] == list(runtime.build_flags[-6:-4])  # pip sources on loopback
    # Podman's default OCI format drops HEALTHCHECK; crun fails on hybrid cgroups.
    assert PODMAN.build_flags[:4] == ("--runtime", "runc", "--format", "docker")
    no_runc = choose_runtime(docker_answers=False, podman=True, runc=False, **LIMITS)
    assert no_runc.global_flags == () and "--runtime" not in no_runc.build_flags


# -- bases and stand-ins --------------------------------------------------------------------------


def test_the_bases_are_read_from_the_dockerfiles() -> None:
    assert base_images(CPU_DOCKERFILE.read_text()) == [
        "docker.io/library/python:3.11-bookworm",
        "docker.io/library/python:3.11-slim-bookworm",
    ]
    pinned = gpu_image_check.VLLM_VERSION
    assert base_images((REPO / "Dockerfile").read_text()) == [
        f"docker.io/vllm/vllm-openai:v{pinned}"
    ]
    assert full_name("registry.example:5000/team/image:1") == "registry.example:5000/team/image:1"
    assert full_name("localhost/specgate:cpu") == "localhost/specgate:cpu"


BUILD_TOOLS = {"build-essential", "g++", "gcc", "python3-dev"}


def test_stand_ins_have_what_each_stage_runs_and_no_more() -> None:
    build = stand_in_packages("docker.io/library/python:3.11-bookworm")
    runtime = stand_in_packages("docker.io/library/python:3.11-slim-bookworm")
    # The Dockerfile calls `python`, which Debian has only with python-is-python3.
    assert {"python3", "python-is-python3", "ca-certificates"} <= set(build) & set(runtime)
    assert {"python3-venv", *BUILD_TOOLS - {"g++", "gcc"}} <= set(build)
    assert "passwd" in runtime and not BUILD_TOOLS & set(runtime)  # useradd, no compiler
    # Debian 12's Python is 3.11: another version has no stand-in.
    with pytest.raises(SystemExit, match="no stand-in"):
        stand_in_packages("docker.io/library/python:3.12-bookworm")


# -- pip sources ----------------------------------------------------------------------------------


def test_pips_own_precedence_decides_each_setting() -> None:
    settings = pip_settings(LISTING + "install.find-links='/srv/install'\n")
    assert settings["cert"] == "/etc/ssl/certs/ca-certificates.crt"  # the environment first
    assert settings["find-links"] == "/opt/wheels"
    assert pip_settings("global.find-links='/a'\ninstall.find-links='/b'\n")["find-links"] == "/b"


def test_local_sources_are_served_on_loopback_and_the_cert_is_a_secret() -> None:
    sources = pip_sources(pip_settings(LISTING), port=4321)
    assert sources.build_args == {
        "PIP_EXTRA_INDEX_URL": "http://127.0.0.1:4321/opt/pypi/simple/ "
        "http://127.0.0.1:4321/opt/pypi-more/simple/",
        "PIP_FIND_LINKS": "http://127.0.0.1:4321/opt/wheels/",
        "PIP_CERT": CERT_IN_BUILD,
    }
    # An index's pages link to ../../files/: its parent is served, and nothing else.
    assert sources.served == ("/opt/pypi", "/opt/pypi-more", "/opt/wheels")
    flags = sources.build_flags()
    assert flags[-1] == f"--secret=id={CERT_SECRET},src=/etc/ssl/certs/ca-certificates.crt"
    assert "constraint" not in " ".join(flags)  # this machine's caps are not the image's


def test_a_machine_without_local_sources_builds_with_the_dockerfiles_defaults() -> None:
    assert pip_sources({}).build_args == {} and pip_sources({}).build_flags() == []
    remote = pip_sources({"extra-index-url": "https://download.pytorch.org/whl/cpu"})
    assert remote.build_args == {"PIP_EXTRA_INDEX_URL": "https://download.pytorch.org/whl/cpu"}
    assert remote.served == ()


def test_the_cpu_dockerfile_takes_every_build_argument_and_the_secret() -> None:
    build = dockerfile_stages(CPU_DOCKERFILE)[0]
    declared = {rest.partition("=")[0] for keyword, rest in build if keyword == "ARG"}
    assert {"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CERT"} <= declared
    # Every step that runs pip mounts the secret where PIP_CERT points.
    runs = [rest for keyword, rest in build if keyword == "RUN"]
    pip_steps = [r for r in runs if "pip install" in r or "install_arctic_inference" in r]
    assert len(pip_steps) == 3
    for step in pip_steps:
        assert step.startswith(f"--mount=type=secret,id={CERT_SECRET} ")
    assert CERT_IN_BUILD == f"/run/secrets/{CERT_SECRET}"  # a secret's default target


def test_an_edit_to_app_leaves_the_dependencies_cached() -> None:
    # The dependencies' layer (6 to 7 minutes) comes before `COPY app`: an edit to app/
    # rebuilt the image in 2 minutes rather than 7.
    build = dockerfile_stages(CPU_DOCKERFILE)[0]
    dependencies = next(i for i, (k, rest) in enumerate(build) if '"/src[cpu]"' in rest)
    copy_app = build.index(("COPY", "app /src/app"))
    assert dependencies < copy_app
    assert "pip install --no-cache-dir --no-deps /src" in build[copy_app + 1][1]


def test_only_the_source_folders_are_served(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "a-1.0-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "private").write_text("not for the build")

    def status(path: str) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", 38766, timeout=10)
        connection.request("GET", path)
        return connection.getresponse().status

    with serving([str(wheels)], port=38766):
        assert status(f"{wheels}/a-1.0-py3-none-any.whl") == 200
        assert status(f"{wheels}/") == 200  # the listing pip reads as find-links
        assert status(f"{tmp_path}/private") == 404
        assert status(f"{wheels}/../private") == 404


# -- running ---------------------------------------------------------------------------------


def documented_cpu_run() -> dict[str, list[str]]:
    text = (REPO / "docs" / "deployment.md").read_text()
    (options,) = [
        parse_docker(argv).options
        for _, argv in shell_commands(text)
        if argv[:2] == ["docker", "run"] and argv[-1] == "specgate:cpu"
    ]
    return options


def test_the_container_runs_as_documented_on_loopback() -> None:
    flags = run_flags(PODMAN, 5555, sys_nice=True)
    documented = documented_cpu_run()
    for option in ("--shm-size", "--cap-add", "--stop-timeout"):
        assert flags[flags.index(option) + 1] == documented[option][0], option
    assert documented["--stop-timeout"] == [str(STOP_TIMEOUT_SECONDS)]
    assert flags[flags.index("-p") + 1] == "127.0.0.1:5555:8000"
    assert "--cap-add" not in run_flags(PODMAN, 5555, sys_nice=False)


def test_the_headers_checked_are_the_ones_the_server_sets() -> None:
    class Decision:
        route, reason = "plain", "why"
        workload_class = type("Class", (), {"value": "open-ended"})()

    class Run:
        decision, request_id = Decision(), "id"

    assert set(ROUTE_HEADERS) | {"x-request-id"} == set(route_headers(Run()))  # type: ignore[arg-type]


def test_a_stream_is_clean_only_when_cut_with_the_error_event_and_done() -> None:
    token = 'data: {"choices": [{"text": "1"}]}'
    cut = 'data: {"error": {"code": "server_shutting_down"}}'
    assert stream_ended_cleanly([token, "", token, "", cut, "", "data: [DONE]", ""])
    assert not stream_ended_cleanly([token, token, token])  # torn: SIGKILL mid-stream
    assert not stream_ended_cleanly([token, token, "data: [DONE]"])  # not cut: checked nothing
    assert not stream_ended_cleanly([cut, "data: [DONE]"])


# -- the GPU image's stand-in -------------------------------------------------------------------


def test_the_gpu_stand_in_holds_the_pinned_vllm_and_the_torch_it_asks_for() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert f'gpu = ["vllm=={gpu_image_check.VLLM_VERSION}"]' in text  # read from there
    metadata = gpu_image_check.VLLM_METADATA
    assert f"Version: {gpu_image_check.VLLM_VERSION}\n" in metadata
    torch_pin = metadata.split("Requires-Dist: ")[1].strip()
    assert gpu_image_check.TORCH.startswith(torch_pin)  # 2.13.0+cpu satisfies ==2.13.0
    conf = gpu_image_check.pip_conf(
        {"PIP_FIND_LINKS": "http://127.0.0.1:1/w/", "PIP_CERT": CERT_IN_BUILD}, with_cert=True
    )
    assert conf == (
        "[global]\nfind-links = http://127.0.0.1:1/w/\ncert = /etc/specgate-stand-in/ca.crt\n"
    )
