"""The layers' imports point one way, and each package holds what its name says.

- The route decision (routing/), the per-step draft length (drafting/) and the replica choice
  (placement/) are pure: they never reach into the engines or the HTTP layer; the tenants'
  books (tenants/) take only the request's values.
- vLLM is imported only under app/engine/vllm/, Ray only under app/serve_ray/; the engine's
  protocol (app/engine/'s root) and the remote pool load neither.
- What runs in vLLM's own processes (the scheduler vLLM builds by name, the worker extension it
  loads by name) lives under app/engine/vllm/.
- The test doubles (app/engine/fakes/) are imported by tests and benchmarks only.
- The engines read the settings only where they are cut into frozen configs.
- No module name means two things.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"
# Third-party packages that bring a whole runtime with them.
VLLM = ("vllm", "arctic_inference")
RAY = ("ray",)


def imports(module: Path, top_level_only: bool = False) -> set[str]:
    """Every module a file imports, at its top or inside functions; with `top_level_only`,
    those it imports when it is itself imported."""
    tree = ast.parse(module.read_text())
    names: set[str] = set()
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def app_imports(module: Path) -> set[str]:
    return {name for name in imports(module) if name == "app" or name.startswith("app.")}


def modules(folder: Path, recursive: bool = False) -> list[Path]:
    return sorted(folder.rglob("*.py") if recursive else folder.glob("*.py"))


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


def outside(folder: str, allowed: tuple[str, ...]) -> list[str]:
    """Imports of app modules by `folder`'s files that name none of `allowed`."""
    assert modules(APP / folder), f"app/{folder}/ holds no modules: the wall guards nothing"
    return sorted(
        f"{path.relative_to(APP)}: {name}"
        for path in modules(APP / folder)
        for name in app_imports(path)
        if not within(name, allowed)
    )


def loading(paths: list[Path], packages: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{path.relative_to(APP)}: {name}"
        for path in paths
        for name in imports(path)
        if within(name, packages)
    )


def test_the_routing_policy_imports_only_itself_the_draft_rule_and_the_shared_words() -> None:
    allowed = ("app.routing", "app.drafting", "app.vocabulary")
    assert not outside("routing", allowed)


def test_the_draft_length_rule_imports_only_itself_and_the_shared_words() -> None:
    assert not outside("drafting", ("app.drafting", "app.vocabulary"))


def test_the_replica_choice_imports_only_itself_the_draft_rule_and_the_shared_words() -> None:
    assert not outside("placement", ("app.placement", "app.drafting", "app.vocabulary"))


def test_the_tenants_books_reach_neither_the_engines_nor_the_http_layer() -> None:
    # Keys, limits, fair share and the usage ledger: the request's values and the errors.
    allowed = ("app.tenants", "app.errors", "app.vocabulary", "app.engine.generation")
    assert not outside("tenants", allowed)


def test_the_shared_words_import_nothing_of_the_app() -> None:
    assert not app_imports(APP / "vocabulary.py")


def test_vllm_is_imported_only_under_the_engines_vllm_package() -> None:
    everywhere = modules(APP, recursive=True)
    elsewhere = [path for path in everywhere if not path.is_relative_to(APP / "engine" / "vllm")]
    assert not loading(elsewhere, VLLM)


def test_ray_is_imported_only_under_serve_ray() -> None:
    everywhere = modules(APP, recursive=True)
    elsewhere = [path for path in everywhere if not path.is_relative_to(APP / "serve_ray")]
    assert not loading(elsewhere, RAY)


def test_the_engine_protocol_and_the_remote_pool_load_neither_vllm_nor_ray() -> None:
    protocol_side = modules(APP / "engine") + modules(APP / "engine" / "remote")
    assert not loading(protocol_side, VLLM + RAY)
    # The embedded engine's modules are started on demand (engine/start.py), never loaded
    # with the protocol: an all-remote gateway runs without vLLM installed.
    eager = sorted(
        f"{path.relative_to(APP)}: {name}"
        for path in protocol_side
        for name in imports(path, top_level_only=True)
        if within(name, ("app.engine.vllm", "app.engine.fakes"))
    )
    assert not eager


def test_the_engines_read_the_settings_only_where_they_are_cut_into_configs() -> None:
    # Each engine and pool takes a small frozen config built at its boundary: the remote
    # pools' in engine/start.py (RemoteConfig), the embedded engines' in
    # engine/vllm/engine_config.py (LaunchConfig, EngineConfig); never the whole Settings.
    readers = loading(modules(APP / "engine", recursive=True), ("app.settings",))
    assert readers == [
        "engine/start.py: app.settings",
        "engine/vllm/engine_config.py: app.settings",
    ]


def test_what_vllm_loads_by_name_lives_under_the_engines_vllm_package() -> None:
    from app.engine.vllm.core.scheduler_choice import SCHEDULER_QUALNAME
    from app.engine.vllm.vllm_engine import WORKER_EXTENSION_QUALNAME

    for qualname in (SCHEDULER_QUALNAME, WORKER_EXTENSION_QUALNAME):
        module = qualname.rsplit(".", 1)[0]
        assert within(module, ("app.engine.vllm.core", "app.engine.vllm.worker")), qualname
        assert (APP.parent / (module.replace(".", "/") + ".py")).is_file(), qualname
    # And what imports vLLM's scheduler or worker classes to change them is there too.
    changers = loading(modules(APP, recursive=True), ("vllm.v1.core.sched", "vllm.v1.worker"))
    for change in changers:
        assert change.startswith(("engine/vllm/core/", "engine/vllm/worker/")), change


def test_the_fakes_are_imported_by_tests_and_benchmarks_only() -> None:
    fakes = APP / "engine" / "fakes"
    assert modules(fakes), "the fakes are not in app/engine/fakes/: the wall guards nothing"
    users = [path for path in modules(APP, recursive=True) if not path.is_relative_to(fakes)]
    assert not loading(users, ("app.engine.fakes",))


# Module names shared on purpose: one module per endpoint family in each of api/, encoders/ and
# schemas/ (each family's handler, encoder and schema), and each program's entry point and
# settings (`python -m app` and `python -m app.picker`).
SHARED_NAMES = {
    "__init__",
    "__main__",
    "settings",
    "chat",
    "completions",
    "responses",
    "tokenize",
    "models",
    "common",
}
VAGUE_NAMES = {"base", "types", "utils", "helpers", "misc", "run"}


def test_no_module_name_means_two_things_and_none_is_vague() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in modules(APP, recursive=True):
        where[path.stem].append(str(path.relative_to(APP)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert set(twice) <= SHARED_NAMES, {n: twice[n] for n in set(twice) - SHARED_NAMES}
    assert not set(where) & VAGUE_NAMES, sorted(set(where) & VAGUE_NAMES)
