"""The picker's decision with controlled loads: the ranking rule's adapter (choose.py) and the
records it keeps (picker.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from app.drafting.length_rule import CPU_STEP_PRIOR, GPU_STEP_PRIOR
from app.picker.choose import Pick, Refusal, report_of, wants_of
from app.picker.endpoints import Endpoint
from app.picker.load import EndpointLoad, LoadBook
from app.picker.picker import Picker
from app.picker.request import RequestFacts, read_request
from app.placement.replica_rank import draft_length

A, B = "10.0.0.1:8000", "10.0.0.2:8000"
CODE_EDIT = "Fix the bug:\ndef f(x):\n    return x +\nprint(f(1))\n"


def facts(
    text: str = CODE_EDIT, headers: Mapping[str, str] | None = None, **fields: object
) -> RequestFacts:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], **fields}
    return read_request(headers or {}, json.dumps(body).encode())


def picker(
    loads: Mapping[str, EndpointLoad],
    endpoints: Sequence[Endpoint] | None = None,
    **options: object,
) -> Picker:
    endpoints = endpoints or [Endpoint(address=address) for address in loads]
    book = LoadBook(endpoint.address for endpoint in endpoints)
    for address, load in loads.items():
        book.record(address, load, scrape_began=0.0)
    return Picker(endpoints, book, GPU_STEP_PRIOR, clock=lambda: 0.0, **options)  # type: ignore[arg-type]


def picked(outcome: Pick | Refusal) -> Pick:
    assert isinstance(outcome, Pick), outcome
    return outcome


def test_the_less_loaded_specgate_server_is_chosen_and_told_to_draft() -> None:
    chosen = picked(picker({A: EndpointLoad(running=30), B: EndpointLoad(running=2)}).pick(facts()))
    assert chosen.addresses == (B,)
    assert chosen.speculative == "auto;k=5"
    assert chosen.workload_class == "code-edit"


def test_a_full_batch_is_told_not_to_draft() -> None:
    chosen = picked(picker({A: EndpointLoad(running=200)}).pick(facts()))
    assert chosen.speculative == "off"


def test_the_clients_own_choice_is_kept_and_priced() -> None:
    for sent in ("off", "on;k=2"):
        chosen = picked(picker({A: EndpointLoad()}).pick(facts(headers={"x-speculative": sent})))
        assert chosen.speculative is None  # the request's own header goes on unchanged


def test_a_hot_request_is_not_drafted_under_a_temperature_ceiling() -> None:
    hot = facts(temperature=1.5)
    assert picked(picker({A: EndpointLoad()}).pick(hot)).speculative == "auto;k=5"
    ceiling = picker({A: EndpointLoad()}, max_temperature=1.0)
    assert picked(ceiling.pick(hot)).speculative == "off"


def test_picks_between_scrapes_count_as_running_so_a_burst_spreads() -> None:
    chooser = picker({A: EndpointLoad(), B: EndpointLoad()})
    chosen = [
        picked(chooser.pick(facts(f"Write a poem number {i}."))).addresses[0] for i in range(8)
    ]
    assert chosen.count(A) == chosen.count(B) == 4
    # A scrape that began after the picks has seen them: they count once, in its figures.
    chooser.book.record(A, EndpointLoad(running=4), scrape_began=1.0)
    load = chooser.book.load(A)
    assert load is not None and load.running == 4


def test_fallbacks_follow_the_choice_best_first() -> None:
    loads = {A: EndpointLoad(running=9), B: EndpointLoad(running=1)}
    assert picked(picker(loads, fallbacks=2).pick(facts())).destination == f"{B},{A}"


def test_vllm_pools_drafting_when_it_pays_plain_when_the_batch_is_full() -> None:
    pools = [
        Endpoint(address=A, kind="vllm", pool="drafting"),
        Endpoint(address=B, kind="vllm", pool="plain"),
    ]
    idle = picker({A: EndpointLoad(), B: EndpointLoad()}, pools)
    chosen = picked(idle.pick(facts()))
    assert chosen.addresses == (A,) and chosen.speculative is None
    # Alike and full: the rule would draft nothing, and a drafting vLLM server drafts anyway.
    full = picker({A: EndpointLoad(running=128), B: EndpointLoad(running=128)}, pools)
    assert picked(full.pick(facts())).addresses == (B,)


def test_vllm_pools_a_class_whose_drafts_miss_goes_plain() -> None:
    pools = [
        Endpoint(address=A, kind="vllm", pool="drafting"),
        Endpoint(address=B, kind="vllm", pool="plain"),
    ]
    missing = EndpointLoad(acceptance={"code-edit": 0.0})
    assert picked(picker({A: missing, B: EndpointLoad()}, pools).pick(facts())).addresses == (B,)


def test_a_kv_full_endpoint_goes_last() -> None:
    loads = {A: EndpointLoad(kv_use=0.97), B: EndpointLoad(running=40)}
    assert picked(picker(loads).pick(facts())).addresses == (B,)


def test_a_conversation_goes_back_to_the_endpoint_that_holds_its_start() -> None:
    # Its prompt prefix is in that endpoint's cache, and its drafter history there.
    chooser = picker({A: EndpointLoad(), B: EndpointLoad()})
    history = "You are a careful assistant. " * 40
    first = picked(chooser.pick(facts(history + "First question?"))).addresses[0]
    # The other endpoint is now the idler one, by a request, but holds none of it.
    chooser.book.record(first, EndpointLoad(running=1), scrape_began=10.0)
    again = picked(chooser.pick(facts(history + "First question? Second one?"))).addresses[0]
    assert again == first
    # A stranger goes to the idler one.
    other = picked(chooser.pick(facts("Write a haiku."))).addresses[0]
    assert other != first


def test_refusals() -> None:
    none_ready = Picker([Endpoint(address=A)], LoadBook([A]), GPU_STEP_PRIOR)
    assert none_ready.pick(facts()) == Refusal(503, "no endpoint is ready", "no_ready_endpoint")
    outcome = picker({A: EndpointLoad()}).pick(facts(), subset=[B])
    assert isinstance(outcome, Refusal) and outcome.status == 503
    outcome = picker({A: EndpointLoad(waiting=40)}).pick(facts())
    assert isinstance(outcome, Refusal) and outcome.status == 429


def test_a_body_without_a_prompt_still_gets_an_endpoint() -> None:
    chosen = picked(picker({A: EndpointLoad()}).pick(read_request({}, b"not json")))
    assert chosen.addresses == (A,) and chosen.speculative == "off"
    assert chosen.workload_class is None


def test_the_draft_length_is_the_one_the_rule_prices() -> None:
    # On the CPU's line a verified token costs about a decoded one: a batch of four already
    # shortens the draft that pays.
    endpoint = Endpoint(address=A)
    request = facts()
    lengths = []
    for running in (0, 4, 16):
        report = report_of(endpoint, EndpointLoad(running=running), CPU_STEP_PRIOR, frozenset())
        lengths.append(draft_length(report, wants_of(request, endpoint, True, 10, {})))
    assert lengths[0] == 5 and lengths[0] > lengths[1] > lengths[2] == 0
