"""What a finished request teaches the router, through one small listener protocol.

A run reports once, when it is released, with a `RunReport`: plain figures, nothing to call
back into. Whoever started it listens (`RunListener`); `Feedback` turns a report, and the load
the request ran beside, into the learner's observations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from app.routing.draft_replay import ReplayFigures
from app.routing.learner import Learner, Observation
from app.routing.load_model import Load
from app.routing.policy import RouteDecision
from app.vocabulary import Route, SpecDecodeStats

Outcome = Literal["ok", "aborted", "error"]


@dataclass(frozen=True)
class RunReport:
    """A released run, in figures."""

    request_id: str
    endpoint: str
    decision: RouteDecision
    # Where it ended: the decision's route, or the last one it moved to.
    route: Route
    outcome: Outcome
    moved: bool
    choices: int
    prompt_tokens: int
    completion_tokens: int
    # time.monotonic() seconds.
    started_at: float
    first_token_at: float | None
    finished_at: float
    # The engine's own drafting figures (None: it gave none, or the request never drafted).
    draft_stats: SpecDecodeStats | None
    # Drafting on the speculative route, summed over its segments when the request moved.
    speculative_stats: SpecDecodeStats | None
    # The draft replay's findings (None: no replay ran).
    replay: ReplayFigures | None
    # Each choice's text, for --log-requests.
    outputs: tuple[str, ...] = ()

    @property
    def time_to_first_token(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.started_at

    @property
    def inter_token_latency(self) -> float | None:
        """Mean seconds per token after the first, per choice: what speculation changes."""
        later_tokens = self.completion_tokens - self.choices
        if self.first_token_at is None or later_tokens <= 0:
            return None
        return (self.finished_at - self.first_token_at) * self.choices / later_tokens


class RunListener(Protocol):
    def run_completed(self, report: RunReport) -> None:
        """Called once, when every choice has its finish reason, before the client is given
        the output that completes it (the usage ledger keeps it then)."""
        ...

    def run_finished(self, report: RunReport) -> None:
        """Called once, when the run is released (finished, aborted or failed)."""
        ...


class Feedback:
    """Teaches the learner from finished runs."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner

    def learn(self, report: RunReport, others: Load) -> None:
        """`others`: the sequences beside this request, time-averaged over its life."""
        if report.outcome != "ok":
            return  # an abort says nothing about speed
        learner = self.learner
        workload = report.decision.workload_class
        if not report.moved:
            # A moved run's figures mix two routes and a re-read context: no clean sample.
            others = Load(max(0.0, others.plain), max(0.0, others.speculative))
            observation = observe(report, others)
            if observation is not None:
                learner.observe(observation)
            if report.time_to_first_token is not None:
                learner.observe_prefill(
                    report.route, report.prompt_tokens, report.time_to_first_token
                )
        replay = report.replay
        # An adaptive run drafted what the engine chose to: its class learns from the
        # replay of drafting every step instead, as a plain run's does.
        replayed = report.route == "plain" or report.decision.basis == "adaptive"
        if report.draft_stats is not None and not (replayed and replay is not None):
            learner.observe_acceptance(workload, report.draft_stats)
        if replayed and not report.moved and replay is not None and replay.steps:
            # What drafting would have yielded, learned without sending the request there.
            learner.observe_replay(workload, replay.tokens_per_step)
            learner.observe_acceptance(workload, replay.stats)


def observe(report: RunReport, others: Load) -> Observation | None:
    """A finished run's step time and tokens per step, or None when it says nothing.

    Runs of several sequences are left out: their choices may share one engine sequence
    (greedy n > 1 is repeated) and their steps cannot be told apart.
    """
    if report.choices != 1 or report.first_token_at is None:
        return None
    later_tokens = report.completion_tokens - 1  # the first comes from the prompt's prefill
    if later_tokens <= 0:
        return None
    accepted = report.draft_stats.accepted_tokens if report.draft_stats is not None else 0
    # vLLM counts a last draft's accepted tokens before max_tokens or a stop trims the
    # output, so accepted tokens can outnumber the tokens that arrived.
    steps = max(1, later_tokens - accepted)
    decode_ms = (report.finished_at - report.first_token_at) * 1000
    return Observation(
        workload=report.decision.workload_class,
        route=report.decision.route,
        others=others,
        ms_per_token=decode_ms / later_tokens,
        tokens_per_step=later_tokens / steps,
        output_tokens=report.completion_tokens,
    )
