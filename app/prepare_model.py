"""`python -m app.prepare_model`: convert the embedded model into the cache now.

The CPU image runs this at build time, so that its containers serve within a minute instead
of converting on every fresh start. It reads SPECGATE_CACHE_DIR as the server does.
"""

from __future__ import annotations

import logging

from pydantic_settings import CliApp

from app.embedded_model import prepare_embedded_model
from app.settings import Settings


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(prepare_embedded_model(CliApp.run(Settings, cli_args=[]).embedded_model_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
