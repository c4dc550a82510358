"""Write the app's OpenAPI document to openapi/openapi.json: `python -m scripts.export_openapi`.

tests/fast/api/test_openapi.py fails when the committed file and the app drift apart.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.main import create_app
from app.settings import Settings

DOCUMENT = Path(__file__).resolve().parents[1] / "openapi" / "openapi.json"


def current_document() -> dict[str, Any]:
    return create_app(Settings()).openapi()


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    DOCUMENT.write_text(render(current_document()))
    print(f"wrote {DOCUMENT}")
