"""Workload classes, from request features.

The classes are about how much of the output a prompt-lookup drafter can copy from the
prompt, because that decides whether speculation pays. Code is split in two: writing new
code copies little, changing code that the prompt supplies copies a lot.
"""

from __future__ import annotations

from enum import StrEnum

from app.routing.features import RequestFeatures


class WorkloadClass(StrEnum):
    STRUCTURED = "structured"  # JSON, YAML, CSV from material in the prompt: copies a lot
    FRESH_JSON = "fresh-json"  # JSON asked for with nothing to copy: "invent a person"
    CODE_EDIT = "code-edit"  # change, continue or fix code given in the prompt
    CODE = "code"  # write new code
    REWRITE = "rewrite"  # rewrite, extract, continue or reformat a supplied passage
    OPEN_ENDED = "open-ended"  # stories, poems, chat: little to copy


# A prompt with this much text carries material to work on, not just an instruction.
MATERIAL_CHARS = 200
# A prompt this long is mostly material, whatever its instruction says.
LONG_MATERIAL_CHARS = 500
# A prompt that repeats itself this much feeds a prompt-lookup drafter whatever it asks for.
REPETITIVE = 0.2
COMPRESSIBLE = 0.6
# Lines that look like code or data before the prompt counts as carrying some.
CODE_LINES = 3
JSON_LINES = 3


def classify(features: RequestFeatures) -> WorkloadClass:
    carries_code = features.code_lines >= CODE_LINES
    carries_json = features.json_lines >= JSON_LINES and features.json_lines >= features.code_lines
    if carries_json:
        return WorkloadClass.STRUCTURED
    if features.wants_json:
        # A grammar makes the output JSON, but drafts land only where the prompt has
        # something to copy: a short instruction gives prompt lookup almost nothing.
        if features.prompt_chars >= MATERIAL_CHARS or carries_code or _repetitive(features):
            return WorkloadClass.STRUCTURED
        return WorkloadClass.FRESH_JSON
    if features.json_words and not carries_code:
        return WorkloadClass.STRUCTURED
    if carries_code:
        return WorkloadClass.CODE_EDIT
    if features.prompt_chars >= LONG_MATERIAL_CHARS or (
        features.prompt_chars >= MATERIAL_CHARS and (features.edit_words or _repetitive(features))
    ):
        return WorkloadClass.REWRITE
    if features.code_words:
        return WorkloadClass.CODE
    return WorkloadClass.OPEN_ENDED


def _repetitive(features: RequestFeatures) -> bool:
    return features.repetition >= REPETITIVE or features.compressibility >= COMPRESSIBLE
