"""Where the tests find the repository's own files."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
