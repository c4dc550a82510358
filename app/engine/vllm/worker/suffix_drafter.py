"""Suffix decoding with the tree of earlier answers kept per tenant, in vLLM's worker.

vLLM's suffix proposer (`method: "suffix"`, arctic-inference's `SuffixDecodingCache`) drafts
from the request's own prompt and from one tree of every earlier answer the engine wrote.
Shared across clients, that tree leaks: a request that drafts (and so runs faster) from
another client's answer reveals that the answer exists. Here each tenant has a tree of its
own; a request names its tenant in `SamplingParams.extra_args` (`TENANT_KEY`, set by the
gateway from the API key or the request's `cache_salt`, or one tenant for all when the
operator shares the tree), and drafts only from its own tenant's earlier answers.

The trees' total is bounded: at most `max_cached_requests` answers (vLLM's
`suffix_decoding_max_cached_requests`) and `max_cached_tokens` tokens (`CACHE_TOKENS_KEY` in
vLLM's additional_config), the oldest answer evicted first, whoever's it is; a tenant with
no answers left and none being written is dropped. The trees live in the worker's memory:
a restart empties them.

Every request's answer is added to its tenant's tree, those that never draft included (the
plain route's, in one engine); only requests that may draft are proposed for.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from arctic_inference.suffix_decoding import SuffixDecodingCache
from vllm.config import VllmConfig
from vllm.v1.spec_decode.suffix_decoding import SuffixDecodingProposer
from vllm.v1.worker.gpu_input_batch import InputBatch

from app.engine.generation import SuffixCacheCounts
from app.engine.vllm.extra_args import (
    CACHE_TOKENS_KEY,
    TENANT_KEY,
    Confidence,
    draft_limit,
)

# Answers' tokens the trees may hold, all tenants together, when the engine is given no bound
# (specgate gives --suffix-cache-tokens).
DEFAULT_CACHE_TOKENS = 4_000_000


class TenantSuffixDrafter(SuffixDecodingProposer):
    """vLLM's suffix proposer's place in the runner, with one cache per tenant.

    A subclass only so that the runner's type check holds: vLLM's own cache is never used.
    """

    def __init__(self, vllm_config: VllmConfig, requests: dict[str, Any]) -> None:
        config = vllm_config.speculative_config
        assert config is not None and config.method == "suffix"
        self.num_speculative_tokens = int(config.num_speculative_tokens or 0)
        self.max_tree_depth = int(config.suffix_decoding_max_tree_depth)
        self.max_spec_factor = float(config.suffix_decoding_max_spec_factor)
        self.min_token_prob = float(config.suffix_decoding_min_token_prob)
        self.max_model_len = vllm_config.model_config.max_model_len
        self.max_cached_requests = int(config.suffix_decoding_max_cached_requests)
        extra = vllm_config.additional_config
        tokens = extra.get(CACHE_TOKENS_KEY) if isinstance(extra, dict) else None
        self.max_cached_tokens = int(tokens) if tokens is not None else DEFAULT_CACHE_TOKENS
        # The runner's own book of requests: their sampling parameters name the tenant.
        self._requests = requests
        self._caches: dict[str, SuffixDecodingCache] = {}
        self._tenant_of: dict[str, str] = {}  # requests being answered
        # Cached answers, oldest first: request id -> (tenant, tokens).
        self._cached: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self.counts = SuffixCacheCounts()
        # The last step's drafts' per-token probabilities and match lengths, by request, for
        # the scheduler.
        self.confidence: dict[str, Confidence] = {}

    def propose(
        self,
        num_speculative_tokens: int,
        input_batch: InputBatch,
        sampled_token_ids: list[list[int]],
        slot_mappings: Any = None,
    ) -> list[list[int]]:
        drafts: list[list[int]] = []
        self.confidence = {}
        for i, sampled in enumerate(sampled_token_ids):
            request_id = input_batch.req_ids[i]
            if not sampled:  # a prefill still in progress
                drafts.append([])
                continue
            cache = self._cache_for(request_id, input_batch)
            cache.add_active_response(request_id, sampled)
            self._grow(request_id, len(sampled))
            drafts.append(self._draft(cache, request_id, input_batch, i, num_speculative_tokens))
        self._stop_finished(set(input_batch.req_id_to_index))
        self._evict_beyond_bounds()
        return drafts

    def _draft(
        self, cache: SuffixDecodingCache, request_id: str, batch: InputBatch, row: int, k: int
    ) -> list[int]:
        state = self._requests.get(request_id)
        params = state.sampling_params if state is not None else None
        limit = draft_limit(params.extra_args if params is not None else None, k)
        length = int(batch.num_tokens_no_spec[row])
        room = min(limit, self.max_model_len - length - 1)
        if room <= 0:
            return []
        self.counts.proposals += 1
        context = batch.token_ids_cpu[row, max(0, length - self.max_tree_depth) : length]
        draft = cache.speculate(
            request_id,
            context,
            max_spec_tokens=room,
            max_spec_factor=self.max_spec_factor,
            min_token_prob=self.min_token_prob,
        )
        if draft.token_ids:
            self.counts.hits += 1
            self.confidence[request_id] = ([float(p) for p in draft.probs], int(draft.match_len))
        return list(draft.token_ids)

    def _cache_for(self, request_id: str, batch: InputBatch) -> SuffixDecodingCache:
        tenant = self._tenant_of.get(request_id)
        if tenant is not None:
            return self._caches[tenant]
        tenant = self._tenant(request_id)
        cache = self._caches.get(tenant)
        if cache is None:
            # Unbounded on its own: the bounds are kept over all tenants together.
            cache = SuffixDecodingCache(self.max_tree_depth, max_cached_requests=-1)
            self._caches[tenant] = cache
        if request_id in self._cached:  # a reused id: its old answer goes
            self._evict(request_id)
        index = batch.req_id_to_index[request_id]
        prompt = batch.token_ids_cpu[index, : batch.num_prompt_tokens[index]]
        cache.start_request(request_id, prompt)
        self._tenant_of[request_id] = tenant
        self._cached[request_id] = (tenant, 0)
        return cache

    def _tenant(self, request_id: str) -> str:
        state = self._requests.get(request_id)
        extra = state.sampling_params.extra_args if state is not None else None
        tenant = extra.get(TENANT_KEY) if extra else None
        return str(tenant) if tenant is not None else ""

    def _grow(self, request_id: str, tokens: int) -> None:
        if request_id in self._cached:
            tenant, held = self._cached[request_id]
            self._cached[request_id] = (tenant, held + tokens)
            self.counts.cached_tokens += tokens

    def _stop_finished(self, running: set[str]) -> None:
        for request_id in [r for r in self._tenant_of if r not in running]:
            tenant = self._tenant_of.pop(request_id)
            self._caches[tenant].stop_request(request_id)
            self._drop_if_empty(tenant)

    def _evict_beyond_bounds(self) -> None:
        # vLLM's meaning: 0 keeps no earlier answers, a negative number any count of them.
        most = self.max_cached_requests if self.max_cached_requests >= 0 else len(self._cached)
        while self._cached and (
            len(self._cached) > most or self.counts.cached_tokens > self.max_cached_tokens
        ):
            self._evict(next(iter(self._cached)))
            self.counts.evictions += 1
        self.counts.cached_answers = len(self._cached)
        self.counts.tenants = len(self._caches)

    def _evict(self, request_id: str) -> None:
        tenant, tokens = self._cached.pop(request_id)
        self._caches[tenant].evict_cached_response(request_id)
        self.counts.cached_tokens -= tokens
        self._drop_if_empty(tenant)

    def _drop_if_empty(self, tenant: str) -> None:
        cache = self._caches[tenant]
        if not cache.active_requests and not cache.cached_requests:
            del self._caches[tenant]
