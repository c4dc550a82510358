from __future__ import annotations

import pytest
from pydantic import ValidationError
from pydantic_settings import CliApp

from app import drafters
from app.drafters import SUFFIX
from app.settings import Settings

SEED_COMMAND = [
    "--model", "meta-llama/Meta-Llama-3-70B-Instruct",
    "--speculative-model", "meta-llama/Llama-3.2-1B-Instruct",
    "--num-speculative-tokens", "5",
    "--speculative-draft-tensor-parallel-size", "1",
    "--tensor-parallel-size", "4",
    "--gpu-memory-utilization", "0.92",
    "--max-model-len", "8192",
]  # fmt: skip


def parse(args: list[str]) -> Settings:
    return CliApp.run(Settings, cli_args=args)


def test_the_seed_command_line_is_accepted_verbatim() -> None:
    settings = parse(SEED_COMMAND)
    assert settings.model == "meta-llama/Meta-Llama-3-70B-Instruct"
    assert settings.tensor_parallel_size == 4
    assert settings.max_model_len == 8192
    assert settings.engine_speculative_config() == {
        "model": "meta-llama/Llama-3.2-1B-Instruct",
        "num_speculative_tokens": 5,
        "draft_tensor_parallel_size": 1,
    }


def test_the_memory_budget_is_split_between_the_engines() -> None:
    settings = parse(SEED_COMMAND)
    speculative = settings.engine_memory_fraction(speculative=True)
    plain = settings.engine_memory_fraction(speculative=False)
    assert speculative == pytest.approx(0.46)
    assert speculative + plain == pytest.approx(0.92)
    skewed = parse([*SEED_COMMAND, "--speculative-memory-share", "0.75"])
    assert skewed.engine_memory_fraction(speculative=True) == pytest.approx(0.69)


def test_without_speculation_flags_the_engine_drafts_from_suffix_trees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = parse([]).engine_speculative_config()
    assert config == SUFFIX
    assert config["num_speculative_tokens"] == 32
    # Without arctic-inference, n-gram prompt lookup, which needs nothing beyond vLLM.
    monkeypatch.setattr(drafters, "suffix_available", lambda: False)
    config = parse([]).engine_speculative_config()
    assert config["method"] == "ngram"
    assert config["num_speculative_tokens"] == 5
    assert config["prompt_lookup_min"] <= config["prompt_lookup_max"]


def test_the_suffix_method_drafts_up_to_its_tree_depth_as_in_vllm() -> None:
    # specgate once gave it n-gram's K of 5: a fifth of what vLLM's suffix arm drafts.
    config = parse(["--speculative-config", '{"method": "suffix"}']).engine_speculative_config()
    assert config["num_speculative_tokens"] == 24
    deep = '{"method": "suffix", "suffix_decoding_max_tree_depth": 40}'
    config = parse(["--speculative-config", deep]).engine_speculative_config()
    assert config["num_speculative_tokens"] == 40


@pytest.mark.parametrize(
    "json_config",
    [
        '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", '
        '"num_speculative_tokens": 4}',
        '{"method": "mtp", "num_speculative_tokens": 1}',
        '{"method": "suffix", "num_speculative_tokens": 8}',
        '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}',
    ],
)
def test_speculative_config_json_passes_any_method_through(json_config: str) -> None:
    import json

    config = parse(["--speculative-config", json_config]).engine_speculative_config()
    assert config == json.loads(json_config)


def test_flags_merge_into_the_json_config() -> None:
    settings = parse(
        ["--speculative-config", '{"method": "eagle"}', "--speculative-model", "some/eagle-head"]
    )
    config = settings.engine_speculative_config()
    assert config == {"method": "eagle", "model": "some/eagle-head", "num_speculative_tokens": 5}


def test_a_flag_contradicting_the_json_is_refused() -> None:
    with pytest.raises(ValidationError, match="num_speculative_tokens"):
        parse(
            [
                "--speculative-config",
                '{"method": "ngram", "num_speculative_tokens": 3}',
                "--num-speculative-tokens",
                "4",
            ]
        )


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGATE_MODEL", "/models/mine")
    monkeypatch.setenv("SPECGATE_PORT", "9123")
    monkeypatch.setenv("SPECGATE_SPECULATIVE_CONFIG", '{"method": "suffix"}')
    settings = Settings()
    assert settings.model == "/models/mine"
    assert settings.model_id == "mine"
    assert settings.port == 9123
    assert settings.engine_speculative_config()["method"] == "suffix"


@pytest.mark.parametrize(
    "args",
    [
        ["--gpu-memory-utilization", "1.5"],
        ["--num-speculative-tokens", "0"],
        ["--speculative-memory-share", "1"],
        ["--port", "70000"],
        ["--routing-pins", '{"poetry": "plain"}'],
        ["--routing-pins", '{"code": "sometimes"}'],
        ["--routing-exploration", "0.9"],
        ["--pipeline-parallel-size", "0"],
        ["--distributed-executor-backend", "external_launcher"],
        ["--plain-upstreams", "spec-a:8000"],
        ["--plain-upstreams", "ftp://spec-a"],
        ["--speculative-upstreams", "http://a:8000,http://a:8000/v1"],
        ["--upstream-attempts", "0"],
    ],
)
def test_bad_values_are_refused(args: list[str]) -> None:
    with pytest.raises((ValidationError, SystemExit)):
        parse(args)


def test_routing_pins_name_classes() -> None:
    settings = parse(["--routing-pins", '{"open-ended": "plain", "structured": "speculative"}'])
    assert settings.routing_pins == {"open-ended": "plain", "structured": "speculative"}


@pytest.mark.parametrize(
    "args",
    [["--speculative-config", "{bad"], ["--gpu-memory-utilization", "1.5"]],
)
def test_the_command_line_reports_bad_settings_without_a_traceback(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from app.__main__ import main

    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("specgate: invalid settings:")
    assert "Traceback" not in err


def test_upstreams_are_comma_separated_base_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = parse(
        ["--speculative-upstreams", "http://spec-a:8000/v1/, http://spec-b:8000",
         "--upstream-read-timeout", "30"]
    )  # fmt: skip
    assert settings.upstreams("speculative") == ("http://spec-a:8000", "http://spec-b:8000")
    assert settings.upstreams("plain") == ()  # an embedded engine serves it
    assert settings.upstream_read_timeout == 30
    monkeypatch.setenv("SPECGATE_PLAIN_UPSTREAMS", "https://plain-a/v1")
    assert Settings().upstreams("plain") == ("https://plain-a",)


def test_the_upstream_model_names_the_served_model_unless_told_otherwise() -> None:
    assert parse(["--upstream-model", "org/big"]).model_id == "org/big"
    both = parse(["--upstream-model", "org/big", "--served-model-name", "big"])
    assert both.model_id == "big"
