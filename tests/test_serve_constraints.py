"""The server's constraints and what its streams may send, on the application in process
(httpx's ASGI transport, as tests/test_serve_fields.py).

- Constraints (issue 43): OpenAI's `response_format` (through the official `openai` package) and
  vLLM's / SGLang's `regex`, `json_schema`, `ebnf` on every completion endpoint steer the run on
  the embedded model: the answer matches (a JSON schema's validates), and the same seed without
  the constraint does not; a bad one is a one-line 400 before any stream; a model whose loop
  cannot steer refuses it with a 400 (Fast-dLLM v2's sub-block loop, DiffusionGemma's
  random-token one).
- Streams never send what a later token may take back: the beginning of a stop string settling
  over several steps, or a line n_indent may yet cut (scripted backends write known text, on
  every streaming endpoint), and, over random pieces, every prefix a stream sends begins the
  finished answer.
"""
from __future__ import annotations

import json
import re

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharpen.app.backend import LocalBackend
from sharpen.app.serve.app import build_app
from sharpen.app.serve.common import Limits, Server, cut_at_stop, sendable
from sharpen.app.serve.llama import cut_at_indent, settled_at_indent
from test_notice import scripted

DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "port": {"type": "integer"}},
          "required": ["name", "port"], "additionalProperties": False}


@pytest.fixture(scope="module")
def embedded():
    from sharpen.core.models.load import load_model
    from sharpen.core.settings import ModelRequest

    return load_model(ModelRequest())


def _http(backend) -> httpx.AsyncClient:
    app = build_app(Server(backend, backend.describe(), Limits()))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sharpen", timeout=120)


def _openai(backend) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://sharpen/v1", api_key="none", http_client=_http(backend), max_retries=0)


def _events(stream: str) -> list[dict]:
    return [json.loads(line[6:]) for line in stream.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


def _schema_holds(text: str) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return (isinstance(value, dict) and set(value) == {"name", "port"} and isinstance(value["name"], str)
            and len(value["name"]) <= 6 and isinstance(value["port"], int) and not isinstance(value["port"], bool))


# -- constraints on the embedded model -----------------------------------------------------------


async def test_response_format_json_schema_through_the_openai_package_validates(embedded):
    client = _openai(LocalBackend.of(embedded))
    fmt = {"type": "json_schema", "json_schema": {"name": "service", "schema": SCHEMA}}
    messages = [{"role": "user", "content": "a service as JSON"}]
    for seed in (1, 2):
        chat = await client.chat.completions.create(model="sharpen-embedded", messages=messages, max_tokens=24, seed=seed,
                                                    response_format=fmt)
        assert _schema_holds(chat.choices[0].message.content), chat.choices[0].message.content
        free = await client.chat.completions.create(model="sharpen-embedded", messages=messages, max_tokens=24, seed=seed)
        assert not _schema_holds(free.choices[0].message.content)
        ask = dict(model="sharpen-embedded", prompt="service = ", suffix="\n", max_tokens=24, seed=seed)
        text = (await client.completions.create(**ask, extra_body={"response_format": fmt})).choices[0].text
        assert _schema_holds(text), text
        assert not _schema_holds((await client.completions.create(**ask)).choices[0].text)
    # json_object: any JSON object; streamed, the deltas join into one
    deltas = [c.choices[0].delta.content or "" async for c in await client.chat.completions.create(
        model="sharpen-embedded", messages=messages, max_tokens=16, seed=3, stream=True, response_format={"type": "json_object"})]
    assert isinstance(json.loads("".join(deltas)), dict), deltas


async def test_regex_on_completions_and_infill_matches_and_the_same_seed_without_it_does_not(embedded):
    async with _http(LocalBackend.of(embedded)) as http:
        for seed in (0, 1):
            for path, body, read in (
                    ("/v1/completions", {"prompt": 'released = "', "suffix": '"\n', "max_tokens": 12}, lambda d: d["choices"][0]["text"]),
                    ("/v1/fim/completions", {"prompt": 'released = "', "suffix": '"\n', "max_tokens": 12}, lambda d: d["choices"][0]["text"]),
                    ("/infill", {"input_prefix": 'released = "', "input_suffix": '"\n', "n_predict": 12}, lambda d: d["content"]),
                    ("/completion", {"prompt": 'released = "', "n_predict": 12}, lambda d: d["content"])):
                body = {**body, "seed": seed}
                answer = await http.post(path, json={**body, "regex": DATE})
                assert answer.status_code == 200, answer.text
                assert re.fullmatch(DATE, read(answer.json())), (path, answer.json())
                assert not re.fullmatch(DATE, read((await http.post(path, json=body)).json())), path
            # streamed: the joined chunks are the answer, and it matches
            chunks = _events((await http.post("/infill", json={"input_prefix": 'released = "', "input_suffix": '"\n', "n_predict": 12,
                                                               "seed": seed, "regex": DATE, "stream": True})).text)
            assert re.fullmatch(DATE, "".join(c["content"] for c in chunks)), chunks
        # SGLang's ebnf (a Lark grammar here) and vLLM's json_schema field
        grammar = 'start: "v" DIGIT "." DIGIT\n%import common.DIGIT'
        data = (await http.post("/v1/completions", json={"prompt": "version = ", "max_tokens": 8, "seed": 4, "ebnf": grammar})).json()
        assert re.fullmatch(r"v[0-9]\.[0-9]", data["choices"][0]["text"]), data
        data = (await http.post("/completion", json={"prompt": "service = ", "n_predict": 24, "seed": 4, "json_schema": SCHEMA})).json()
        assert _schema_holds(data["content"]), data


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": "x = ", "max_tokens": 8}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}),
    ("/infill", {"input_prefix": "x = ", "n_predict": 8}),
])
@pytest.mark.parametrize("constraint, message", [
    ({"regex": "([0-9]"}, "cannot compile the pattern '([0-9]'"),
    ({"regex": "[0-9]", "json_schema": {"type": "integer"}}, "one constraint per request: got regex and json_schema"),
    ({"response_format": {"type": "yaml"}}, "response_format.type 'yaml' is not supported (json_object, json_schema or text)"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema must be a JSON schema object"),
    ({"regex": 7}, "regex must be a string"),
    ({"regex": "[0-9]{40}"}, "cannot be met: its shortest match takes 10 tokens and the span has 8 slots"),
    ({"grammar": 'root ::= "a"'}, "cannot read the grammar"),  # llama.cpp's GBNF: not read here (a Lark grammar is)
])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_bad_constraint_is_a_one_line_400_before_any_stream(embedded, path, body, constraint, message, stream):
    async with _http(LocalBackend.of(embedded)) as http:
        answer = await http.post(path, json={**body, **constraint, "stream": stream})
    assert answer.status_code == 400 and answer.headers["content-type"] == "application/json", answer.text
    text = answer.json()["error"]["message"]
    assert message in text and "\n" not in text, text


async def test_the_openai_package_reads_a_bad_schema_as_a_bad_request(embedded):
    client = _openai(LocalBackend.of(embedded))
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(model="sharpen-embedded", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                             response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}})
    assert refused.value.status_code == 400 and "\n" not in refused.value.body["message"]


