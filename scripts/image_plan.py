"""What `make image-check` does on a machine, as pure functions (scripts/image_check.py acts).

The container CLI and its flags, the stand-ins for base images that cannot be pulled, the pip
sources the build receives, and the run arguments: tests/fast/scripts/test_image_check.py
checks them without building anything.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

UID = "10001"
CONTAINER_PORT = 8000
# pip's CA bundle reaches the build's pip steps as this secret (docker/Dockerfile.cpu).
CERT_SECRET = "pip-cert"
CERT_IN_BUILD = f"/run/secrets/{CERT_SECRET}"
# The pip sources' URLs are build arguments: a port that changed every run would change them
# and so rebuild everything from the first pip step on.
SOURCES_PORT = 38765
# The documented `docker run --stop-timeout`: specgate's shutdown grace (10 s by default), the
# cut streams' farewell (1 s) and the engines' stop (vLLM gives each core 5 s), with room.
# Docker's own default, 10 s, SIGKILLed the draining server and tore its stream.
STOP_TIMEOUT_SECONDS = 30
# Higher process limits failed here as Podman's default open-file limit (1048576) did: the
# sandbox may not raise them ("error setting rlimits"). 32768 is Podman's own build default.
NPROC_CAP = 32768
STAND_IN_LABEL = "org.specgate.stand-in"


@dataclass(frozen=True)
class Runtime:
    """The container CLI and the flags this machine needs on every build and run."""

    cli: str
    global_flags: tuple[str, ...]  # before the subcommand
    build_flags: tuple[str, ...]
    run_flags: tuple[str, ...]

    def __call__(self, *args: str) -> list[str]:
        return [self.cli, *self.global_flags, *args]


def choose_runtime(
    docker_answers: bool,
    podman: bool,
    runc: bool,
    nofile: tuple[int, int],
    nproc: tuple[int, int],
) -> Runtime:
    """Docker where its engine answers `docker info`, else Podman.

    Containers get this process's own limits (no higher than they can be set). Podman uses runc
    where it is installed (crun fails on hybrid cgroups) and builds in Docker's image format,
    which keeps the HEALTHCHECK that Podman's default OCI format drops. Builds use the host's
    network: the pip sources are served on its loopback.
    """
    nproc = (min(nproc[0], NPROC_CAP), min(nproc[1], NPROC_CAP))
    limits = ("--ulimit", "nofile={}:{}".format(*nofile), "--ulimit", "nproc={}:{}".format(*nproc))
    network = ("--network", "host")
    if docker_answers:
        return Runtime("docker", (), (*network, *limits), limits)
    if not podman:
        raise SystemExit("image-check: no Docker engine answers and Podman is missing")
    runc_flags = ("--runtime", "runc") if runc else ()
    build_flags = (*runc_flags, "--format", "docker", *network, *limits)
    return Runtime("podman", runc_flags, build_flags, limits)


def base_images(dockerfile: str) -> list[str]:
    """The images a Dockerfile's stages start from, fully named, ARG defaults filled in."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    images: list[str] = []
    for line in dockerfile.splitlines():
        words = line.split()
        if words[:1] == ["ARG"] and "=" in words[1] and not images:
            name, _, value = words[1].partition("=")
            args[name] = value
        elif words[:1] == ["FROM"]:
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], words[1])
            if len(words) == 4 and words[2].upper() == "AS":
                stages.add(words[3])
            if image not in stages:
                images.append(full_name(image))
    return images


def full_name(image: str) -> str:
    # As Docker reads a short name: Docker Hub, and its `library/` for official images.
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return image  # it names its registry
    return f"docker.io/{image}" if slash else f"docker.io/library/{image}"


def stand_in_packages(image: str) -> tuple[str, ...]:
    """Debian 12 packages that stand in for python:3.11-[slim-]bookworm.

    Both get python-is-python3: the official images have `python` (in /usr/local/bin), which
    the Dockerfile calls; Debian's is /usr/bin/python3. The build stage also gets what its own
    steps need: venv, Python's headers and a C++ compiler (arctic-inference's extension). The
    runtime stage gets useradd (passwd) and no compiler, as slim has none.
    """
    match = re.fullmatch(r"docker\.io/library/python:3\.11-(slim-)?bookworm", image)
    if match is None:
        raise SystemExit(f"image-check: cannot pull {image}, and no stand-in is known for it")
    common = ("python3", "python-is-python3", "ca-certificates")
    if match.group(1):
        return (*common, "passwd")
    return (*common, "python3-venv", "python3-dev", "build-essential")


