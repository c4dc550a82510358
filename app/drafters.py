"""The drafters specgate names, and the one an engine drafts with when no flag names one.

The default is chosen by measurement (bench/RESULTS.md, issue 40): suffix trees (vLLM's
`suffix` method, arctic-inference) draft from the request's prompt as n-gram lookup does and
from the tenant's earlier answers too, which agent traffic repeats turn after turn; each
step's length is then cut by the drafter's calibrated confidence (app/drafting/length_rule.py).
Where arctic-inference is not installed, the default is n-gram prompt lookup, which needs
nothing beyond vLLM.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from typing import Any

logger = logging.getLogger("specgate")

# Prompt lookup: the longest 2-5 token match in the prompt and output so far, K tokens after it.
NGRAM_TOKENS = 5
NGRAM: dict[str, Any] = {
    "method": "ngram",
    "num_speculative_tokens": NGRAM_TOKENS,
    "prompt_lookup_min": 2,
    "prompt_lookup_max": 5,
}
# vLLM's suffix method drafts at most its tree depth per step unless told otherwise.
VLLM_SUFFIX_TREE_DEPTH = 24
# Deeper trees than vLLM's defaults (depth 24, factor 1, up to 24 tokens): a long match may
# draft up to 32 tokens, twice its own length, and specgate's rule cuts each draft to what
# its calibrated confidence says will land (vLLM, verifying every such draft whole, is
# slower with these trees than with its own: bench/RESULTS.md, issue 31).
SUFFIX: dict[str, Any] = {
    "method": "suffix",
    "num_speculative_tokens": 32,
    "suffix_decoding_max_tree_depth": 64,
    "suffix_decoding_max_spec_factor": 2.0,
}


@functools.cache
def suffix_available() -> bool:
    """arctic-inference is importable (`make install` and both images build it); said once
    where it is not."""
    found = importlib.util.find_spec("arctic_inference") is not None
    if not found:
        logger.warning("arctic-inference is not installed: drafting with n-gram prompt lookup")
    return found


def default_drafter() -> dict[str, Any]:
    """The speculative_config an engine gets when no flag names a method or a draft model."""
    return dict(SUFFIX if suffix_available() else NGRAM)


def default_draft_tokens(config: dict[str, Any]) -> int:
    """K for a config that leaves it out: vLLM's own default for the suffix method (its
    tree depth), specgate's n-gram K otherwise (vLLM asks for one)."""
    if config.get("method") == "suffix":
        return int(config.get("suffix_decoding_max_tree_depth", VLLM_SUFFIX_TREE_DEPTH))
    return NGRAM_TOKENS
