"""`make image-check`: build docker/Dockerfile.cpu, run the image as a user would, check it.

`python -m scripts.image_check [cpu]` builds `specgate:cpu` with Docker where an engine
answers and Podman otherwise, runs it with no arguments, and checks what the docs promise:
/health, a streamed chat completion and a completion through the `openai` SDK with the
x-specgate-* headers, the image's own health check, uid 10001, and a stream cut cleanly by
`stop` within the documented stop timeout. It prints the build time, the image size and the
cold start to /health. `gpu` builds and runs the GPU `Dockerfile` on a stand-in base
(scripts/gpu_image_check.py); `plan` prints what `cpu` would use here and does nothing.

Where the machine lacks what a build needs, it says so and stands in:
- a base image that cannot be pulled is built from Debian 12 packages (mmdebstrap) and
  imported under the same name, and kept for the next run; Debian 12's Python is 3.11;
- the machine's own pip sources (local indexes and folders of wheels: here they hold the
  torch==2.13.0+cpu that PyTorch's unreachable index would give) are served on loopback for
  the build and passed as PIP_* build arguments, and pip's CA bundle as a secret: in no layer.
The plan is in scripts/image_plan.py.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import posixpath
import re
import resource
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from scripts.image_plan import (
    CERT_SECRET,
    SOURCES_PORT,
    STAND_IN_LABEL,
    STOP_TIMEOUT_SECONDS,
    UID,
    PipSources,
    Runtime,
    base_images,
    choose_runtime,
    pip_settings,
    pip_sources,
    run_flags,
    stand_in_packages,
    stream_ended_cleanly,
)

REPO = Path(__file__).resolve().parents[1]
CPU_DOCKERFILE = REPO / "docker" / "Dockerfile.cpu"
CPU_TAG = "specgate:cpu"
LOGS = Path(tempfile.gettempdir()) / "specgate-image-check"
DEBIAN_SOURCES = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
# The headers app/encoders/common.py sets on every generation (route_headers).
ROUTE_HEADERS = ("x-specgate-route", "x-specgate-class", "x-specgate-reason")

StandIn = Callable[[Runtime, str], None]  # builds an image of that name that cannot be pulled


def say(message: str) -> None:
    print(f"image-check: {message}", flush=True)


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"image-check: FAILED: {what}")
    say(f"ok: {what}")


def answers(argv: Sequence[str], timeout: float = 60) -> bool:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def output(argv: Sequence[str], timeout: float = 120) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=True)
    return done.stdout.strip()


def image_field(runtime: Runtime, image: str, template: str) -> str:
    return output(runtime("image", "inspect", "--format", template, image))


def detect_runtime() -> Runtime:
    return choose_runtime(
        docker_answers=shutil.which("docker") is not None and answers(["docker", "info"]),
        podman=shutil.which("podman") is not None,
        runc=shutil.which("runc") is not None,
        nofile=resource.getrlimit(resource.RLIMIT_NOFILE),
        nproc=resource.getrlimit(resource.RLIMIT_NPROC),
    )


def machine_pip_sources() -> PipSources:
    listing = output([sys.executable, "-m", "pip", "config", "list"])
    return pip_sources(pip_settings(listing))


# -- base images -------------------------------------------------------------------------------


def ensure_base(runtime: Runtime, image: str, stand_in: StandIn | None = None) -> None:
    """The image itself, pulled if it can be, or a stand-in of its name, kept for next time."""
    if answers(runtime("image", "inspect", image)):
        labels = json.loads(image_field(runtime, image, "{{json .Config.Labels}}")) or {}
        made = labels.get(STAND_IN_LABEL)
        say(f"{image}: " + (f"a stand-in built earlier ({made})" if made else "present"))
        return
    if answers(runtime("pull", image), timeout=1800):  # vLLM's image is many GB
        say(f"{image}: pulled")
        return
    started = time.monotonic()
    (stand_in or debian_stand_in)(runtime, image)
    say(f"{image}: stand-in built in {time.monotonic() - started:.0f} s")


def debian_stand_in(runtime: Runtime, image: str) -> None:
    packages = " ".join(stand_in_packages(image))
    say(f"{image}: cannot be pulled; a stand-in from Debian 12 packages: {packages}")
    if shutil.which("mmdebstrap") is None:
        raise SystemExit("image-check: a stand-in needs mmdebstrap: apt-get install mmdebstrap")
    with tempfile.TemporaryDirectory() as folder:
        rootfs = Path(folder) / "rootfs.tar"
        include = f"--include={packages.replace(' ', ',')}"
        mmdebstrap = ["mmdebstrap", "--quiet", "--variant=apt", include, "bookworm", str(rootfs)]
        subprocess.run([*mmdebstrap, *DEBIAN_SOURCES], check=True)
        label = f"Debian 12 packages: {packages}"
        changes = ['CMD ["python3"]', "ENV LANG=C.UTF-8", f'LABEL {STAND_IN_LABEL}="{label}"']
        flags = [f"--change={change}" for change in changes]
        subprocess.run(
            runtime("import", *flags, str(rootfs), image), check=True, capture_output=True
        )


# -- building ------------------------------------------------------------------------------------


@contextlib.contextmanager
def serving(folders: Sequence[str], port: int = SOURCES_PORT) -> Iterator[None]:
    """The pip sources' folders over HTTP on loopback, for the build; nothing else is served."""

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory="/", **kwargs)

        def send_head(self) -> Any:
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
            path = posixpath.normpath(path)
            if not any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders):
                self.send_error(404)
                return None
            return super().send_head()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # pip asks for hundreds of pages

    if not folders:
        yield
        return
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def build(runtime: Runtime, dockerfile: Path, tag: str, extra: Sequence[str], log: Path) -> float:
    """Build from the repository; step headings to the terminal, all to `log`. Returns seconds."""
    argv = runtime("build", *runtime.build_flags, *extra, "-f", str(dockerfile), "-t", tag, ".")
    say(f"building {tag}: {shlex.join(argv)}")
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("w") as sink:
        process = subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        for line in process.stdout:
            sink.write(line)
            if re.match(r"(\[\d+/\d+\] )?STEP \d+|#\d+ \[", line):
                print("  " + line.rstrip()[:160], flush=True)
    if process.wait() != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise SystemExit(f"image-check: the build failed (log: {log}):\n{tail}")
    return time.monotonic() - started


