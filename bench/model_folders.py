"""Model folders made from the embedded model, for the tests and `make gpu-check`.

- `make_truncated_draft`: the target's first layers, so it shares the target's tokenizer.
  Untrained as a drafter, it is rarely right; it exists to exercise the draft-model path.
- `make_shape_folder`: a real model's config.json beside the embedded model's tokenizer, for
  random weights in that model's shape (`--load-format dummy`) with no hub at all. The
  vocabulary follows the tokenizer's, so every token the random model picks decodes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import save_file

TOKENIZER_FILES = ("tokenizer", "chat_template", "generation_config")


def make_shape_folder(config: dict[str, object], tokenizer_source: Path, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    source = json.loads((tokenizer_source / "config.json").read_text())
    tokens = {key: source[key] for key in ("vocab_size", "bos_token_id", "eos_token_id")}
    shaped = {**config, **tokens, "tie_word_embeddings": False}
    (out / "config.json").write_text(json.dumps(shaped, indent=2))
    _copy_tokenizer(tokenizer_source, out)
    return out


def _copy_tokenizer(source: Path, out: Path) -> None:
    for path in source.iterdir():
        if path.name.startswith(TOKENIZER_FILES):
            shutil.copy(path, out / path.name)


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
    _copy_tokenizer(target, out)
    return out
