"""specgate on Ray Serve over two paced fake replicas: the server the routing benchmark runs.

python -m bench.ray_fake_server --port P --router {specgate,power-of-two,prefix-affinity}
    [--replicas 2]

The gateway is specgate's, whole (auto routing, one engine per replica, draft lengths per
request), as Serve's ingress; the replicas are app/engine/fakes/paced.py's fake engines, whose
batched steps take what the real embedded engine's measured step-cost line says, so that two
of them fit a 2-core machine. Only the router differs between the arms.

The pacing's figures and where they come from:
- the step-cost line: CPU_STEP_PRIOR (app/drafting/length_rule.py), least squares over 2,073 steps
  of the real engine (SmolLM2-135M, float32, one engine on both cores of this machine);
- draft chances per class: the GPU simulator's suffix-tree table (bench/gpu_sim/acceptance.py,
  set from vLLM's suffix arm measured on the agent traffic here and SuffixDecoding's reports):
  a proposal's chance, the first token's landing chance (its `after_miss`) and each later one's
  (`after_hit`);
- repeats: the simulator's share of each class's answers that repeat an earlier one, and the
  repeating chance, applied where the replica has served most of the prompt before.
"""

from __future__ import annotations

import argparse
import logging

from app.drafting.length_rule import CPU_STEP_PRIOR
from app.engine.fakes.paced import DraftChances, StepPacing
from app.serve_ray.deploy import serve_on_ray
from app.serve_ray.replica import EngineRecipe
from app.settings import Settings
from bench.gpu_sim.acceptance import CLASS_ACCEPTANCE, REPEATING, REPEATS, Acceptance
from bench.servers import MODEL_NAME

ROUTERS = ("specgate", "power-of-two", "prefix-affinity")
# The table's drafter (suffix trees: the one whose earlier answers make affinity pay).
DRAFTER = "suffix"
# The gateway's classes (app/routing/classify.py) in the table's terms.
TABLE_CLASS = {
    "structured": "json",
    "fresh-json": "chat",  # JSON with nothing to copy drafts as little as chat
    "code-edit": "edit",
    "code": "code",
    "rewrite": "edit",
    "open-ended": "chat",
}


def _chances(acceptance: Acceptance) -> DraftChances:
    return DraftChances(acceptance.proposes, acceptance.after_miss, acceptance.after_hit)


def pacing() -> StepPacing:
    table = CLASS_ACCEPTANCE[DRAFTER]
    return StepPacing(
        line=CPU_STEP_PRIOR,
        chances={ours: _chances(table[theirs]) for ours, theirs in TABLE_CLASS.items()},
        default=_chances(table["chat"]),
        repeats={ours: REPEATS[theirs] for ours, theirs in TABLE_CLASS.items()},
        repeating=_chances(REPEATING),
    )


def settings(port: int, router: str, replicas: int) -> Settings:
    return Settings(
        host="127.0.0.1",
        port=port,
        engine_layout="one",
        served_model_name=MODEL_NAME,
        routing_exploration=0,
        ray_replicas=replicas,
        # The fakes compute nothing: every logical CPU stays free for Serve's own actors.
        ray_replica_cpus=0,
        ray_router=router,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--router", choices=ROUTERS, required=True)
    parser.add_argument("--replicas", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    recipe = EngineRecipe(
        fake="app.engine.fakes.paced:PacedFakeEngine", fake_args={"pacing": pacing()}
    )
    return serve_on_ray(settings(args.port, args.router, args.replicas), recipe)


if __name__ == "__main__":
    raise SystemExit(main())
