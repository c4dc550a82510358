from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.embedded_model import MANIFEST, MODEL_NAME, cache_problem, prepare_embedded_model


class CountingConverter:
    """Writes a small model-shaped folder and counts how often it was asked to."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, gguf: Path, out: Path) -> None:
        assert gguf.name.endswith(".gguf") and gguf.is_file()
        self.calls += 1
        (out / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
        (out / "model.safetensors").write_bytes(b"weights" * 1000)
        (out / "tokenizer.json").write_text("{}")


def test_the_first_start_converts_and_the_second_reuses(tmp_path: Path) -> None:
    convert = CountingConverter()
    first = prepare_embedded_model(tmp_path, convert)
    second = prepare_embedded_model(tmp_path, convert)
    assert first == second == tmp_path / MODEL_NAME
    assert convert.calls == 1
    assert cache_problem(first) is None
    manifest = json.loads((first / MANIFEST).read_text())
    assert set(manifest["files"]) == {"config.json", "model.safetensors", "tokenizer.json"}


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda d: (d / MANIFEST).unlink(), id="half-written: no manifest"),
        pytest.param(lambda d: (d / "model.safetensors").unlink(), id="missing weights"),
        pytest.param(
            lambda d: (d / "model.safetensors").write_bytes(b"weights" * 999), id="truncated"
        ),
        pytest.param(
            lambda d: (d / "config.json").write_text('{"architectures": ["Evil"]}'),
            id="changed bytes",
        ),
        pytest.param(lambda d: (d / MANIFEST).write_text("{not json"), id="corrupt manifest"),
    ],
)
def test_a_damaged_cache_is_rebuilt_not_served(tmp_path: Path, damage: object) -> None:
    convert = CountingConverter()
    folder = prepare_embedded_model(tmp_path, convert)
    damage(folder)  # type: ignore[operator]
    assert cache_problem(folder) is not None
    assert prepare_embedded_model(tmp_path, convert) == folder
    assert convert.calls == 2
    assert cache_problem(folder) is None


def test_a_failed_conversion_leaves_nothing_behind(tmp_path: Path) -> None:
    def failing(gguf: Path, out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        prepare_embedded_model(tmp_path, failing)
    assert list(tmp_path.iterdir()) == []


async def test_the_build_time_conversion_is_the_cache_the_server_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The CPU image runs `python -m app.prepare_model` at build time; a container started
    # later with the same SPECGATE_CACHE_DIR must find the model without converting again.
    from app import embedded_model, prepare_model
    from app.engine.vllm.engine_config import launch_config
    from app.engine.vllm.launch import resolve_model_path
    from app.settings import Settings

    convert = CountingConverter()
    monkeypatch.setattr(embedded_model, "convert_gguf", convert)
    monkeypatch.setenv("SPECGATE_CACHE_DIR", str(tmp_path))
    assert prepare_model.main() == 0
    printed = capsys.readouterr().out.strip()
    assert await resolve_model_path(launch_config(Settings())) == printed
    assert Path(printed).parent.parent == tmp_path
    assert convert.calls == 1
