"""/tokenize, /detokenize and /tokenizer_info over a small real Hugging Face tokenizer, and a
remote route's upstream answering them (vLLM's shapes, which lm-eval's remote tokenizer reads)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from app.engine.tokenizing import LocalTokenizer, RemoteTokenizer
from tests.conftest import MODEL
from tests.scripted_site import ScriptedSite as Site
from tests.scripted_site import scripted_site

WORDS = ["<unk>", "<s>", "</s>", "hello", "world", "user", "assistant", ":", "|"]
TEMPLATE = "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} | {% endfor %}" + (
    "{% if add_generation_prompt %}assistant :{% endif %}"
)


def small_tokenizer() -> PreTrainedTokenizerFast:
    model = models.WordLevel({word: index for index, word in enumerate(WORDS)}, unk_token="<unk>")
    core = Tokenizer(model)
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tokenizer.chat_template = TEMPLATE
    return tokenizer


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with scripted_site(["x"]) as site:
        gateway = site.client._transport.app.state.gateway  # type: ignore[attr-defined]
        gateway.tokenizing = LocalTokenizer(small_tokenizer(), max_model_len=512)
        yield site


async def post(site: Site, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await site.client.post(path, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def test_a_prompt_and_messages_tokenize_as_vllm_answers(site: Site) -> None:
    answer = await post(site, "/tokenize", {"prompt": "hello world", "return_token_strs": True})
    assert answer == {"count": 2, "max_model_len": 512, "tokens": [3, 4],
                      "token_strs": ["hello", "world"]}  # fmt: skip
    messages = [{"role": "user", "content": "hello"}]
    chat = await post(site, "/tokenize", {"model": MODEL, "messages": messages})
    # "user : hello | assistant :", through the template
    # vLLM says null for token strings not asked for.
    assert chat["tokens"] == [5, 7, 3, 8, 6, 7] and chat["token_strs"] is None
    open_turn = {"messages": messages, "add_generation_prompt": False}
    assert (await post(site, "/tokenize", open_turn))["tokens"] == [5, 7, 3, 8]


async def test_detokenize_and_tokenizer_info(site: Site) -> None:
    assert await post(site, "/detokenize", {"tokens": [3, 4]}) == {"prompt": "hello world"}
    info = (await site.client.get("/tokenizer_info")).json()
    assert info["eos_token"] == "</s>" and info["bos_token"] == "<s>"
    assert info["chat_template"] == TEMPLATE and info["tokenizer_class"]


@pytest.mark.parametrize(
    ("path", "body", "param", "status"),
    [
        ("/tokenize", {"prompt": "hi", "messages": []}, "prompt", 400),
        ("/tokenize", {}, "prompt", 400),
        (
            "/tokenize",
            {"messages": [], "continue_final_message": True, "add_generation_prompt": True},
            "continue_final_message",
            400,
        ),
        ("/tokenize", {"prompt": "hi", "model": "other"}, "model", 404),
        ("/detokenize", {"tokens": [99]}, "tokens", 400),
        ("/detokenize", {"tokens": [-1]}, "tokens", 400),
    ],
)
async def test_bad_helper_requests_get_openai_errors(
    site: Site, path: str, body: dict[str, Any], param: str, status: int
) -> None:
    response = await site.client.post(path, json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["param"].startswith(param)


async def test_without_a_tokenizer_the_helpers_say_so() -> None:
    async with scripted_site(["x"]) as site:  # the fake engines have none
        response = await site.client.post("/tokenize", json={"prompt": "hi"})
        assert response.status_code == 404 and "tokenizer" in response.json()["error"]["message"]


class _Upstream:
    """A vLLM server's helper paths, as a remote route reaches them."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, Any]] = []

    async def forward(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        self.seen.append((method, path, body))
        if path == "/tokenize":
            return {"count": 1, "max_model_len": 64, "tokens": [7]}
        if path == "/detokenize":
            return {"prompt": "seven"}
        return {"tokenizer_class": "X", "eos_token": "</s>"}


async def test_a_remote_route_forwards_the_helpers(site: Site) -> None:
    upstream = _Upstream()
    gateway = site.client._transport.app.state.gateway  # type: ignore[attr-defined]
    gateway.tokenizing = RemoteTokenizer(upstream)
    answer = await post(site, "/tokenize", {"model": MODEL, "prompt": "seven"})
    assert answer["tokens"] == [7]
    assert (await post(site, "/detokenize", {"tokens": [7]}))["prompt"] == "seven"
    assert (await site.client.get("/tokenizer_info")).json()["eos_token"] == "</s>"
    assert upstream.seen[0] == ("POST", "/tokenize", {"prompt": "seven",
        "continue_final_message": False, "return_token_strs": False})  # fmt: skip
    assert [path for _, path, _ in upstream.seen] == ["/tokenize", "/detokenize", "/tokenizer_info"]


async def test_an_upstream_answer_in_another_shape_is_the_upstreams_failure(site: Site) -> None:
    class Garbled(_Upstream):
        async def forward(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
            return {"tokens": "not a list"}

    gateway = site.client._transport.app.state.gateway  # type: ignore[attr-defined]
    gateway.tokenizing = RemoteTokenizer(Garbled())
    response = await site.client.post("/tokenize", json={"prompt": "seven"})
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "server_error" and "/tokenize" in error["message"]