@pytest.fixture(scope="module")
def other_loops(tmp_path_factory):
    """The loops beside the masked one a constraint reaches: Fast-dLLM v2 (sub-block), DiffusionGemma (random-token)."""
    from block_checkpoints import write_fast_dllm_v2

    from sharpen.core.models.loading import load_denoiser

    root = tmp_path_factory.mktemp("other_loops")
    models = {"sub-block": load_denoiser(write_fast_dllm_v2(root / "Fast_dLLM_v2_7B-tiny"))}
    try:
        from gemma_checkpoint import write_diffusion_gemma

        from sharpen.core.models.families.diffusion_gemma import load_gemma

        models["random-token"] = load_gemma(write_diffusion_gemma(root / "diffusiongemma-tiny", canvas_length=48))
    except ImportError:  # transformers without diffusion_gemma: tests/test_diffusion_gemma.py skips as well
        pass
    return models


@pytest.mark.parametrize("loop", ["sub-block", "random-token"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_the_sub_block_and_random_token_loops_answer_a_constraint_with_matching_text(other_loops, loop, stream):
    """Every loop kind steers (core/constraints): a regex on Fast-dLLM v2 and DiffusionGemma answers
    200 with text that matches it, streamed or not."""
    if loop not in other_loops:
        pytest.skip("this transformers has no diffusion_gemma")
    async with _http(LocalBackend.of(other_loops[loop])) as http:
        body = {"prompt": "x = ", "max_tokens": 6, "regex": "[0-9]+", "stream": stream, "seed": 1}
        answer = await http.post("/v1/completions", json=body)
        assert answer.status_code == 200, answer.text
        if stream:
            chunks = [c for c in _events(answer.text) if isinstance(c, dict) and c.get("choices")]
            text = "".join(c["choices"][0].get("text") or "" for c in chunks)
        else:
            text = answer.json()["choices"][0]["text"]
        assert re.fullmatch("[0-9]+", text), text


# -- streams never send what a later token may take back -------------------------------------------


async def _streamed(http, path: str, body: dict) -> list[str]:
    """The text each chunk of a stream carries, in order."""
    chunks = _events((await http.post(path, json={**body, "stream": True})).text)
    if path in ("/infill", "/completion"):
        return [c["content"] for c in chunks]
    return [(c["choices"][0].get("delta", {}).get("content") if "delta" in c["choices"][0] else c["choices"][0]["text"]) or ""
            for c in chunks if c["choices"]]


def _bodies(model: str, extra: dict) -> list[tuple[str, dict]]:
    return [("/infill", {"input_prefix": "v\n", "n_predict": 32, **extra}),
            ("/completion", {"prompt": "v\n", "n_predict": 32, **extra}),
            ("/v1/completions", {"model": model, "prompt": "v\n", "max_tokens": 32, **extra}),
            ("/v1/fim/completions", {"model": model, "prompt": "v\n", "suffix": "", "max_tokens": 32, **extra})]


@pytest.mark.parametrize("pieces, stops, answer", [
    (("x = 1", " #", " DO", "NE", "\n"), ["# DONE"], "x = 1 "),  # the stop string settles over three steps
    (("x = 1", " #", " DO", "G", "\n"), ["# DONE"], "x = 1 # DOG\n"),  # it turned out none: the held part goes out
    (("xab", "c", "d", "e"), ["abcd", "c"], "x"),  # an earlier stop running past the end comes before a whole later one
])
async def test_a_stop_string_settling_over_steps_never_reaches_any_stream_in_part(tiny_denoiser, pieces, stops, answer):
    backend = scripted(tiny_denoiser, *pieces)
    async with _http(backend) as http:
        for path, body in _bodies(backend.describe().name, {"stop": stops}):
            sent = await _streamed(http, path, body)
            assert "".join(sent) == answer, (path, sent)
            joined = ""
            for piece in sent:  # every chunk extends what was sent into the answer: nothing to take back
                joined += piece
                assert answer.startswith(joined), (path, sent)


@pytest.mark.parametrize("pieces, n_indent, answer", [
    (("a\n", "  ", "c\n", "d\n"), 4, "a\n"),  # "  " might have been a blank line; "c" shows it ends the answer
    (("a\n", "  ", "  b\n", "  c\n"), 4, "a\n    b\n"),  # it turned out indented enough
    (("a\n", "  ", "\n", "    b\n"), 4, "a\n  \n    b\n"),  # it turned out blank: kept
])
async def test_n_indent_never_streams_a_line_before_it_is_known_to_be_kept(tiny_denoiser, pieces, n_indent, answer):
    backend = scripted(tiny_denoiser, *pieces)
    async with _http(backend) as http:
        for path in ("/infill", "/completion"):
            body = {"input_prefix": "def f():\n", "prompt": "def f():\n", "n_predict": 32, "n_indent": n_indent}
            if path == "/infill":
                body.pop("prompt")
            else:
                body.pop("input_prefix")
            assert (await http.post(path, json=body)).json()["content"] == answer
            sent = await _streamed(http, path, body)
            assert "".join(sent) == answer and all(answer.startswith("".join(sent[:k])) for k in range(len(sent))), (path, sent)


async def test_a_chat_stream_holds_back_a_stop_string_settling_over_steps(embedded):
    """The chat stream's deltas, on a scripted run over the embedded model (which has a chat template)."""
    backend = scripted(embedded, "sure", " <", "/e", "nd>", " more")
    async with _http(backend) as http:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "stop": ["</end>"]}
        sent = await _streamed(http, "/v1/chat/completions", body)
    assert "".join(sent) == "sure " and not any("<" in s for s in sent), sent


PIECES = st.lists(st.text(alphabet="ab \n#", min_size=0, max_size=4), min_size=1, max_size=10)


@settings(max_examples=400, deadline=None)
@given(PIECES, st.lists(st.text(alphabet="ab \n#", min_size=1, max_size=4), max_size=3), st.integers(0, 3))
def test_every_prefix_a_stream_sends_begins_the_finished_answer(pieces, stops, n_indent):
    """Over any text settling piece by piece: what a llama.cpp stream sends at each step (n_indent,
    then stop strings) and what an OpenAI one sends (stop strings) begins the answer the finished
    text gives, and at the end it is all of it."""
    full = "".join(pieces)
    llama_answer = cut_at_stop(cut_at_indent(full, n_indent), stops)[0]
    openai_answer = cut_at_stop(full, stops)[0]
    for k in range(len(pieces) + 1):
        now = "".join(pieces[:k])
        assert llama_answer.startswith(sendable(settled_at_indent(now, n_indent), stops)), (now, llama_answer)
        assert openai_answer.startswith(sendable(now, stops)), (now, openai_answer)
