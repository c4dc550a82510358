"""deploy/gaie/: the manifests agree with each other and with the picker, and the picker's
image installs what pyproject.toml says it needs."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml

from app.picker.settings import PickerSettings
from tests.paths import REPO

GAIE = REPO / "deploy" / "gaie"


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    documents = yaml.safe_load_all((GAIE / "inferencepool.yaml").read_text())
    return {(d["kind"], d["metadata"]["name"]): d for d in documents}


def test_the_pool_names_the_pickers_service_and_its_port() -> None:
    found = manifests()
    pool = found["InferencePool", "specgate-llama"]["spec"]
    service = found["Service", pool["endpointPickerRef"]["name"]]["spec"]
    assert [p["port"] for p in service["ports"]] == [pool["endpointPickerRef"]["port"]["number"]]
    servers = found["Deployment", "specgate-llama"]["spec"]["template"]
    assert servers["metadata"]["labels"] == pool["selector"]["matchLabels"]
    args = servers["spec"]["containers"][0]["args"]
    assert args[args.index("--port") + 1] == str(pool["targetPorts"][0]["number"])


def test_the_picker_deployment_is_one_the_picker_accepts() -> None:
    found = manifests()
    container = found["Deployment", "specgate-picker"]["spec"]["template"]["spec"]["containers"][0]
    settings = PickerSettings(_cli_parse_args=container["args"])  # type: ignore[call-arg]
    assert settings.pool_name == "specgate-llama"
    assert container["readinessProbe"]["grpc"] == {"port": settings.port, "service": "readiness"}
    assert container["livenessProbe"]["grpc"] == {"port": settings.port, "service": "liveness"}
    rules = found["Role", "specgate-picker"]["rules"]
    assert {(r["resources"][0], r["verbs"][0]) for r in rules} == {
        ("inferencepools", "get"),
        ("pods", "list"),
    }


def test_the_picker_image_installs_what_the_picker_extra_lists() -> None:
    dockerfile = (GAIE / "Dockerfile.picker").read_text()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    quoted = set(re.findall(r'"([^"\s]+)"', dockerfile.split("RUN", 1)[1]))
    assert set(project["optional-dependencies"]["picker"]) <= quoted
    base = {re.split(r"[<>=\[]", d)[0]: d for d in project["dependencies"]}
    for name in ("pydantic", "pydantic-settings", "httpx", "prometheus-client"):
        assert base[name] in quoted


def test_the_picker_imports_nothing_of_the_engines_or_the_web_app() -> None:
    # What lets its image leave out torch, transformers, vLLM and FastAPI.
    probe = (
        "import sys, app.picker.server, app.picker.__main__; "
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for heavy in ("torch", "transformers", "vllm", "fastapi", "starlette", "accelerate"):
        assert heavy not in found


def test_hadolint_is_clean_on_the_pickers_dockerfile() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    done = subprocess.run(
        [hadolint, "--config", ".hadolint.yaml", "--no-color", GAIE / "Dockerfile.picker"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
