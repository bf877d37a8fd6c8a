"""The real clients' own default requests and valid JSON that used to get a 5xx (issue 41, items
1-4), on the server's application in process (httpx's ASGI transport): Continue's and Mercury's
max_tokens above the server's bound clamped and said so, Zed's deepseek_coder and glm
fill-in-the-middle prompts split back, docs/server.md's /v1/edits example as written,
max_tokens 0, the server's time limit on /infill, a lone surrogate, a 5,000-digit number, a chat
of a million lines and a 5 MB history."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import openai
import pytest

from sharpen.app.backend import LocalBackend
from sharpen.app.serve.app import build_app
from sharpen.app.serve.common import Limits, Server
from sharpen.core.run import Progress

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "def fizzbuzz(n):\n    for i in range(1, n + 1):\n"
SUFFIX = "\n    return n\n"


@pytest.fixture(scope="module")
def denoiser():
    from sharpen.core.models.load import load_model
    from sharpen.core.settings import ModelRequest

    return load_model(ModelRequest())


def _http(backend, limits: Limits = Limits()) -> httpx.AsyncClient:
    app = build_app(Server(backend, backend.describe(), limits))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sharpen", timeout=120)


def _events(stream_body: str) -> list:
    return [line[len("data: "):] for line in stream_body.splitlines() if line.startswith("data: ")]


@pytest.fixture
def http(denoiser):
    return _http(LocalBackend.of(denoiser))


def continue_llama_cpp_body(prompt: str) -> dict:
    """Continue's llama.cpp provider (core/llm/llms/LlamaCpp.ts, continuedev/continue: _convertArgs
    then {prompt, stream: true, ...}); its autocomplete's maxTokens default is 4096."""
    return {"prompt": prompt, "stream": True, "n_predict": 4096, "frequency_penalty": 0, "presence_penalty": 0, "min_p": 0.05, "mirostat": 0,
            "stop": ["\n\n", "<|endoftext|>"], "top_k": 40, "top_p": 0.95, "temperature": 0.01}