@dataclass(frozen=True)
class PipSources:
    """The machine's pip settings as the build receives them."""

    build_args: dict[str, str]  # PIP_* build arguments
    served: tuple[str, ...]  # local folders, served on loopback for the build
    cert: str | None  # pip's CA bundle, passed as a secret

    def build_flags(self) -> list[str]:
        flags = [f"--build-arg={name}={value}" for name, value in self.build_args.items()]
        return [*flags, f"--secret=id={CERT_SECRET},src={self.cert}"] if self.cert else flags


# Where pip looks first: its environment, then the `install` section, then `global`.
PIP_SECTIONS = (":env:", "install", "global")
PIP_SETTINGS = {
    "index-url": "PIP_INDEX_URL",
    "extra-index-url": "PIP_EXTRA_INDEX_URL",
    "find-links": "PIP_FIND_LINKS",
}


def pip_settings(listing: str) -> dict[str, str]:
    """pip's effective settings from `pip config list` (lines like global.cert='/etc/ca.crt')."""
    chosen: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        key, found, value = line.partition("=")
        section, _, name = key.rpartition(".")
        if not found or section not in PIP_SECTIONS:
            continue
        rank = PIP_SECTIONS.index(section)
        # Within a section, a file later in the listing overrides an earlier one.
        if name not in chosen or rank <= chosen[name][0]:
            chosen[name] = (rank, value.strip("'\""))
    return {name: value for name, (_, value) in chosen.items()}


def pip_sources(settings: dict[str, str], port: int = SOURCES_PORT) -> PipSources:
    """Index URLs and find-links as build arguments, local folders as URLs on loopback.

    A setting the machine lacks is not passed, so the Dockerfile's default stands (PyTorch's
    CPU index for PIP_EXTRA_INDEX_URL). A local index is served with its parent folder: a
    simple index's pages link to files beside it (../../files/...). Other settings (a
    constraints file, say) are this machine's business, not the image's.
    """
    build_args: dict[str, str] = {}
    served: list[str] = []
    for name, variable in PIP_SETTINGS.items():
        if name not in settings:
            continue
        urls = []
        for source in settings[name].split():
            path = source.removeprefix("file://")
            if not path.startswith("/"):
                urls.append(source)  # remote: the build reaches it as pip here does
                continue
            path = posixpath.normpath(path)
            served.append(path if name == "find-links" else posixpath.dirname(path))
            urls.append(f"http://127.0.0.1:{port}{path}/")
        build_args[variable] = " ".join(urls)
    cert = settings.get("cert") or None
    if cert:
        build_args["PIP_CERT"] = CERT_IN_BUILD
    return PipSources(build_args, tuple(dict.fromkeys(served)), cert)


def run_flags(runtime: Runtime, host_port: int, sys_nice: bool) -> list[str]:
    """`run` options of the documented CPU command (docs/deployment.md), on loopback only."""
    flags = [
        *runtime.run_flags,
        "--shm-size", "4g",
        "--stop-timeout", str(STOP_TIMEOUT_SECONDS),
        "-p", f"127.0.0.1:{host_port}:{CONTAINER_PORT}",
    ]  # fmt: skip
    # vLLM's CPU backend binds threads to NUMA nodes with it; a runtime may refuse it.
    return [*flags, "--cap-add", "SYS_NICE"] if sys_nice else flags


def stream_ended_cleanly(lines: Sequence[str]) -> bool:
    """Tokens, then the shutdown's error event and [DONE]: a stream cut, not torn."""
    events = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    if len(events) < 3 or events[-1] != "[DONE]" or '"choices"' not in events[0]:
        return False
    last = json.loads(events[-2])
    return isinstance(last, dict) and last.get("error", {}).get("code") == "server_shutting_down"
