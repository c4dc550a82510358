"""vLLM's waiting queue in fair-share order (issue 43): when the engine cannot start every
request waiting (its sequences or KV cache are full), the next started is the one whose client
has been served the fewest tokens over its weight, as in specgate's own admission queue
(app/tenants/fair_share.py), within a client in arrival order.

A request names its client in `SamplingParams.extra_args` (`CLIENT_KEY`, `CLIENT_WEIGHT_KEY`,
set by the gateway for keys of the key file); a request without one is the anonymous
client's. Every token a step computes is charged to its request's client: a prompt token at
the prompt's cost, any other (a decoded token, a verified draft, accepted or not) at the
output's. Requests the scheduler put back (preempted, or waiting for a grammar or remote KV)
keep their places at the front. With one client the queue is left as vLLM keeps it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.request import Request, RequestStatus

from app.engine.vllm.extra_args import CLIENT_KEY, CLIENT_WEIGHT_KEY
from app.tenants.fair_share import FairShare


def client_of(request: Request) -> tuple[str, float]:
    extra = request.sampling_params.extra_args if request.sampling_params else None
    if not extra:
        return "", 1.0
    return str(extra.get(CLIENT_KEY, "")), float(extra.get(CLIENT_WEIGHT_KEY, 1.0))


def fresh(request: Request) -> bool:
    """Waiting to start, never scheduled: the requests whose order is ours to choose."""
    return request.status == RequestStatus.WAITING and request.num_computed_tokens == 0


class FairWaiting:
    def __init__(self) -> None:
        self.share = FairShare()

    def arrived(self, request: Request, waiting: Iterable[Request]) -> None:
        """A client that had nothing waiting starts from the lowest count among those waiting
        (idle time is not banked)."""
        client, _ = client_of(request)
        others = {client_of(r)[0] for r in waiting if r is not request}
        if client not in others:
            self.share.lift(client, sorted(others))

    def order(self, waiting: Any) -> None:
        """Reorder vLLM's FCFS queue (a deque) in place: the fresh requests, taken one at a
        time from the client whose count (with what the requests taken so far will cost it)
        is lowest; a priority queue is left alone."""
        if not isinstance(waiting, deque) or len(waiting) < 2:
            return
        kept = [r for r in waiting if not fresh(r)]
        queues: dict[str, deque[Request]] = {}
        for request in waiting:
            if fresh(request):
                queues.setdefault(client_of(request)[0], deque()).append(request)
        if len(queues) < 2:
            return
        counts = {client: self.share.counter(client) for client in queues}
        ordered: list[Request] = []
        while queues:
            client = min(queues, key=counts.__getitem__)  # ties: the first to wait
            request = queues[client].popleft()
            ordered.append(request)
            counts[client] += (
                self.share.costs.prompt * request.num_prompt_tokens / client_of(request)[1]
            )
            if not queues[client]:
                del queues[client]
        waiting.clear()
        waiting.extend([*kept, *ordered])

    def charge(self, output: SchedulerOutput, requests: Mapping[str, Request]) -> None:
        costs = self.share.costs
        for request_id, tokens in output.num_scheduled_tokens.items():
            request = requests.get(request_id)
            if request is None:
                continue
            client, weight = client_of(request)
            each = costs.prompt if request.num_output_tokens == 0 else costs.output
            self.share.charge(client, tokens * each, weight)
