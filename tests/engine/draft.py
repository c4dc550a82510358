"""A draft model for tests: the target's first layers, so it shares the target's tokenizer.

Untrained as a drafter, it is rarely right; it exists to exercise the draft-model path.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import save_file


def make_truncated_draft(target: Path, out: Path, layers: int = 2) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    kept = {}
    with safe_open(str(target / "model.safetensors"), framework="pt") as weights:
        for name in weights.keys():
            if ".layers." in name and int(name.split(".layers.")[1].split(".")[0]) >= layers:
                continue
            kept[name] = weights.get_tensor(name)
    save_file(kept, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((target / "config.json").read_text())
    config["num_hidden_layers"] = layers
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for path in target.iterdir():
        if path.name.startswith(("tokenizer", "chat_template", "generation_config")):
            shutil.copy(path, out / path.name)
    return out
