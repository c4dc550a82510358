"""Cost of routing one request: feature extraction, classification and the decision.

    python -m bench.routing_cost [--runs N] [--out-dir DIR]

Times `extract_features` + `RoutePolicy.decide` on prompts of 8192 tokens (counted with the
embedded model's tokenizer when its cache exists), after a warm-up, prints p50/p99 and writes
them with the manifest to bench/results/routing_cost/<run id>/ (or `--out-dir`).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

from app.embedded_model import MODEL_NAME
from app.routing.features import extract_features
from app.routing.learner import Learner
from app.routing.load_model import Load
from app.routing.policy import RoutePolicy, RoutingRules
from app.settings import Settings
from bench.manifest import recorded_run

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


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.routing_cost", description=__doc__)
    parser.add_argument("--runs", type=int, default=RUNS, help="timed runs per prompt")
    parser.add_argument(
        "--out-dir", type=Path, default=None, help="default: bench/results/routing_cost/<run id>/"
    )
    args = parser.parse_args(argv)
    router = RoutePolicy(RoutingRules(exploration=0.05, max_speculative_load=4), Learner())
    with recorded_run("bench.routing_cost", args.out_dir, argv) as run:
        print(
            f"{args.runs} runs per prompt after 200 warm-up runs; "
            f"prompts of ~{TARGET_TOKENS} tokens"
        )
        print("| prompt | chars | p50 ms | p99 ms | max ms |")
        print("|---|---|---|---|---|")
        results: dict[str, dict[str, float]] = {}
        for name, piece in PIECES.items():
            text = prompt_of_tokens(piece, TARGET_TOKENS)
            timings = []
            for n in range(args.runs + 200):
                started = time.perf_counter()
                features = extract_features(text, temperature=random.choice([0.0, 1.0]))
                router.decide("auto", features, load=Load(plain=n % 3, speculative=n % 3))
                if n >= 200:
                    timings.append((time.perf_counter() - started) * 1000)
            timings.sort()
            row = {
                "chars": len(text),
                "p50_ms": statistics.median(timings),
                "p99_ms": timings[max(0, int(len(timings) * 0.99) - 1)],
                "max_ms": timings[-1],
            }
            results[name] = row
            print(
                f"| {name} | {len(text)} | {row['p50_ms']:.3f} | {row['p99_ms']:.3f} | "
                f"{row['max_ms']:.3f} |"
            )
        document = {"target_tokens": TARGET_TOKENS, "runs": args.runs, "prompts": results}
        (run.folder / "results.json").write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
