"""The Ray Serve application's make-up (app/serve_ray/app.py) and the Serve config file that
deploys it (deploy/ray-serve.yaml), without a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ray.serve.deployment import Application
from ray.serve.schema import ServeDeploySchema

from app.cli import parse_settings
from app.serve_ray.app import ROUTERS, build, engine_options
from app.settings import Settings

CONFIG = Path(__file__).resolve().parents[3] / "deploy" / "ray-serve.yaml"


def test_replicas_take_their_count_resources_and_router_from_the_flags() -> None:
    options = engine_options(
        parse_settings(
            ["--ray-replicas", "3", "--ray-replica-gpus", "1", "--ray-router", "power-of-two"]
        )
    )
    assert options["num_replicas"] == 3
    assert options["ray_actor_options"] == {"num_cpus": 1.0, "num_gpus": 1.0}
    router = options["request_router_config"]
    assert router.request_router_class == ROUTERS["power-of-two"]
    assert "autoscaling_config" not in options


def test_autoscaling_passes_through_in_place_of_a_count() -> None:
    scaling = '{"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 16}'
    options = engine_options(parse_settings(["--ray-autoscaling", scaling]))
    assert options["autoscaling_config"] == {
        "min_replicas": 1,
        "max_replicas": 4,
        "target_ongoing_requests": 16,
    }
    assert "num_replicas" not in options


def test_an_engine_over_several_gpus_gets_a_placement_group_on_one_node() -> None:
    options = engine_options(
        parse_settings(
            ["--ray-replicas", "1", "--ray-replica-gpus", "4", "--tensor-parallel-size", "4"]
        )
    )
    assert options["placement_group_bundles"] == [{"CPU": 1.0}] + [{"GPU": 1.0}] * 4
    assert options["placement_group_strategy"] == "STRICT_PACK"
    assert "ray_actor_options" not in options


def test_every_router_named_is_importable() -> None:
    import importlib

    for path in ROUTERS.values():
        module, name = path.split(":")
        assert isinstance(getattr(importlib.import_module(module), name), type)


def test_the_serve_config_file_is_valid_and_builds_specgate() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    schema = ServeDeploySchema.model_validate(config)
    [app] = schema.applications
    assert app.import_path == "app.serve_ray.app:build"
    built = build(config["applications"][0]["args"])
    assert isinstance(built, Application)


def test_ray_replicas_on_the_command_line_deploy_on_ray_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app import __main__ as entry
    from app.serve_ray import deploy

    deployed: list[Settings] = []
    monkeypatch.setattr(deploy, "serve_on_ray", lambda settings: deployed.append(settings) or 0)
    assert entry.main(["--ray-replicas", "2", "--port", "9100"]) == 0
    [settings] = deployed
    assert settings.ray_replicas == 2 and settings.port == 9100
