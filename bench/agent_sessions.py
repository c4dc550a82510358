"""Agent-shaped conversations, whose answers repeat what came before as agents' do: a file
edited turn after turn and returned whole each time, records extracted into one JSON shape
one after another, a tool loop, and creative prompts beside them that repeat nothing.

Two splits with the same shapes and different contents: tune rules on `tune`, report on
`report` (bench.agent_traffic's --split).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["file edits", "JSON records", "tool loop", "creative"]
KINDS: tuple[Kind, ...] = ("file edits", "JSON records", "tool loop", "creative")


@dataclass(frozen=True)
class Session:
    """One agent's conversation: a system message, then user turns asked one after another,
    each with the assistant's earlier answers in the context."""

    name: str
    kind: Kind
    system: str
    turns: tuple[str, ...]
    max_tokens: int


EDIT_SYSTEM = "You edit code. Reply with the whole file after the change, and nothing else."
RECORD_SYSTEM = (
    "Extract the person in each message as one line of JSON with the keys "
    '"name", "age", "city" and "job". Reply with the JSON only.'
)
TOOL_SYSTEM = (
    "You answer questions with tools. Each reply is one line: either "
    "Action: search[<query>] or Action: finish[<answer>]. The user replies with an Observation."
)

_FILES = {
    "tune": """def total(prices):
    result = 0
    for price in prices:
        result = result + price
    return result


def average(prices):
    if not prices:
        return 0
    return total(prices) / len(prices)


def cheapest(prices):
    best = None
    for price in prices:
        if best is None or price < best:
            best = price
    return best
""",
    "report": """class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, count):
        self.items[name] = self.items.get(name, 0) + count

    def remove(self, name, count):
        left = self.items.get(name, 0) - count
        if left < 0:
            raise ValueError("not enough " + name)
        self.items[name] = left

    def total(self):
        return sum(self.items.values())
""",
}
_EDITS = {
    "tune": (
        "Rename the function total to sum_prices everywhere.",
        "Add a one-line docstring to average.",
        "Make cheapest return 0 for an empty list.",
        "Add type hints for list[float] arguments and float results.",
    ),
    "report": (
        "Add a method has(self, name) that says whether the count is above zero.",
        "Rename the method total to count_all.",
        "Add a one-line docstring to remove.",
        "Make add refuse a negative count with a ValueError.",
    ),
}
_RECORDS = {
    "tune": (
        "Maria Lopez, 34, is a nurse in Madrid.",
        "The baker Tom Hardy (51) lives in Leeds.",
        "Aiko Tanaka from Osaka works as an engineer; she is 29.",
        "In Lyon, the 45-year-old teacher Paul Martin.",
        "Chen Wei, a 38-year-old pilot, is based in Shanghai.",
    ),
    "report": (
        "Olga Petrova is 27 and works as a chemist in Kazan.",
        "The plumber Jack Brown, 62, lives in Dublin.",
        "Lucas Silva (19) studies and works as a waiter in Porto.",
        "Fatima Zahra, an architect from Rabat, is 41.",
        "Sven Berg, 55, is a fisherman in Bergen.",
    ),
}
_TOOL_TURNS = {
    "tune": (
        "Question: what is the capital of the country where the Danube ends?",
        "Observation: The Danube flows into the Black Sea in Romania.",
        "Observation: Romania's capital is Bucharest.",
        "Observation: Bucharest has about 1.7 million inhabitants.",
    ),
    "report": (
        "Question: who wrote the novel whose hero is a whale hunter called Ahab?",
        "Observation: Captain Ahab is the captain of the Pequod in Moby-Dick.",
        "Observation: Moby-Dick was written by Herman Melville in 1851.",
        "Observation: Herman Melville was born in New York City in 1819.",
    ),
}
_CREATIVE = {
    "tune": (
        "Write a short poem about a lighthouse in winter.",
        "Invent a myth about why the moon changes shape.",
        "Describe a city where it always rains, in a few sentences.",
    ),
    "report": (
        "Write a short poem about a fox crossing a frozen river.",
        "Invent a fable about a clock that wanted to stop.",
        "Describe a market on a floating island, in a few sentences.",
    ),
}


def sessions(split: str) -> list[Session]:
    """The agents of one split, one conversation each, and the creative prompts, one
    single-turn conversation each."""
    edits = tuple(
        f"Here is the file:\n```python\n{_FILES[split]}```\n{_EDITS[split][0]}" if i == 0 else edit
        for i, edit in enumerate(_EDITS[split])
    )
    agents = [
        Session(f"{split}-edits", "file edits", EDIT_SYSTEM, edits, 320),
        Session(f"{split}-records", "JSON records", RECORD_SYSTEM, _RECORDS[split], 64),
        Session(f"{split}-tools", "tool loop", TOOL_SYSTEM, _TOOL_TURNS[split], 48),
    ]
    creative = [
        Session(f"{split}-creative-{i}", "creative", "You are a creative writer.", (prompt,), 160)
        for i, prompt in enumerate(_CREATIVE[split])
    ]
    return agents + creative
