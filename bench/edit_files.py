"""Edit-shaped requests for Predicted Outputs (issue 42): a file rewritten with a small change.

Three kinds, each from fixed seeds (the tune split's and the report split's seeds differ):
- `file`: the canonical case. The file is in the prompt, the answer is the file with one
  change, and the prediction is the file as it was.
- `cache`: the client's cache. The prompt holds records as `key=value` lines and asks for
  them as JSON; the prediction is what the model answered last time, for the records before
  one value changed (`previous_prompt`; bench/edit_traffic.py asks a server of its own for
  it, so no arm's trees hold it). n-gram and suffix trees over the prompt cannot propose it.
- `wrong`: a prompt made as `file`'s (the same shapes, files of its own seeds), with
  unrelated text as the prediction: another shape's file, twice over, cut to the file's
  length (shorter where twice another file is shorter still).

Files are code (Python functions), configuration (YAML) or prose, about 150-250 tokens.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Literal

Kind = Literal["file", "cache", "wrong"]
KINDS: tuple[Kind, ...] = ("file", "cache", "wrong")
SEEDS = {"tune": range(0, 8), "report": range(100, 108)}

WORDS = (
    "amber basin cedar delta ember fable granite harbor island juniper kestrel lantern meadow "
    "nectar orchard pepper quartz raven saffron timber umber violet willow yarrow zephyr"
).split()
VERBS = ("count", "sum", "scale", "filter", "merge", "clip", "rank", "split")


@dataclass(frozen=True)
class EditRequest:
    kind: Kind
    seed: int
    shape: str  # code, config, prose, records
    prompt: str
    prediction: str
    max_tokens: int
    # `cache`: the request whose answer the client kept (the records before the change).
    previous_prompt: str | None = None


def _code(rng: random.Random) -> tuple[str, str, str]:
    """A Python file, the instruction that changes it, and the file changed."""
    names = rng.sample(WORDS, 4)
    blocks = []
    for name in names:
        verb, limit, factor = rng.choice(VERBS), rng.randint(2, 90), rng.randint(2, 9)
        blocks.append(
            f"def {verb}_{name}(values, limit={limit}):\n"
            f'    """{verb.capitalize()} the {name} values above the limit."""\n'
            f"    total = 0\n"
            f"    for value in values:\n"
            f"        if value > limit:\n"
            f"            total += value * {factor}\n"
            f"    return total\n"
        )
    text = "\n\n".join(blocks)
    old = rng.choice(names)
    new = rng.choice([w for w in WORDS if w not in names])
    return text, f"Rename {old} to {new} everywhere in this file.", text.replace(old, new)


def _config(rng: random.Random) -> tuple[str, str, str]:
    lines = []
    values: list[tuple[str, str]] = []
    for section in rng.sample(WORDS, 3):
        lines.append(f"{section}:")
        for key in rng.sample(WORDS, 5):
            value = str(rng.randint(1, 9999))
            lines.append(f"  {key}: {value}")
            values.append((f"  {key}: {value}", f"  {key}: {int(value) + 7}"))
    text = "\n".join(lines) + "\n"
    old, new = rng.choice(values)
    key = old.split(":")[0].strip()
    instruction = f"Change the value of {key} from {old.split(': ')[1]} to {new.split(': ')[1]}."
    return text, instruction, text.replace(old, new, 1)


def _prose(rng: random.Random) -> tuple[str, str, str]:
    sentences = []
    for _ in range(10):
        a, b, c = rng.sample(WORDS, 3)
        sentences.append(f"The {a} path runs past the {b} gate toward the {c} hill.")
    text = " ".join(sentences[:5]) + "\n\n" + " ".join(sentences[5:]) + "\n"
    old = rng.choice(sentences).split()[1]
    new = rng.choice([w for w in WORDS if w not in text])
    return text, f"Replace the word {old} with {new}.", text.replace(old, new)


def _records(rng: random.Random) -> tuple[str, str, str]:
    """Records as key=value lines (the prompt), the same records before one value changed, and
    their JSON (a stand-in prediction until a server's answer replaces it)."""
    rows: list[dict[str, str | int]] = [
        {"name": name, "port": rng.randint(1000, 9999), "zone": rng.choice(WORDS)}
        for name in rng.sample(WORDS, 6)
    ]
    before = [dict(row) for row in rows]
    changed = rng.randrange(len(rows))
    rows[changed] = {**rows[changed], "port": int(rows[changed]["port"]) + 1}
    return _lines(rows), _lines(before), json.dumps(before, indent=2)


def _lines(rows: list[dict[str, str | int]]) -> str:
    return "\n".join(", ".join(f"{k}={v}" for k, v in row.items()) for row in rows)


RENDER = (
    "Render these records as a JSON array of objects with the keys name, port and zone, "
    "indented by two spaces. Answer with the JSON only.\n\n"
)


def edit_request(kind: Kind, seed: int) -> EditRequest:
    rng = random.Random(seed * 31 + KINDS.index(kind))
    if kind == "cache":
        lines, earlier, rendered = _records(rng)
        bound = _bound(rendered)
        return EditRequest(kind, seed, "records", RENDER + lines, rendered, bound, RENDER + earlier)
    shape = ("code", "config", "prose")[seed % 3]
    text, instruction, _ = {"code": _code, "config": _config, "prose": _prose}[shape](rng)
    prompt = f"{instruction} Answer with the whole file, nothing else.\n\n{text}"
    prediction = text
    if kind == "wrong":
        other = {"code": _prose, "config": _code, "prose": _config}[shape](rng)[0]
        prediction = (other * 2)[: len(text)]
    return EditRequest(kind, seed, shape, prompt, prediction, _bound(text))


def _bound(text: str) -> int:
    # Room for the whole file and a little more, in tokens (about 3.5 characters a token).
    return int(len(text) / 3.5 * 1.3) + 16


def requests(split: str, kinds: tuple[Kind, ...] = KINDS) -> list[EditRequest]:
    return [edit_request(kind, seed) for kind in kinds for seed in SEEDS[split]]