async def test_continues_default_n_predict_is_clamped_to_the_bound_and_said_truncated(http, denoiser):
    bound = min(Limits.tokens, denoiser.max_len // 2)
    fim = f"<fim_prefix>{PREFIX}<fim_suffix>{SUFFIX}<fim_middle>"
    reply = await http.post("/completion", json=continue_llama_cpp_body(fim))
    assert reply.status_code == 200, reply.text  # it was 400 "n_predict is too large (4096; at most 128)"
    last = json.loads(_events(reply.text)[-1])
    assert last["stop"] is True and last["truncated"] is True and 0 < last["tokens_predicted"] <= bound
    # the same request asking no more than the bound runs the same budget, and is not truncated
    same = (await http.post("/completion", json={**continue_llama_cpp_body(fim), "n_predict": bound, "stream": False})).json()
    assert same["truncated"] is False and same["tokens_predicted"] == last["tokens_predicted"]
    # Continue's OpenAI provider: max_tokens 4096 on /v1/completions
    answer = (await http.post("/v1/completions", json={"model": "sharpen-embedded", "prompt": fim, "max_tokens": 4096, "stream": False})).json()
    assert answer["choices"][0]["finish_reason"] == "length"
    usage = answer["usage"]
    assert 0 < usage["completion_tokens"] <= bound and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_mercurys_documented_diffusing_chat_with_max_tokens_1000_streams_drafts(denoiser):
    """Mercury's documented diffusing chat (Inception's docs: model, messages, max_tokens 1000,
    stream, diffusing) through the openai package, as its SDK sends it."""
    http = _http(LocalBackend.of(denoiser))
    client = openai.AsyncOpenAI(base_url="http://sharpen/v1", api_key="none", http_client=http, max_retries=0)
    chunks = [c async for c in await client.chat.completions.create(model="mercury-coder", messages=[{"role": "user", "content": "What is a diffusion model?"}],
                                                                     max_tokens=1000, stream=True, extra_body={"diffusing": True})]
    assert len(chunks) >= 2 and chunks[-1].choices[0].finish_reason == "length"  # clamped: the client asked more than it got


@pytest.mark.parametrize("value, message", [(-2, "max_tokens must be at least 0 (or -1: no limit)"), (12.5, "max_tokens must be a whole number"),
                                            ("64", "max_tokens must be a whole number")])
async def test_only_what_no_bound_can_mean_is_refused(http, value, message):
    reply = await http.post("/v1/completions", json={"prompt": PREFIX, "max_tokens": value})
    assert reply.status_code == 400 and reply.json()["error"]["message"] == message


def zed_body(prompt: str) -> dict:
    """Zed's open_ai_compatible_api edit prediction (crates/edit_prediction, zed-industries/zed:
    format_fim_prompt, then RawCompletionRequest {model, prompt, max_tokens, temperature, stop})."""
    stop = ["<|endoftext|>", "<|file_separator|>", "<|fim_pad|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<fim_prefix>",
            "<fim_middle>", "<fim_suffix>", "<PRE>", "<SUF>", "<MID>", "[PREFIX]", "[SUFFIX]"]
    return {"model": "sharpen-embedded", "prompt": prompt, "max_tokens": 24, "temperature": None, "stop": stop, "seed": 5}


@pytest.mark.parametrize("prompt_format", ["deepseek_coder", "glm"])
async def test_zeds_deepseek_coder_and_glm_prompts_fill_the_middle(http, prompt_format):
    # Zed's format_fim_prompt, as written there
    prompt = {"deepseek_coder": f"<\uff5cfim\u2581begin\uff5c>{PREFIX}<\uff5cfim\u2581hole\uff5c>{SUFFIX}<\uff5cfim\u2581end\uff5c>",
              "glm": f"<|code_prefix|>{PREFIX}<|code_suffix|>{SUFFIX}<|code_middle|>"}[prompt_format]
    answer = (await http.post("/v1/completions", json=zed_body(prompt))).json()
    as_infill = (await http.post("/v1/completions", json={**zed_body(PREFIX), "suffix": SUFFIX})).json()
    assert answer["choices"][0]["text"] == as_infill["choices"][0]["text"]
    assert answer["usage"]["prompt_tokens"] == as_infill["usage"]["prompt_tokens"]  # the markers were not read as text


async def test_the_v1_edits_example_in_docs_server_md_works_as_written(http):
    docs = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    section = docs[docs.index("### POST /v1/edits"):]
    example = re.search(r"curl -s \$SERVER/v1/edits -d '(.*?)'\n", section, re.S).group(1)
    body = json.loads(example)
    reply = await http.post("/v1/edits", json=body)
    assert reply.status_code == 200, reply.text
    events = _events(reply.text)
    assert events[-1] == "[DONE]" and json.loads(events[-2])["type"] == "result"
    result = json.loads(events[-2])
    rewritten = body["text"][body["spans"][1]["start"]:body["spans"][1]["end"]]
    assert rewritten == "return y" and len(result["spans"]) == 2  # the rewrite span is the line's code, as the docs say


async def test_max_tokens_0_generates_nothing_and_counts_the_prompt(http):
    answer = (await http.post("/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 0})).json()
    assert answer["choices"][0]["text"] == "" and answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 0 and answer["usage"]["prompt_tokens"] > 0
    streamed = _events((await http.post("/v1/completions", json={"prompt": PREFIX, "max_tokens": 0, "stream": True})).text)
    assert streamed[-1] == "[DONE]" and json.loads(streamed[-2])["choices"][0]["text"] == ""


class Stall:
    """A local backend whose run stalls after its first frame until it is stopped."""

    def __init__(self, backend: LocalBackend) -> None:
        self.inner = backend

    def describe(self):
        return self.inner.describe()

    def run(self, request, should_stop, every=0.0):
        for event in self.inner.run(request, should_stop, every):
            yield event
            if isinstance(event, Progress):
                while not should_stop():
                    time.sleep(0.01)


async def test_the_servers_time_limit_on_infill_without_t_max_predict_ms_is_504(denoiser):
    """docs/server.md: --max-seconds, then 504 (what was committed only for t_max_predict_ms). It
    answered 200 with what had settled, as if the client had set a budget."""
    http = _http(Stall(LocalBackend.of(denoiser)), Limits(seconds=0.5))
    reply = await http.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 8})
    assert reply.status_code == 504 and reply.json()["error"]["message"] == "the run took longer than this server allows (0.5 s)"
    own = await http.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 8, "t_max_predict_ms": 300})
    assert own.status_code == 200 and own.json()["stop_type"] == "limit"


async def test_a_json_escaped_lone_surrogate_is_answered_and_its_stream_ends_with_done(http):
    # echo: the prompt goes into the answer, where a lone surrogate cannot be written as UTF-8
    body = b'{"prompt": "def f():\\n    x = \\"\\ud800\\"\\n", "max_tokens": 4, "seed": 1, "echo": true}'
    reply = await http.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["text"].startswith('def f():\n    x = "\ufffd"\n')
    streamed = await http.post("/v1/completions", content=body.replace(b'"seed"', b'"stream": true, "seed"'), headers={"content-type": "application/json"})
    assert streamed.status_code == 200 and _events(streamed.text)[-1] == "[DONE]"
    infill = await http.post("/infill", content=b'{"input_prefix": "a\\udc00", "n_predict": 4}', headers={"content-type": "application/json"})
    assert infill.status_code == 200, infill.text


