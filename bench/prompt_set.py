"""The benchmarks' prompt sets: JSONL files of prompts by class, split into a part to tune on
and a part to report on (bench/prompts*.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.client import Prompt

CLASSES = ("code", "structured", "edit", "open-ended")
SPLITS = ("tune", "report")
# Prompt-file fields that describe the prompt and are never sent to the server.
BOOKKEEPING_FIELDS = ("id", "class", "endpoint", "split", "shape")

# Canned prompts shared by the small benchmarks and the real-engine tests: a greedy
# continuation that copies its prompt (what prompt lookup drafts nearly all right), a code
# request, and an open-ended poem that drafts poorly.
JSON_CONTINUATION = (
    "[\n"
    + "".join(
        f'  {{"id": {i}, "name": "user{i}", "email": "user{i}@example.com", "active": true}},\n'
        for i in range(1, 9)
    )
    + '  {"id": 9,'
)
CODE = [{"role": "user", "content": "Write a Python function that checks if a number is prime."}]
POEM = "Write a surreal poem about a clock that melts into the sea."


def load_prompts(
    path: Path, limit_per_class: int | None, split: str = "all", shape: str | None = None
) -> list[Prompt]:
    """Read the JSONL prompt set, keep the first N of each class, interleave the classes.

    `split` "tune" or "report" keeps only the lines whose `split` field says so (first, before
    the per-class limit); "all" keeps every line. `shape` keeps only lines of that `shape`.

    Interleaving (code, structured, edit, open-ended, code, ...) spreads the machine's drift
    over all classes instead of letting it land on whichever class comes last in the file.
    """
    by_class: dict[str, list[Prompt]] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        prompt = _parse_prompt(row, f"{path}:{number}")
        if split != "all" and row.get("split") != split:
            continue
        if shape is not None and row.get("shape") != shape:
            continue
        by_class.setdefault(prompt.cls, []).append(prompt)
    for cls, prompts in by_class.items():
        by_class[cls] = prompts[:limit_per_class] if limit_per_class else prompts
    ordered: list[Prompt] = []
    for i in range(max((len(p) for p in by_class.values()), default=0)):
        ordered += [prompts[i] for prompts in by_class.values() if i < len(prompts)]
    return ordered


def _parse_prompt(row: dict[str, Any], where: str) -> Prompt:
    cls = row.get("class")
    endpoint = row.get("endpoint")
    if cls not in CLASSES:
        raise SystemExit(f"{where}: class must be one of {CLASSES}, got {cls!r}")
    if endpoint not in ("chat", "completions"):
        raise SystemExit(f"{where}: endpoint must be chat or completions, got {endpoint!r}")
    content_key = "messages" if endpoint == "chat" else "prompt"
    if content_key not in row:
        raise SystemExit(f"{where}: a {endpoint} prompt needs {content_key!r}")
    if row.get("split") not in (None, *SPLITS):
        raise SystemExit(f"{where}: split must be one of {SPLITS}, got {row['split']!r}")
    # Everything but the bookkeeping fields goes to the server as written.
    fields = {k: v for k, v in row.items() if k not in BOOKKEEPING_FIELDS}
    return Prompt(str(row.get("id", where)), cls, endpoint, fields)
