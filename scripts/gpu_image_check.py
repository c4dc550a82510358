"""`python -m scripts.image_check gpu`: the GPU `Dockerfile`, built and run without a GPU.

vllm/vllm-openai cannot be pulled here and would not run without a GPU, so the Dockerfile is
built, unchanged, on a stand-in of that name (where the real image is absent): the
python:3.11-bookworm base (itself a stand-in where it cannot be pulled) with pip in its system
Python, as vLLM's image has it; torch==2.13.0+cpu in place of the CUDA build; and a `vllm`
0.32.0 that is only a distribution's metadata, asking for torch==2.13.0 as vLLM does. It also
carries this machine's pip settings and CA bundle, for the Dockerfile's own pip steps: a
local image, never pushed.

What it checks, so that the file cannot drift from what specgate needs unnoticed:
- the install step finds vllm==0.32.0 satisfied and leaves it, and torch, as they were (a pin
  that moved away from the base's version would make pip replace it, and fail here);
- arctic-inference builds against the base's torch, in its system Python;
- the image's user, `--help` through the entrypoint, and a server on remote upstreams (which
  imports no vLLM): /health, the image's own HEALTHCHECK command, uid 10001, both volumes
  writable, and exit code 0 on `stop`.
Not checked (the real image and a GPU): vLLM's CUDA engines, the base's own Python (3.12) and
installed packages beside specgate's pins, and its compiler for arctic-inference.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import shutil
import subprocess
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scripts.image_check import (
    CPU_DOCKERFILE,
    LOGS,
    REPO,
    answers,
    build,
    check,
    check_image,
    check_inside,
    container,
    ensure_base,
    free_port,
    machine_pip_sources,
    output,
    say,
    serving,
    wait_healthy,
)
from scripts.image_plan import STAND_IN_LABEL, Runtime, base_images

GPU_DOCKERFILE = REPO / "Dockerfile"
GPU_TAG = "specgate:gpu-check"  # not specgate:gpu: there is no CUDA in it
# The base image must hold the vLLM the gpu extra pins. That one pins torch==2.13.0, whose CPU
# build stands in.
EXTRAS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
VLLM_VERSION = EXTRAS["gpu"][0].removeprefix("vllm==")
TORCH = "torch==2.13.0+cpu"
STAND_IN_INSTALLER = "specgate-stand-in"
VOLUMES = ("/data/huggingface", "/data/compile-cache")
STAND_IN_CERT = "/etc/specgate-stand-in/ca.crt"
# A distribution's metadata and nothing else. No RECORD: pip cannot uninstall it, so a build
# that tried to replace it fails loudly rather than passing on another vLLM.
VLLM_METADATA = (
    f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}\nRequires-Dist: torch==2.13.0\n"
)
PIP_CONF_KEYS = {
    "PIP_INDEX_URL": "index-url",
    "PIP_EXTRA_INDEX_URL": "extra-index-url",
    "PIP_FIND_LINKS": "find-links",
}


def stand_in_containerfile(base: str, with_cert: bool) -> str:
    dist_info = f"vllm-{VLLM_VERSION}.dist-info"
    return f"""FROM {base}
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_CERT
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip \\
    && rm -rf /var/lib/apt/lists/* /usr/lib/python3*/EXTERNALLY-MANAGED
RUN --mount=type=secret,id=pip-cert python3 -m pip install --no-cache-dir {TORCH}
COPY {dist_info} /tmp/{dist_info}
RUN mv /tmp/{dist_info} "$(python3 -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
COPY pip.conf /etc/pip.conf
{f"COPY ca.crt {STAND_IN_CERT}" if with_cert else ""}
LABEL {STAND_IN_LABEL}="vllm {VLLM_VERSION} as metadata, {TORCH}, on {base}"
"""


def pip_conf(build_args: dict[str, str], with_cert: bool) -> str:
    """The stand-in's /etc/pip.conf: the build arguments the CPU image gets, as settings."""
    lines = [f"{PIP_CONF_KEYS[k]} = {v}" for k, v in build_args.items() if k in PIP_CONF_KEYS]
    return (
        "\n".join(["[global]", *lines, *([f"cert = {STAND_IN_CERT}"] if with_cert else [])]) + "\n"
    )


