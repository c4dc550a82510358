"""specgate's command line: `[serve [MODEL]] [flags]`, with a --help people can read.

pydantic-settings builds the flags from `Settings`; the hooks here give each one a metavar,
a one-line description with its default, and a section of --help.
"""

from __future__ import annotations

import itertools
from argparse import Action, ArgumentParser, RawDescriptionHelpFormatter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import CliApp, CliSettingsSource, SettingsError

from app.settings import Settings

USAGE = "%(prog)s [serve [MODEL]] [options]"
EPILOG = """\
`specgate serve MODEL` is `specgate --model MODEL`, as with `vllm serve`.
Every flag is also an environment variable: SPECGATE_ and its name, so
--max-model-len 8192 is SPECGATE_MAX_MODEL_LEN=8192.
"""


def parse_settings(argv: Sequence[str]) -> Settings:
    """Settings from `[serve [MODEL]] [flags]` and SPECGATE_* variables.

    Raises SettingsError or ValidationError for a bad value; argparse exits 2 on an unknown flag
    and 0 after --help.
    """
    return CliApp.run(Settings, cli_args=_without_serve(argv), cli_settings_source=flag_parser())


def _without_serve(argv: Sequence[str]) -> list[str]:
    # `serve` is a word, not a pydantic-settings subcommand: one would move every flag under it
    # and break the plain `specgate --model X` form. MODEL must follow it at once, as
    # documented, because only argparse knows which later words are the values of flags.
    if not argv or argv[0] != "serve":
        return list(argv)
    rest = list(argv[1:])
    if not rest or rest[0].startswith("-"):
        return rest
    model, rest = rest[0], rest[1:]
    for flagged in _values_of("--model", rest):
        if flagged != model:
            raise SettingsError(f"serve {model} and --model {flagged} name different models")
    return ["--model", model, *rest]


def _values_of(flag: str, args: list[str]) -> list[str]:
    values = [value for arg, value in itertools.pairwise(args) if arg == flag]
    return values + [arg.removeprefix(f"{flag}=") for arg in args if arg.startswith(f"{flag}=")]


def flag_parser() -> CliSettingsSource[ArgumentParser]:
    """The parser of Settings' flags, with --help in sections and each flag's default shown."""
    source: CliSettingsSource[ArgumentParser] = CliSettingsSource(
        Settings, add_argument_method=_FlagAdder().add, formatter_class=_HelpFormatter
    )
    parser: ArgumentParser = source.root_parser
    parser.usage, parser.epilog = USAGE, EPILOG
    return source


class _FlagAdder:
    """pydantic-settings' add_argument hook: puts each flag in its section of --help.

    pydantic-settings names a flag's type (`dict[str,Any]`, `SecretStr`) and appends
    `(default: None)`; the field's json_schema_extra (see settings._cli) says it for people.
    """

    def __init__(self) -> None:
        self._groups: dict[str, Any] = {}

    def add(self, parser: ArgumentParser, *names: str, **kwargs: Any) -> Action:
        field = Settings.model_fields.get(kwargs.get("dest", ""))
        if field is None:  # -h, --help
            return parser.add_argument(*names, **kwargs)
        extra = field.json_schema_extra
        if not isinstance(extra, dict):
            raise SettingsError(f"{names[0]} needs json_schema_extra=_cli(...) in app/settings.py")
        if "metavar" in kwargs and "metavar" in extra:
            kwargs["metavar"] = extra["metavar"]
        help_text = f"{field.description} (default: {_shown_default(field)})"
        kwargs["help"] = help_text.replace("%", "%%")  # argparse %-formats help
        title = str(extra["group"])
        if title not in self._groups:
            self._groups[title] = parser.add_argument_group(title)
        action: Action = self._groups[title].add_argument(*names, **kwargs)
        return action


def _shown_default(field: FieldInfo) -> str:
    extra = field.json_schema_extra
    if isinstance(extra, dict) and "unset" in extra:
        return str(extra["unset"])
    default = field.get_default(call_default_factory=True)
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, float):
        return f"{default:g}"
    if isinstance(default, Path) and default.is_relative_to(Path.home()):
        return f"~/{default.relative_to(Path.home())}"
    if default is None or default in ((), [], {}):
        raise SettingsError(f"say what {field.description!r} defaults to: _cli(unset=...)")
    return str(default)


class _HelpFormatter(RawDescriptionHelpFormatter):
    # Each flag's help on the line under it, nearly the terminal's width: argparse's column 24
    # left ~54 characters at 80 columns and wrapped most of them into paragraphs.
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=6)
