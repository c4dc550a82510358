"""The layers' imports point one way: the policy never reaches into the engines."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"


def app_imports(module: Path) -> set[str]:
    """The app.* modules a file imports, at its top or inside functions."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("app"):
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("app"))
    return names


def test_the_routing_policy_imports_only_itself_and_the_shared_words() -> None:
    outside = {
        f"{path.name}: {name}"
        for path in (APP / "routing").glob("*.py")
        for name in app_imports(path)
        if not (name.startswith("app.routing") or name == "app.vocabulary")
    }
    assert not outside, sorted(outside)


def test_the_shared_words_import_nothing_of_the_app() -> None:
    assert not app_imports(APP / "vocabulary.py")
