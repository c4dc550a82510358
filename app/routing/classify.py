"""A first, rule-based workload classifier over the prompt text.

The classes are about how much of the output is likely to repeat the prompt, because
that is what prompt-lookup (ngram) drafting can exploit.
"""

from __future__ import annotations

import re
from enum import StrEnum


class WorkloadClass(StrEnum):
    STRUCTURED = "structured"  # JSON, YAML, tables: repetitive keys and punctuation
    EDIT = "edit"  # rewrite, fix, extract or reformat text given in the prompt
    CODE = "code"  # write or change code
    OPEN_ENDED = "open-ended"  # stories, poems, chat: little to copy


_EDIT_WORDS = re.compile(
    r"\b(rewrite|rephrase|edit|fix|correct|proofread|refactor|reformat|convert|extract|"
    r"translate|summari[sz]e|continue|complete|rename|update|modify)\b",
    re.IGNORECASE,
)
_CODE_WORDS = re.compile(
    r"\b(python|javascript|typescript|rust|golang|java|c\+\+|sql|bash|function|class|"
    r"method|script|regex|code|implement|compile|algorithm)\b",
    re.IGNORECASE,
)
_JSON_WORDS = re.compile(r"\b(json|yaml|csv|xml|schema)\b", re.IGNORECASE)
_CODE_SYNTAX = re.compile(r"```|\bdef \w+\(|\bfunction \w+\(|[{};]\s*$|=>|::", re.MULTILINE)
# Text the prompt hands over for the model to work on, long enough to copy from.
_MIN_MATERIAL_CHARS = 200


def classify(prompt_text: str, wants_json: bool = False) -> WorkloadClass:
    if wants_json or _JSON_WORDS.search(prompt_text) or _looks_like_json(prompt_text):
        return WorkloadClass.STRUCTURED
    has_material = len(prompt_text) >= _MIN_MATERIAL_CHARS
    if _EDIT_WORDS.search(prompt_text) and has_material:
        return WorkloadClass.EDIT
    if _CODE_WORDS.search(prompt_text) or _CODE_SYNTAX.search(prompt_text):
        return WorkloadClass.CODE
    return WorkloadClass.OPEN_ENDED


def _looks_like_json(text: str) -> bool:
    stripped = text.strip()
    return stripped.count('":') >= 3 or stripped.startswith(("{", "[{"))
