"""The command line: `specgate [serve [MODEL]] [flags]` and what --help says, without serving."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from pydantic_settings import SettingsError

from app.__main__ import main
from app.cli import parse_settings
from app.settings import Settings
from tests.paths import REPO

ROOT = REPO
# What pydantic-settings prints for a type when nothing better is given.
RAW_TYPE_NAMES = ["dict[", "tuple[", "list[", "SecretStr", "Any]", "NoneType", "Path]"]
# `--flag WHAT` in capitals, `--flag {a,b}`, or a switch `--flag, --no-flag`.
FLAG_LINE = re.compile(r"-h, --help|--([a-z-]+) ([A-Z][A-Z,.]*|\{[a-z,-]+\})|--([a-z-]+), --no-\3")


@pytest.fixture
def help_text(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    # argparse wraps to $COLUMNS; 100 is a modest terminal.
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exit_:
        parse_settings(["--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def flag_help(text: str) -> dict[str, list[str]]:
    """Each flag's line (`  --port PORT`) -> the help lines under it."""
    flags: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("  -"):
            current = flags.setdefault(line.strip(), [])
        elif line.startswith("      "):
            current.append(line.strip())
    return flags


def test_help_names_no_python_types(help_text: str) -> None:
    for name in RAW_TYPE_NAMES:
        assert name not in help_text, name
    assert "(default: None)" not in help_text
    assert "default factory" not in help_text
    for flag in flag_help(help_text):
        assert FLAG_LINE.fullmatch(flag), flag


def test_every_flag_has_one_help_line_with_its_default(help_text: str) -> None:
    flags = flag_help(help_text)
    assert len(flags) == len(Settings.model_fields) + 1  # and -h, --help
    for flag, lines in flags.items():
        assert len(lines) == 1, (flag, lines)
        if not flag.startswith("-h"):
            assert lines[0].endswith(")") and "(default: " in lines[0], flag


def test_plain_defaults_are_the_fields_own(help_text: str) -> None:
    flags = flag_help(help_text)
    for name, field in Settings.model_fields.items():
        if type(field.default) in (int, str):
            (flag,) = [flag for flag in flags if flag.startswith(f"--{name.replace('_', '-')} ")]
            assert flags[flag][0].endswith(f"(default: {field.default})"), flag


@pytest.mark.parametrize(
    "flag",
    [
        "--model MODEL",
        "--cache-dir PATH",
        "--num-speculative-tokens N",
        "--speculative-config JSON",
        "--gpu-memory-utilization FRACTION",
        "--api-key KEY",
        "--speculative-upstreams URL,URL...",
        "--plain-upstream-api-key KEY",
        "--queue-timeout-seconds SECONDS",
        "--log-level {critical,error,warning,info,debug}",
        "--enforce-eager, --no-enforce-eager",
    ],
)
def test_key_flags_say_what_to_type(help_text: str, flag: str) -> None:
    assert flag in flag_help(help_text)


def test_help_groups_the_flags_and_shows_serve(help_text: str) -> None:
    assert help_text.startswith("usage: specgate [serve [MODEL]] [options]\n")
    sections = re.findall(r"^(\S[^:\n]*):$", help_text, flags=re.MULTILINE)
    assert sections[:3] == ["options", "model", "speculation"]
    assert "remote pools" in sections and "server" in sections
    assert "(default: the embedded SmolLM2-135M-Instruct)" in help_text
    assert "(default: ~/.cache/specgate)" in help_text


def test_serve_help_is_the_same_help(help_text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_settings(["serve", "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == help_text


# -- serve [MODEL] ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "model"),
    [
        (["serve", "org/model", "--port", "9000"], "org/model"),
        (["serve", "--model", "org/model", "--port", "9000"], "org/model"),
        (["--model", "org/model", "--port", "9000"], "org/model"),
        (["serve", "org/model", "--model", "org/model", "--port", "9000"], "org/model"),
        (["serve", "--port", "9000"], None),
        (["--port", "9000"], None),
    ],
)
def test_serve_model_is_model(
    argv: list[str], model: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPECGATE_MODEL", raising=False)
    settings = parse_settings(argv)
    assert settings.model == model
    assert settings.port == 9000


def test_serve_alone_keeps_the_embedded_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECGATE_MODEL", raising=False)
    assert parse_settings(["serve"]).model is None


def test_serve_model_wins_over_the_environment_as_model_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPECGATE_MODEL", "env/model")
    assert parse_settings(["serve"]).model == "env/model"
    assert parse_settings([]).model == "env/model"
    assert parse_settings(["serve", "cli/model"]).model == "cli/model"


@pytest.mark.parametrize("model_flag", [["--model", "other/model"], ["--model=other/model"]])
def test_two_different_models_are_refused(
    model_flag: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "org/model", *model_flag]
    with pytest.raises(SettingsError, match="serve org/model and --model other/model"):
        parse_settings(argv)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("specgate: invalid settings:") and "other/model" in err


def test_python_m_app_takes_serve_and_refuses_two_models() -> None:
    # The real entry point, as `specgate` and the images run it.
    result = subprocess.run(
        [sys.executable, "-m", "app", "serve", "org/a", "--model", "org/b"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "serve org/a and --model org/b" in result.stderr
    assert result.stdout == ""


def test_the_configuration_page_is_the_settings_own() -> None:
    # docs/configuration.md is generated: `make configuration` after changing a setting.
    from scripts.export_configuration import PAGE, render

    assert PAGE.read_text() == render(), "docs/configuration.md is stale: make configuration"