def build_cpu(runtime: Runtime, no_cache: bool) -> float:
    for image in base_images(CPU_DOCKERFILE.read_text()):
        ensure_base(runtime, image)
    sources = machine_pip_sources()
    for name, value in sources.build_args.items():
        say(f"pip source for the build: {name}={value}")
    if sources.cert:
        say(f"pip's CA bundle for the build: {sources.cert} (secret {CERT_SECRET}, in no layer)")
    with serving(sources.served):
        extra = [*sources.build_flags(), *(["--no-cache"] if no_cache else [])]
        seconds = build(runtime, CPU_DOCKERFILE, CPU_TAG, extra, LOGS / "build-cpu.log")
    say(f"built {CPU_TAG} in {seconds:.0f} s")
    return seconds


# -- running -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def check_image(runtime: Runtime, image: str) -> str:
    """Before it runs: its user, and flags reaching specgate. Returns `--help`'s output."""
    check(image_field(runtime, image, "{{.Config.User}}") == UID, f"the image's user is {UID}")
    help_text = output(runtime("run", "--rm", *runtime.run_flags, image, "--help"))
    check(help_text.startswith("usage: specgate"), "--help reaches specgate through the entrypoint")
    return help_text


@contextlib.contextmanager
def container(runtime: Runtime, options: Sequence[str], image: str, *args: str) -> Iterator[str]:
    """A detached container, yielded by name; its logs kept in LOGS, and it removed, after."""
    name = f"specgate-image-check-{free_port()}"
    argv = runtime("run", "-d", "--name", name, *options, image, *args)
    say(f"running: {shlex.join(argv)}")
    # Podman says it cannot schedule the health check without systemd: not this check's concern.
    subprocess.run(argv, check=True, capture_output=True)
    try:
        yield name
    finally:
        with (LOGS / f"{image.replace(':', '-')}.log").open("w") as sink:
            subprocess.run(
                runtime("logs", name), stdout=sink, stderr=subprocess.STDOUT, check=False
            )
        subprocess.run(runtime("rm", "-f", name), capture_output=True, check=False)


