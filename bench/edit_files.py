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

Files are code (Python functions), configuration (YAML) or prose, about 100-300 tokens.

`file` and `wrong` are a conversation: one earlier edit of a file of the same shape (its own
seed), answered with the whole file changed, then the request. Asked once, without that turn,
the embedded 135M model mostly answers with a few words or with other text (tune split: 2 of
6 answers came near the changed file); with it, most answers copy the file (5 of 8), which
is what an editor's traffic looks like.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Literal, TypedDict

Kind = Literal["file", "cache", "wrong"]
KINDS: tuple[Kind, ...] = ("file", "cache", "wrong")
SEEDS = {"tune": range(0, 8), "report": range(100, 108)}

WORDS = (
    "amber basin cedar delta ember fable granite harbor island juniper kestrel lantern meadow "
    "nectar orchard pepper quartz raven saffron timber umber violet willow yarrow zephyr"
).split()
VERBS = ("count", "sum", "scale", "filter", "merge", "clip", "rank", "split")
# Prose from varied parts: sentences the model can copy without falling into a loop.
SUBJECTS = (
    "The river|A small boat|The old miller|Every lantern|The north road|A quiet market|"
    "The harbor bell|Our garden wall|The last train|A copper kettle"
).split("|")
ACTIONS = (
    "crossed|waited near|glowed above|turned toward|rested beside|leaned against|circled|"
    "followed|passed under|faced"
).split("|")
PLACES = (
    "the stone bridge|the empty square|a row of pines|the chapel steps|the frozen pond|"
    "the salt marsh|an open window|the long pier|the mill wheel|the hay barn"
).split("|")
TIMES = (
    "at dawn|before the rain|all winter|in the evening fog|without a sound|until noon|"
    "for an hour|as the tide rose|every spring|after the storm"
).split("|")
# The seed of the earlier edit each conversation opens with (one per shape, in no split).
EXAMPLE_SEED = 999


class Message(TypedDict):
    role: str
    content: str


@dataclass(frozen=True)
class EditRequest:
    kind: Kind
    seed: int
    shape: str  # code, config, prose, records
    messages: tuple[Message, ...]
    prediction: str
    max_tokens: int
    # `cache`: the request whose answer the client kept (the records before the change).
    previous_prompt: str | None = None
    # The request's own greedy answer, for an oracle arm (bench/edit_traffic.py fills it in).
    answer: str | None = None

    @property
    def prompt(self) -> str:
        """The last message: the request itself."""
        return self.messages[-1]["content"]


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
    sentences = [
        f"{rng.choice(SUBJECTS)} {rng.choice(ACTIONS)} {rng.choice(PLACES)} {rng.choice(TIMES)}."
        for _ in range(10)
    ]
    text = " ".join(sentences[:5]) + "\n\n" + " ".join(sentences[5:]) + "\n"
    old = rng.choice([t for t in TIMES if t in text])
    new = rng.choice([t for t in TIMES if t not in text])
    return text, f'Replace "{old}" with "{new}".', text.replace(old, new)


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


SHAPES = {"code": _code, "config": _config, "prose": _prose}


def _asking(instruction: str, text: str) -> Message:
    return {"role": "user", "content": f"{instruction} Answer with the whole file.\n\n{text}"}


def _earlier_edit(shape: str) -> tuple[Message, Message]:
    text, instruction, changed = SHAPES[shape](random.Random(EXAMPLE_SEED))
    return _asking(instruction, text), {"role": "assistant", "content": changed}


def edit_request(kind: Kind, seed: int) -> EditRequest:
    rng = random.Random(seed * 31 + KINDS.index(kind))
    if kind == "cache":
        lines, earlier, rendered = _records(rng)
        bound = _bound(rendered)
        asked: Message = {"role": "user", "content": RENDER + lines}
        return EditRequest(kind, seed, "records", (asked,), rendered, bound, RENDER + earlier)
    shape = ("code", "config", "prose")[seed % 3]
    text, instruction, _ = SHAPES[shape](rng)
    messages = (*_earlier_edit(shape), _asking(instruction, text))
    prediction = text
    if kind == "wrong":
        other = {"code": _prose, "config": _code, "prose": _config}[shape](rng)[0]
        prediction = (other * 2)[: len(text)]
    return EditRequest(kind, seed, shape, messages, prediction, _bound(text))


def _bound(text: str) -> int:
    # Room for the whole file and a little more, in tokens (about 3.5 characters a token).
    return int(len(text) / 3.5 * 1.3) + 16


def requests(split: str, kinds: tuple[Kind, ...] = KINDS) -> list[EditRequest]:
    return [edit_request(kind, seed) for kind in kinds for seed in SEEDS[split]]
