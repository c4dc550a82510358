"""The CPU runtime vLLM recommends: which libraries an engine core is spawned with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.engine.vllm import cpu_runtime
from app.engine.vllm.cpu_runtime import (
    PRELOAD_VARIABLE,
    find_libraries,
    preload_value,
    preloaded,
    recommended_preload,
)
from app.engine.vllm.engine_config import launch_config
from app.engine.vllm.launch import cpu_preload
from app.settings import Settings

TCMALLOC, IOMP = cpu_runtime.LIBRARIES


def touch(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(b"")
    return folder / name


def test_the_first_folder_holding_a_library_wins(tmp_path: Path) -> None:
    venv, system = tmp_path / "venv", tmp_path / "system"
    mine = touch(venv, IOMP)
    touch(system, IOMP)
    theirs = touch(system, TCMALLOC)
    assert find_libraries([venv, system]) == {IOMP: mine, TCMALLOC: theirs}
    assert find_libraries([tmp_path / "empty"]) == {}


def test_libraries_go_before_what_the_operator_preloads() -> None:
    libs = [Path("/v/lib") / TCMALLOC, Path("/v/lib") / IOMP]
    assert preload_value(None, libs) == f"/v/lib/{TCMALLOC}:/v/lib/{IOMP}"
    assert preload_value("/opt/mine.so", libs) == f"/v/lib/{TCMALLOC}:/v/lib/{IOMP}:/opt/mine.so"


def test_a_library_already_preloaded_is_not_added_again() -> None:
    libs = [Path("/v/lib") / TCMALLOC, Path("/v/lib") / IOMP]
    # Another build of tcmalloc (the full one, not minimal) counts as tcmalloc.
    assert (
        preload_value("/usr/lib/libtcmalloc.so.4", libs)
        == f"/v/lib/{IOMP}:/usr/lib/libtcmalloc.so.4"
    )
    assert preload_value(f"/x/{TCMALLOC} /x/{IOMP}", libs) is None
    assert preload_value("", []) is None


def test_found_libraries_are_preloaded_and_a_missing_one_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cpu_runtime, "SYSTEM_DIRS", ())
    monkeypatch.delenv(PRELOAD_VARIABLE, raising=False)
    iomp = touch(tmp_path / "lib", IOMP)
    assert recommended_preload(True, prefix=str(tmp_path)) == str(iomp)
    assert TCMALLOC in caplog.text
    assert recommended_preload(False, prefix=str(tmp_path)) is None


def test_the_preload_is_set_only_while_an_engine_is_spawned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PRELOAD_VARIABLE, "/opt/mine.so")
    with preloaded("/a.so:/opt/mine.so"):
        assert os.environ[PRELOAD_VARIABLE] == "/a.so:/opt/mine.so"
    assert os.environ[PRELOAD_VARIABLE] == "/opt/mine.so"
    monkeypatch.delenv(PRELOAD_VARIABLE)
    with preloaded("/a.so"):
        assert os.environ[PRELOAD_VARIABLE] == "/a.so"
    assert PRELOAD_VARIABLE not in os.environ
    with preloaded(None):
        assert PRELOAD_VARIABLE not in os.environ


def test_gpu_engines_and_inherited_runtimes_get_no_preload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_runtime, "search_dirs", lambda prefix="": [tmp_path])
    monkeypatch.delenv(PRELOAD_VARIABLE, raising=False)
    touch(tmp_path, TCMALLOC)
    touch(tmp_path, IOMP)
    assert cpu_preload(launch_config(Settings()), cpu=False) is None
    assert cpu_preload(launch_config(Settings(cpu_runtime="inherited")), cpu=True) is None
    assert (
        cpu_preload(launch_config(Settings()), cpu=True)
        == f"{tmp_path / TCMALLOC}:{tmp_path / IOMP}"
    )