def wait_healthy(runtime: Runtime, name: str, url: str, seconds: float) -> None:
    """Until `url` answers 200; fails if the container exits first."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as response:
            if response.status == 200:
                return
        if output(runtime("inspect", "--format", "{{.State.Running}}", name)) != "true":
            raise SystemExit(f"image-check: the container exited before /health answered ({LOGS})")
        time.sleep(0.5)
    raise SystemExit(f"image-check: /health did not answer 200 within {seconds:.0f} s")


def check_inside(runtime: Runtime, name: str, image: str) -> None:
    """The server's uid, and the image's own HEALTHCHECK command run in the container."""
    check(output(runtime("exec", name, "id", "-u")) == UID, f"the server runs as uid {UID}")
    test = json.loads(image_field(runtime, image, "{{json .Config.Healthcheck.Test}}"))
    passes = test[0] == "CMD" and answers(runtime("exec", name, *test[1:]))
    check(passes, f"the image's health check passes: {test[1:]}")


def check_api(base_url: str) -> None:
    """A streamed chat completion and a completion through the `openai` SDK, with headers."""
    from openai import OpenAI  # the test extra's: only these checks need it

    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    chat = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "Name three colours."}], max_tokens=16,
        stream=True,
    )  # fmt: skip
    chunks = list(chat.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finished = chunks[-1].choices[0].finish_reason in ("stop", "length")
    check(bool(text) and finished, f"streamed chat: {text!r}")
    check_route_headers(chat.headers)
    raw = client.completions.with_raw_response.create(model=model, prompt="The sky", max_tokens=8)
    completion = raw.parse().choices[0].text
    check(bool(completion), f"completion: {completion!r}")
    check_route_headers(raw.headers)


def check_route_headers(headers: Any) -> None:
    found = {name: headers.get(name) for name in ROUTE_HEADERS}
    routed = found["x-specgate-route"] in ("speculative", "plain")
    check(all(found.values()) and routed, f"headers {found}")


def check_stop_mid_stream(runtime: Runtime, name: str, base_url: str) -> float:
    """`stop` during a long stream: it ends with an event and [DONE], the container exits 0
    within its stop timeout. Returns the seconds from `stop` to the exit."""
    from openai import OpenAI

    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=120)
    model = client.models.list().data[0].id
    lines: list[str] = []
    first = threading.Event()
    failure: list[BaseException] = []

    def read() -> None:
        try:
            with client.completions.with_streaming_response.create(
                model=model, prompt="Count to one thousand: 1, 2, 3,", max_tokens=4000,
                stream=True,
                # Longer than the shutdown grace whatever the model says: the cut is checked.
                extra_body={"ignore_eos": True},
            ) as response:  # fmt: skip
                for line in response.iter_lines():
                    lines.append(line)
                    first.set()
        except Exception as exc:  # a torn stream; reported below
            failure.append(exc)
        finally:
            first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    check(first.wait(120) and not failure, "a long stream started")
    started = time.monotonic()
    # No -t: the container's own stop timeout, as `run --stop-timeout` set it.
    subprocess.run(runtime("stop", name), check=True, capture_output=True)
    stopped = time.monotonic() - started
    reader.join(30)
    last = [line for line in lines if line][-2:]
    ended = not reader.is_alive() and not failure and stream_ended_cleanly(lines)
    check(ended, f"the stream ended cleanly: {last}")
    code = output(runtime("inspect", "--format", "{{.State.ExitCode}}", name))
    within = code == "0" and stopped < STOP_TIMEOUT_SECONDS
    check(
        within, f"exit code {code} {stopped:.1f} s after `stop` (timeout {STOP_TIMEOUT_SECONDS} s)"
    )
    return stopped


def check_cpu(runtime: Runtime, no_cache: bool, build_it: bool) -> None:
    build_seconds = build_cpu(runtime, no_cache) if build_it else 0.0
    size = int(image_field(runtime, CPU_TAG, "{{.Size}}"))
    help_text = check_image(runtime, CPU_TAG)
    say("`run --rm specgate:cpu --help | head`:\n" + "\n".join(help_text.splitlines()[:10]))
    sys_nice = answers(
        runtime("run", "--rm", *runtime.run_flags, "--cap-add", "SYS_NICE", "--entrypoint", "true",
                CPU_TAG)
    )  # fmt: skip
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with container(runtime, run_flags(runtime, port, sys_nice), CPU_TAG) as name:
        wait_healthy(runtime, name, f"{base_url}/health", 600)
        cold_start = time.monotonic() - started
        say(f"/health answered 200 {cold_start:.1f} s after `run`")
        check_inside(runtime, name, CPU_TAG)
        check_api(base_url)
        stop = check_stop_mid_stream(runtime, name, base_url)
    say(
        f"passed: build {build_seconds:.0f} s, image {size / 1e9:.2f} GB, cold start to /health "
        f"{cold_start:.1f} s, stop mid-stream {stop:.1f} s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="image-check", description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", choices=("cpu", "gpu", "plan"), default="cpu")
    parser.add_argument("--no-cache", action="store_true", help="build every step again")
    parser.add_argument("--no-build", action="store_true", help="check the image already built")
    args = parser.parse_args(argv)
    runtime = detect_runtime()
    say(f"runtime: {shlex.join(runtime())}; builds with {shlex.join(runtime.build_flags)}")
    if args.what == "plan":
        sources = machine_pip_sources()
        plan = {
            "bases": base_images(CPU_DOCKERFILE.read_text()),
            "build": sources.build_flags(),
            "served": sources.served,
            "run": run_flags(runtime, 8000, sys_nice=True),
        }
        print(json.dumps(plan, indent=2))
    elif args.what == "gpu":
        from scripts.gpu_image_check import check_gpu

        check_gpu(runtime)
    else:
        check_cpu(runtime, args.no_cache, not args.no_build)
    return 0


if __name__ == "__main__":
    sys.exit(main())
