"""Cheap features of a request, computed from the request alone, before routing.

Everything here is bounded: regexes scan the prompt once in C, and the Python-level work
(n-gram repetition, compression) looks only at the prompt's last `WINDOW_CHARS`, so the
cost stays well under a millisecond even for an 8k-token prompt.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

# What prompt-lookup drafting sees most: the end of the context.
WINDOW_CHARS = 4096
# Instructions sit at the start or the end of a prompt; the material goes in between.
INSTRUCTION_CHARS = 1500
NGRAM = 3

_JSON_WORDS = frozenset({"json", "jsonl", "yaml", "csv", "xml", "toml"})
_CODE_WORDS = frozenset(
    {"python", "javascript", "typescript", "rust", "golang", "java", "c++", "sql", "bash",
     "shell", "function", "class", "method", "script", "regex", "code", "implement",
     "algorithm", "program", "snippet"}
)  # fmt: skip
_EDIT_WORDS = frozenset(
    {"rewrite", "rephrase", "edit", "fix", "correct", "proofread", "refactor", "reformat",
     "convert", "extract", "translate", "summarize", "summarise", "shorten", "continue",
     "complete", "rename", "update", "modify", "simplify", "list", "change", "turn",
     "edited", "editor", "spelling", "spellings", "capital", "punctuation", "tense"}
)  # fmt: skip
_WORD = re.compile(r"[a-z+#-]+")
# JSON members, lone brackets, YAML "- key: value" items, and CSV rows of four or more fields.
_JSON_SYNTAX = re.compile(
    r'"\s*:\s*["\d\[{tfn-]|^\s*[\[{]\s*$|^\s*-\s+\w+:\s|^[^,\n]+(,[^,\n]*){3,}$',
    re.MULTILINE,
)
_CODE_SYNTAX = re.compile(
    r"```|^\s*(def|class|import|from|return|if|for|while|function|const|let|var|public|"
    r"SELECT|INSERT|UPDATE|CREATE|fi|done|then|do|esac|echo)\b|[;{}]\s*$|=>|\):\s*$|^#!|"
    r"\$\{?[A-Za-z_]\w*",
    re.MULTILINE,
)


@dataclass(frozen=True)
class RequestFeatures:
    prompt_chars: int
    wants_json: bool  # response_format or a structured-output request
    json_lines: int  # lines of the prompt tail that look like JSON/YAML
    json_words: int  # distinct data-format words in the instructions
    code_lines: int  # lines of the prompt tail that look like code
    code_words: int
    edit_words: int
    # Share of the prompt tail's word n-grams already seen earlier in the prompt: the hit
    # rate an ngram proposer would get drafting a continuation of this text.
    repetition: float
    # 1 - compressed/raw size of the prompt tail: high for repetitive, predictable text.
    compressibility: float
    temperature: float
    top_p: float
    max_tokens: int | None
    # The client sent its prediction of the answer (OpenAI's Predicted Outputs).
    predicted: bool = False


def extract_features(
    prompt_text: str,
    *,
    wants_json: bool = False,
    temperature: float | None = None,
    top_p: float | None = None,
    max_tokens: int | None = None,
    predicted: bool = False,
) -> RequestFeatures:
    tail = prompt_text[-WINDOW_CHARS:]
    if len(prompt_text) > 2 * INSTRUCTION_CHARS:
        instructions = prompt_text[:INSTRUCTION_CHARS] + " " + prompt_text[-INSTRUCTION_CHARS:]
    else:
        instructions = prompt_text
    words = set(_WORD.findall(instructions.lower()))
    return RequestFeatures(
        prompt_chars=len(prompt_text),
        wants_json=wants_json,
        json_lines=len(_JSON_SYNTAX.findall(tail)),
        json_words=len(words & _JSON_WORDS),
        code_lines=len(_CODE_SYNTAX.findall(tail)),
        code_words=len(words & _CODE_WORDS),
        edit_words=len(words & _EDIT_WORDS),
        repetition=_repetition(tail),
        compressibility=_compressibility(tail),
        # OpenAI's defaults when unset.
        temperature=1.0 if temperature is None else temperature,
        top_p=1.0 if top_p is None else top_p,
        max_tokens=max_tokens,
        predicted=predicted,
    )


def _repetition(text: str) -> float:
    words = text.split()
    grams = list(zip(*(words[i:] for i in range(NGRAM)), strict=False))
    if len(grams) < 2:
        return 0.0
    # Every n-gram beyond its first occurrence is one a prompt lookup would have found.
    return (len(grams) - len(set(grams))) / len(grams)


def _compressibility(text: str) -> float:
    raw = text.encode()
    if len(raw) < 64:  # too short for zlib's overhead to say anything
        return 0.0
    return max(0.0, 1 - len(zlib.compress(raw, 1)) / len(raw))
