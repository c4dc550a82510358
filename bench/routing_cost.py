"""Cost of routing one request: feature extraction, classification and the decision.

    python -m bench.routing_cost

Times `extract_features` + `RoutePolicy.decide` on prompts of 8192 tokens (counted with the
embedded model's tokenizer when its cache exists), after a warm-up, and prints p50/p99.
"""

from __future__ import annotations

import random
import statistics
import time

from app.embedded_model import MODEL_NAME
from app.routing.features import extract_features
from app.routing.learner import Learner
from app.routing.policy import RoutePolicy, RoutingRules
from app.settings import Settings

TARGET_TOKENS = 8192
RUNS = 2000

PIECES = {
    "prose": "The committee reviewed the proposal and asked for a revised budget by Friday. ",
    "code": "def total(items):\n    return sum(item.price for item in items if item.active)\n\n",
    "json": '{"id": 17, "name": "user17", "email": "user17@example.com", "active": true},\n',
}


def prompt_of_tokens(piece: str, tokens: int) -> str:
    folder = Settings().cache_dir / "models" / MODEL_NAME
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        per_piece = len(tokenizer.encode(piece, add_special_tokens=False))
    except (OSError, ImportError):
        per_piece = max(1, len(piece) // 4)  # no model cache: about 4 characters a token
    return piece * (tokens // per_piece + 1)


def main() -> None:
    router = RoutePolicy(RoutingRules(exploration=0.05, max_speculative_load=4), Learner())
    print(f"{RUNS} runs per prompt after 200 warm-up runs; prompts of ~{TARGET_TOKENS} tokens")
    print("| prompt | chars | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|")
    for name, piece in PIECES.items():
        text = prompt_of_tokens(piece, TARGET_TOKENS)
        timings = []
        for run in range(RUNS + 200):
            started = time.perf_counter()
            features = extract_features(text, temperature=random.choice([0.0, 1.0]))
            router.decide("auto", features, load=run % 6)
            if run >= 200:
                timings.append((time.perf_counter() - started) * 1000)
        timings.sort()
        p99 = timings[int(len(timings) * 0.99) - 1]
        print(
            f"| {name} | {len(text)} | {statistics.median(timings):.3f} | {p99:.3f} | "
            f"{timings[-1]:.3f} |"
        )


if __name__ == "__main__":
    main()