async def test_a_5000_digit_integer_is_a_400(http):
    reply = await http.post("/v1/completions", content=b'{"prompt": "x", "max_tokens": ' + b"9" * 5000 + b"}",
                            headers={"content-type": "application/json"})
    assert reply.status_code == 400 and reply.json()["error"]["message"].startswith("the body is not JSON this server reads")


async def test_a_chat_of_a_million_lines_or_a_5_mb_history_is_never_a_500(http, denoiser):
    huge = await http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "a\n" * 1_000_000}], "max_tokens": 4})
    assert huge.status_code == 400 and "longer than this model's canvas holds" in huge.json()["error"]["message"]
    turn = "x = 1\n" * 4000  # 24 KB a turn, 210 turns: 5 MB
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": turn} for i in range(210)] + [{"role": "user", "content": "Name a prime."}]
    reply = await http.post("/v1/chat/completions", json={"messages": history, "max_tokens": 4, "seed": 1})
    assert reply.status_code == 200, reply.text
    assert 0 < reply.json()["usage"]["prompt_tokens"] <= denoiser.max_len - 4  # the oldest turns went


async def test_a_new_endpoint_is_one_shape_and_one_route_row(denoiser):
    """docs/architecture.md's count: a Shape and an Endpoint row, nothing else; the loop gives it
    the stream, [DONE], refusals, the time limit and the counters."""
    from sharpen.app.serve.app import ENDPOINTS
    from sharpen.app.serve.common import field_of, point_request
    from sharpen.app.serve.respond import Endpoint, Plan, Shape

    class Lengths(Shape):  # a toy endpoint: how many characters the draft has, per step
        @classmethod
        def read(cls, server, body):
            prompt = field_of(body, "prompt", str, "")
            return Plan(point_request(server, prompt, "", 8, server.sampling), cls(), field_of(body, "stream", bool, False))

        def step(self, progress):
            return [{"length": len(progress.spans[0].text)}]

        def final(self, done):
            return [self.whole(done)]

        def whole(self, done):
            return {"length": len(done.result.spans[0].text), "tokens": done.result.tokens}

    backend = LocalBackend.of(denoiser)
    app = build_app(Server(backend, backend.describe()), [*ENDPOINTS, Endpoint("/v1/lengths", Lengths)])
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sharpen", timeout=120)
    whole = (await http.post("/v1/lengths", json={"prompt": PREFIX})).json()
    assert whole["tokens"] > 0 and whole["length"] >= 0
    streamed = _events((await http.post("/v1/lengths", json={"prompt": PREFIX, "stream": True})).text)
    assert streamed[-1] == "[DONE]" and json.loads(streamed[-2]) == whole and len(streamed) > 3
    refused = await http.post("/v1/lengths", json={"prompt": 3})
    assert refused.status_code == 400 and refused.json()["error"]["message"] == "prompt must be a string"
    assert 'sharpen_requests_total{endpoint="/v1/lengths",status="200"} 2' in (await http.get("/metrics")).text


async def test_llama_vims_default_sampling_fields_reach_a_threshold_decoded_model(tmp_path):
    """llama.vim sends top_k 40 and top_p 0.9 with every request; Fast-dLLM v2's loop commits by
    threshold and reads neither. The server drops a client's default it cannot use (the headless
    CLI refuses the typed option), so llama.vim works with such a model: 200, text, as without them."""
    from block_checkpoints import write_fast_dllm_v2
    from test_serve import llama_vim_body

    from sharpen.core.models.load import load_model
    from sharpen.core.settings import ModelRequest

    http = _http(LocalBackend.of(load_model(ModelRequest(model=str(write_fast_dllm_v2(tmp_path / "fast")), compile="off"))))
    body = {**llama_vim_body(PREFIX, "", SUFFIX), "n_predict": 8}
    reply = await http.post("/infill", json=body)
    assert reply.status_code == 200, reply.text  # it was 400 "--top-k has no effect on ..."
    plain = await http.post("/infill", json={k: v for k, v in body.items() if k not in ("top_k", "top_p")})
    assert reply.json()["content"] == plain.json()["content"]
    # sharpen's own `steps`, asked for by name, is still refused where the loop takes no step count
    refused = await http.post("/infill", json={**body, "steps": 4})
    assert refused.status_code == 400 and "steps" in refused.json()["error"]["message"]
