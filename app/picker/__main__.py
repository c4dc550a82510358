"""`python -m app.picker --endpoints FILE [--port P] [flags]`: read flags and
SPECGATE_PICKER_* variables, then serve until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import sys

from pydantic import ValidationError
from pydantic_settings import CliApp, SettingsError

from app.picker.settings import PickerSettings


def main(argv: list[str] | None = None) -> int:
    try:
        settings = CliApp.run(PickerSettings, cli_args=sys.argv[1:] if argv is None else argv)
    except (SettingsError, ValidationError) as exc:
        print(f"specgate picker: invalid settings: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # httpx logs every call at INFO: that is every scrape.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        from app.picker.server import serve
    except ImportError as exc:
        print(
            f"specgate picker: {exc.name} is missing: pip install 'specgate[picker]'",
            file=sys.stderr,
        )
        return 2
    try:
        asyncio.run(serve(settings))
    except (OSError, ValueError) as exc:  # the endpoints file, or the port
        print(f"specgate picker: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
