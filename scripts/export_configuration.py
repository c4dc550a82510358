"""Write docs/configuration.md from the command line's own parser:
`python -m scripts.export_configuration`.

Every setting, by --help's sections, with its flag, environment variable, default and
description, as `specgate --help` prints them. tests/fast/test_cli.py fails when the committed
page and the settings drift apart.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app.cli import EPILOG, flag_parser

TABLE_HEAD = "| flag | environment | meaning (default) |"
PAGE = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
HEADER = """\
# Configuration

Generated from `app/settings.py` by `make configuration`; do not edit by hand.

{epilog}
"""


def render() -> str:
    parser = flag_parser().root_parser
    lines = [HEADER.format(epilog=EPILOG.strip())]
    for group in parser._action_groups:  # argparse keeps --help's sections only here
        actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        lines += [
            f"## {group.title}",
            "",
            "| flag | environment | meaning (default) |",
            "|---|---|---|",
        ]
        for action in actions:
            flags = ", ".join(f"`{name}`" for name in action.option_strings)
            if action.metavar:
                flags += f" `{action.metavar}`"
            variable = f"`SPECGATE_{action.dest.upper()}`"
            meaning = str(action.help).replace("%%", "%").replace("|", "\\|")
            lines.append(f"| {flags} | {variable} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    PAGE.write_text(render())
    print(f"wrote {PAGE}")
