"""The fields beyond the prompt, on the server's application in process (httpx's ASGI
transport): OpenAI's (through the official `openai` package) echo, stream_options.include_usage,
fields asking for what a diffusion run here does not do (refused in one line, their defaults
accepted), and how a stream cut by the server's time limit ends; llama.cpp's `truncated`
(the context did not all fit), prompt timings and t_max_predict_ms, streamed or not."""
from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from sharpen.app.backend import LocalBackend
from sharpen.app.serve.app import build_app
from sharpen.app.serve.common import Limits, Server
from sharpen.app.serve.respond import committed_text
from sharpen.core.run import Progress

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


def _client(backend, limits: Limits = Limits()) -> openai.AsyncOpenAI:
    return _openai(_http(backend, limits))


def _openai(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://sharpen/v1", api_key="none", http_client=http, max_retries=0)


@pytest.fixture
def client(denoiser):
    return _client(LocalBackend.of(denoiser))


async def test_echo_puts_the_prompt_before_the_answer_alone_and_streamed(client):
    ask = dict(model="sharpen-embedded", prompt=PREFIX, suffix=SUFFIX, max_tokens=12, seed=3)
    plain = (await client.completions.create(**ask)).choices[0].text
    echoed = (await client.completions.create(**ask, echo=True)).choices[0].text
    assert echoed == PREFIX + plain

    deltas = [c.choices[0].text async for c in await client.completions.create(**ask, echo=True, stream=True)]
    assert deltas[0].startswith(PREFIX) and "".join(deltas) == PREFIX + plain
    drafts = [c.choices[0].text async for c in await client.completions.create(**ask, echo=True, stream=True, extra_body={"diffusing": True})]
    assert len(drafts) >= 4 and all(d.startswith(PREFIX) for d in drafts) and drafts[-1] == PREFIX + plain


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
async def test_include_usage_ends_the_stream_with_the_counts_an_answer_reports(client, chat):
    if chat:
        ask = dict(model="sharpen-embedded", messages=[{"role": "user", "content": "count to three"}], max_tokens=10, seed=5)
        create = client.chat.completions.create
    else:
        ask = dict(model="sharpen-embedded", prompt=PREFIX, suffix=SUFFIX, max_tokens=10, seed=5)
        create = client.completions.create
    whole = await create(**ask)
    chunks = [c async for c in await create(**ask, stream=True, stream_options={"include_usage": True})]
    assert all(c.usage is None for c in chunks[:-1]) and chunks[-1].choices == []
    assert chunks[-1].usage == whole.usage and whole.usage.completion_tokens > 0
    plain = [c async for c in await create(**ask, stream=True)]
    assert all(c.usage is None and c.choices for c in plain)  # not asked: no usage chunk


@pytest.mark.parametrize("field, value, message", [
    ("logprobs", 2, "logprobs: sharpen returns no log probabilities"),
    ("presence_penalty", 0.5, "presence_penalty: sharpen applies no presence penalty (its sampling: temperature, top_k, top_p, seed, steps)"),
    ("frequency_penalty", -1, "frequency_penalty: sharpen applies no frequency penalty (its sampling: temperature, top_k, top_p, seed, steps)"),
    ("logit_bias", {"50256": -100}, "logit_bias: sharpen applies no logit bias"),
    ("best_of", 3, "best_of must be 1 (ask for alternatives with /v1/edits and sampling.samples)"),
    ("best_of", True, "best_of must be 1 (ask for alternatives with /v1/edits and sampling.samples)"),
])
async def test_a_completion_asking_what_runs_here_do_not_do_is_one_line_400(client, field, value, message):
    with pytest.raises(openai.BadRequestError) as refused:
        await client.completions.create(model="sharpen-embedded", prompt="x", max_tokens=2, extra_body={field: value})
    assert refused.value.status_code == 400 and refused.value.body["message"] == message


@pytest.mark.parametrize("field, value, message", [
    ("logprobs", True, "logprobs: sharpen returns no log probabilities"),
    ("top_logprobs", 3, "top_logprobs: sharpen returns no log probabilities"),
    ("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}], "tools: sharpen calls no tools"),
    ("response_format", {"type": "yaml"}, "response_format.type 'yaml' is not supported (json_object, json_schema or text)"),
])
async def test_a_chat_asking_what_runs_here_do_not_do_is_one_line_400(client, field, value, message):
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(model="sharpen-embedded", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
                                             extra_body={field: value})
    assert refused.value.body["message"] == message


async def test_the_defaults_clients_send_for_those_fields_are_accepted(client):
    # What OpenAI-compatible clients send when they set everything to its default.
    defaults = {"logprobs": None, "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "best_of": 1, "echo": False, "user": "me"}
    done = await client.completions.create(model="sharpen-embedded", prompt="x", max_tokens=2, extra_body=defaults)
    assert done.choices[0].finish_reason in ("stop", "length")
    chat = {"logprobs": False, "top_logprobs": 0, "tools": [], "response_format": {"type": "text"}, "presence_penalty": 0}
    done = await client.chat.completions.create(model="sharpen-embedded", messages=[{"role": "user", "content": "hi"}], max_tokens=2, extra_body=chat)
    assert done.choices[0].message.role == "assistant"


class FramesThenStall:
    """A local backend whose run stalls after `frames` frames until the server's time runs out:
    a stream cut at a known step. Keeps the frames it gave."""

    def __init__(self, backend: LocalBackend, frames: int) -> None:
        self.inner, self.frames, self.seen = backend, frames, []

    def describe(self):
        return self.inner.describe()

    @property
    def runner(self):
        return self.inner.runner

    def run(self, request, should_stop, every=0.0):
        for event in self.inner.run(request, should_stop, every):
            yield event
            if isinstance(event, Progress):
                self.seen.append(event)
                while len(self.seen) >= self.frames and not should_stop():
                    time.sleep(0.01)


@pytest.mark.parametrize("diffusing", [False, True], ids=["deltas", "diffusing"])
async def test_a_stream_cut_by_the_time_limit_ends_with_the_committed_text_in_its_kind(denoiser, diffusing):
    """A diffusing client replaces its draft with each chunk: the cut stream's last chunk must
    carry what was committed (it carried "" and a client's text vanished); a delta client has
    been sent the committed text already and gets nothing more."""
    backend = FramesThenStall(LocalBackend.of(denoiser), frames=9)
    client = _client(backend, Limits(seconds=1.5))
    ask = dict(model="sharpen-embedded", prompt=PREFIX, suffix=SUFFIX, max_tokens=16, seed=1, extra_body={"diffusing": diffusing, "steps": 16})
    chunks = [c.choices[0] async for c in await client.completions.create(**ask, stream=True)]
    committed = committed_text(backend.seen[-1], PREFIX + SUFFIX, len(PREFIX))
    assert committed  # the cut comes after something has settled, or the case is not tried
    assert chunks[-1].finish_reason == "length" and all(c.finish_reason is None for c in chunks[:-1])
    if diffusing:
        assert chunks[-1].text == committed and len(chunks) == len(backend.seen) + 1
    else:
        assert "".join(c.text for c in chunks) == committed and chunks[-1].text == ""


def _events(stream_body: str) -> list[dict]:
    return [json.loads(line[len("data: "):]) for line in stream_body.splitlines() if line.startswith("data: ")]


async def test_infill_says_truncated_when_the_context_did_not_all_fit_streamed_or_not(denoiser):
    """llama.cpp's `truncated`: the context was more than the model holds. A file longer than
    the canvas is; a short one is not. The streamed answer's last event reports what the
    answer does (it reported prompt_n 0 before)."""
    http = _http(LocalBackend.of(denoiser))
    long_prefix = "".join(f"value_{n} = {n}\n" for n in range(400)) + PREFIX
    for prefix, cut in ((PREFIX, False), (long_prefix, True)):
        body = {"input_prefix": prefix, "input_suffix": SUFFIX, "n_predict": 12, "seed": 2}
        answer = (await http.post("/infill", json=body)).json()
        assert answer["truncated"] is cut and answer["stop_type"] in ("eos", "limit")
        assert 0 < answer["timings"]["prompt_n"] == answer["tokens_evaluated"] < denoiser.max_len
        last = _events((await http.post("/infill", json={**body, "stream": True})).text)[-1]
        assert last["stop"] is True and last["truncated"] is cut
        assert last["timings"]["prompt_n"] == answer["timings"]["prompt_n"] and last["tokens_predicted"] == answer["tokens_predicted"]
        assert last["timings"]["prompt_ms"] > 0


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
async def test_infill_cut_by_t_max_predict_ms_is_limit_not_truncated(denoiser, stream):
    """t_max_predict_ms ends the run with what was committed, stop_type "limit" as llama.cpp's
    time limit does; `truncated` stays about the context (it said true for any time cut)."""
    backend = FramesThenStall(LocalBackend.of(denoiser), frames=9)
    http = _http(backend)
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 16, "seed": 1, "steps": 16, "t_max_predict_ms": 1500, "stream": stream}
    reply = await http.post("/infill", json=body)
    committed = committed_text(backend.seen[-1], PREFIX + SUFFIX, len(PREFIX))
    assert committed  # something had settled when the time ran out, or the case is not tried
    if stream:
        events = _events(reply.text)
        last = events[-1]
        assert "".join(e["content"] for e in events) == committed
    else:
        last = reply.json()
        assert last["content"] == committed
    assert last["stop_type"] == "limit" and last["truncated"] is False and last["tokens_predicted"] == backend.seen[-1].sharp


def llama_vscode_chat_edit_body(instructions: str, original: str) -> dict:
    """The body llama.vscode's chat edit sends (src/llama-server.ts, createChatEditRequestPayload,
    ggml-org/llama.vscode 009e5b7): llama.cpp's own sampler fields beside OpenAI's, max_tokens -1."""
    return {
        "messages": [{"role": "system", "content": "You are an expert coder."},
                     {"role": "user", "content": f"instructions:\n{instructions}\n\noriginal code:\n{original}\n\nmodified code:"}],
        "stream": False, "cache_prompt": True, "samplers": "edkypmxt", "temperature": 0.8, "dynatemp_range": 0,
        "dynatemp_exponent": 1, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "typical_p": 1, "xtc_probability": 0,
        "xtc_threshold": 0.1, "repeat_last_n": 64, "repeat_penalty": 1, "presence_penalty": 0, "frequency_penalty": 0,
        "dry_multiplier": 0, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1, "max_tokens": -1,
        "timings_per_token": False,
    }


async def test_llama_vscode_chat_edit_body_is_answered_and_its_tools_body_refused(denoiser):
    """max_tokens -1 is llama.cpp's "no limit" (it was a 400); llama.cpp's sampler extras are
    accepted as /infill accepts them; its agent's body asks for tools, which runs here do not call."""
    http = _http(LocalBackend.of(denoiser))
    answer = await http.post("/v1/chat/completions", json=llama_vscode_chat_edit_body("add a docstring", "def f(x):\n    return x\n"))
    assert answer.status_code == 200, answer.text
    done = answer.json()
    assert done["choices"][0]["message"]["role"] == "assistant" and 0 < done["usage"]["completion_tokens"] <= min(512, denoiser.max_len // 2)
    tools = [{"type": "function", "function": {"name": "read_file", "description": "read a file", "parameters": {"type": "object", "properties": {}}}}]
    refused = await http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "read a.py"}], "stream": False,
                                                            "temperature": 0.8, "top_p": 0.95, "tools": tools, "tool_choice": "auto"})
    assert refused.status_code == 400 and refused.json()["error"]["message"] == "tools: sharpen calls no tools"
    endless = await http.post("/v1/completions", json={"prompt": PREFIX, "max_tokens": -1, "seed": 4})
    bounded = await http.post("/v1/completions", json={"prompt": PREFIX, "max_tokens": min(512, denoiser.max_len // 2), "seed": 4})
    assert endless.status_code == 200 and endless.json()["choices"][0]["text"] == bounded.json()["choices"][0]["text"]
    assert (await http.post("/v1/completions", json={"prompt": PREFIX, "max_tokens": -2})).json()["error"]["message"] == "max_tokens must be at least 0 (or -1: no limit)"


async def test_the_openai_package_retrieves_the_model_and_an_unknown_one_is_404(denoiser):
    http = _http(LocalBackend.of(denoiser))
    client = _openai(http)
    model = await client.models.retrieve("sharpen-embedded")
    assert model.id == "sharpen-embedded" and model.owned_by == "sharpen"
    listed = [m.id async for m in client.models.list()]
    assert listed == ["sharpen-embedded"]
    with pytest.raises(openai.NotFoundError) as missing:
        await client.models.retrieve("org/other-model")
    assert missing.value.body["message"] == "no model org/other-model here (this server serves sharpen-embedded)"
    metrics = (await http.get("/metrics")).text
    assert 'sharpen_requests_total{endpoint="/v1/models/{model:path}",status="200"} 1' in metrics
    assert 'sharpen_requests_total{endpoint="/v1/models/{model:path}",status="404"} 1' in metrics


def test_the_startup_line_says_whether_concurrent_runs_share_passes(denoiser, tmp_path):
    """A server's users should know whether their runs pack or queue, and (a compiled model, the
    GPU default) that the packs run compiled per batch bucket (core/models/compiled_pack.py)."""
    from block_checkpoints import write_sdar

    from sharpen.core.models.loading import load_denoiser

    def sharing(model, batch: int) -> str:
        return LocalBackend.of(model, batch=batch).load_report()

    assert sharing(denoiser, 8) == "up to 8 runs share each forward pass"
    assert sharing(denoiser, 1) == "one run at a time (--max-batch 1)"
    compiled = load_denoiser()
    compiled.compile("default")  # on a CPU torch.compile runs at the first pass: none runs here
    assert compiled.compiled and not denoiser.compiled
    assert sharing(compiled, 8) == "up to 8 runs share each forward pass, compiled per batch bucket"
    block_causal = load_denoiser(write_sdar(tmp_path / "SDAR-tiny"))  # a block-causal loop: its open-block passes pack too
    assert sharing(block_causal, 8) == "up to 8 runs share each forward pass"


async def test_a_chat_longer_than_the_canvas_loses_its_oldest_turns_not_its_start(denoiser):
    """The rendered chat used to be cut at a line like any text: the canvas started inside an old
    turn, the system message gone. Now the oldest turns go (system and last stay) until it fits."""
    backend = LocalBackend.of(denoiser)
    server = Server(backend, backend.describe(), Limits())
    messages = [{"role": "system", "content": "You write Python."}]
    messages += [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i} " * 8} for i in range(21)]
    prompt = server.chat_prompt(messages, 16)
    tokens = len(denoiser.tokenizer.encode(prompt))
    assert prompt.startswith("# system: You write Python.\n") and prompt.endswith("# user: " + ("message number 20 " * 8).strip() + "\n# assistant:\n")
    assert tokens <= denoiser.max_len - 16 and "message number 0 " not in prompt
    kept = prompt.count("# user:") + prompt.count("# assistant:") - 1
    longer = [messages[0]] + messages[len(messages) - kept - 1:]  # one turn more than kept: too long
    assert len(denoiser.tokenizer.encode(backend.runner.chat_text(longer))) > denoiser.max_len - 16
    http = _http(backend)
    answer = (await http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 16, "seed": 3})).json()
    assert answer["usage"]["prompt_tokens"] == tokens  # the trimmed chat, whole: nothing cut from its start


async def test_llama_cpp_completion_continues_a_prompt_and_fills_a_fim_one_as_infill_does(denoiser):
    """POST /completion, llama.cpp's own (Continue's llama.cpp provider sends prompt, n_predict,
    stop, top_k, top_p, min_p, mirostat, frequency/presence penalties, stream): the answer and the
    stream are /infill's; a prompt formatted for fill-in-the-middle fills its middle."""
    http = _http(LocalBackend.of(denoiser))
    continue_body = {"prompt": PREFIX, "n_predict": 12, "stop": ["\n\n"], "top_k": 40, "top_p": 0.9, "min_p": 0.05, "mirostat": 0,
                     "frequency_penalty": 0.0, "presence_penalty": 0.0, "temperature": 0.0, "seed": 6, "stream": True}
    events = _events((await http.post("/completion", json=continue_body)).text)
    last = events[-1]
    assert last["stop"] is True and all(e["stop"] is False for e in events[:-1])
    whole = (await http.post("/completion", json={**continue_body, "stream": False})).json()
    assert "".join(e["content"] for e in events) == whole["content"] and whole["tokens_evaluated"] > 0
    as_infill = (await http.post("/infill", json={"input_prefix": PREFIX, "n_predict": 12, "stop": ["\n\n"], "top_k": 40, "top_p": 0.9,
                                                  "temperature": 0.0, "seed": 6})).json()
    assert whole["content"] == as_infill["content"]
    fim = (await http.post("/completion", json={"prompt": f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>", "n_predict": 12, "seed": 6})).json()
    fim_infill = (await http.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 12, "seed": 6})).json()
    assert fim["content"] == fim_infill["content"]
    bad = await http.post("/completion", json={"prompt": [1, 2, 3]})
    assert bad.status_code == 400 and bad.json()["error"]["message"] == "prompt must be a string (one prompt per request)"


def test_every_command_line_layers_its_settings_through_one_function(tmp_path):
    """`sharpen`, `sharpen serve` and `sharpen lsp` read flags over the config file with the same
    app/flags.config_from: the file's values where no flag is given, a flag over the file, and a
    bad value named by its flag."""
    from sharpen.app.cli import build_parser as editor_parser
    from sharpen.app.flags import config_from
    from sharpen.app.lsp import build_parser as lsp_parser
    from sharpen.app.serve.main import build_parser as serve_parser
    from sharpen.core.errors import UsageError

    config = tmp_path / "config.toml"
    config.write_text("[sampling]\nsteps = 9\ntemperature = 0.5\n[backend]\nbackend_timeout = 7.0\n")
    for parser in (editor_parser(), serve_parser(), lsp_parser()):
        layered = config_from(parser.parse_args(["--config", str(config), "--steps", "5"]))
        assert (layered.sampling.steps, layered.sampling.temperature) == (5, 0.5)
        if "--backend" in parser.format_help():
            assert layered.remote.backend_timeout == 7.0
        with pytest.raises(UsageError, match="^--steps "):
            config_from(parser.parse_args(["--config", str(config), "--steps", "0"]))