def vllm_stand_in(runtime: Runtime, image: str) -> None:
    base = base_images(CPU_DOCKERFILE.read_text())[0]  # python:3.11-bookworm, with a compiler
    ensure_base(runtime, base)
    say(f"{image}: cannot be pulled; a stand-in: vllm {VLLM_VERSION} as metadata, {TORCH}")
    sources = machine_pip_sources()
    with tempfile.TemporaryDirectory() as folder:
        context = Path(folder)
        dist_info = context / f"vllm-{VLLM_VERSION}.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(VLLM_METADATA)
        (dist_info / "INSTALLER").write_text(STAND_IN_INSTALLER + "\n")
        (context / "pip.conf").write_text(pip_conf(sources.build_args, sources.cert is not None))
        if sources.cert:
            shutil.copy(sources.cert, context / "ca.crt")
        (context / "Containerfile").write_text(stand_in_containerfile(base, bool(sources.cert)))
        flags = [*runtime.build_flags, *sources.build_flags()]
        with serving(sources.served):
            argv = runtime("build", *flags, "-f", f"{folder}/Containerfile", "-t", image, folder)
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(
            f"image-check: the stand-in failed:\n{(done.stdout + done.stderr)[-4000:]}"
        )


@contextlib.contextmanager
def fake_upstream() -> Iterator[str]:
    """A vLLM server as specgate's health checks see it (/health, /v1/models); its URL."""
    answers = {
        "/health": {},
        "/v1/models": {"object": "list", "data": [{"id": "stand-in", "object": "model"}]},
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = answers.get(self.path)
            self.send_response(404 if body is None else 200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(body).encode())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def check_gpu(runtime: Runtime) -> None:
    (image,) = base_images(GPU_DOCKERFILE.read_text())
    check(image == f"docker.io/vllm/vllm-openai:v{VLLM_VERSION}", f"it starts from {image}")
    ensure_base(runtime, image, vllm_stand_in)
    log = LOGS / "build-gpu.log"
    # Never from the cache: the install step's own output is what shows vllm left as it was.
    with serving(machine_pip_sources().served):  # the stand-in's pip.conf points there
        seconds = build(runtime, GPU_DOCKERFILE, GPU_TAG, ["--no-cache"], log)
    say(f"built {GPU_TAG} in {seconds:.0f} s")

    satisfied = rf"Requirement already satisfied: vllm=={re.escape(VLLM_VERSION)} "
    found = re.search(satisfied, log.read_text()) is not None
    check(found, f"the install step found vllm=={VLLM_VERSION} satisfied")
    script = (
        "from importlib.metadata import distribution as d; "
        "print(d('vllm').version, d('vllm').read_text('INSTALLER').strip(), d('torch').version)"
    )
    python = runtime("run", "--rm", *runtime.run_flags, "--entrypoint", "python3", GPU_TAG)
    dists = output([*python, "-c", script])
    kept = dists == f"{VLLM_VERSION} {STAND_IN_INSTALLER} 2.13.0+cpu"
    check(kept, f"the base's vllm and torch are as they were: {dists}")
    check_image(runtime, GPU_TAG)

    port = free_port()
    with fake_upstream() as upstream:
        options = [*runtime.run_flags, "--network", "host", "-e", f"SPECGATE_PORT={port}"]
        args = ["--speculative-upstreams", upstream, "--plain-upstreams", upstream]
        with container(runtime, options, GPU_TAG, *args) as name:
            started = time.monotonic()
            wait_healthy(runtime, name, f"http://127.0.0.1:{port}/health", 120)
            say(f"/health answered 200 {time.monotonic() - started:.1f} s after `run`")
            check_inside(runtime, name, GPU_TAG)
            writable = " && ".join(f"test -w {volume}" for volume in VOLUMES)
            check(answers(runtime("exec", name, "sh", "-c", writable)), f"it can write {VOLUMES}")
            subprocess.run(runtime("stop", name), check=True, capture_output=True)
            code = output(runtime("inspect", "--format", "{{.State.ExitCode}}", name))
            check(code == "0", f"`stop` ended it with exit code {code}")
    say("passed: the GPU Dockerfile, as far as it runs without vllm/vllm-openai and a GPU")
