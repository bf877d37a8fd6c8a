"""`sharpen serve` driven by the clients editors use: llama.vim's exact /infill body, the
official `openai` package, raw sockets, several clients at once, bad bodies, and the editor's
and the headless runner's --backend. One live server per module (tests/serving.py)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest
from serving import ROOT, live_server, local_text, metric

from sharpen.core.request import EditRequest
from sharpen.core.run import Done, Progress, Runner
from sharpen.core.settings import Sampling
from sharpen.core.spans import Span

PREFIX = "def fizzbuzz(n):\n    for i in range(1, n + 1):\n"
SUFFIX = "\n    return n\n\n\nprint(fizzbuzz(15))\n"
LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def server():
    with live_server("--max-body", str(LIMIT)) as (url, process):
        yield url


@pytest.fixture(scope="module")
def runner():
    from sharpen.core.models.load import load_model
    from sharpen.core.settings import ModelRequest

    return Runner(load_model(ModelRequest()))


def llama_vim_body(prefix: str, middle: str, suffix: str) -> dict:
    """The body llama.vim's llama#fim sends (autoload/llama.vim, ggml-org/llama.vim a1c8e6e)."""
    return {
        "id_slot": 0,
        "input_prefix": prefix,
        "input_suffix": suffix,
        "input_extra": [{"text": "import os\n", "time": 1700000000, "filename": "util.py"}],
        "prompt": middle,
        "n_predict": 128,
        "stop": [],
        "n_indent": 4,
        "top_k": 40,
        "top_p": 0.90,
        "samplers": ["top_k", "top_p", "infill"],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 60000,
        "response_fields": ["content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms", "timings/prompt_per_second",
                            "timings/predicted_n", "timings/predicted_ms", "timings/predicted_per_token_ms",
                            "timings/predicted_per_second", "truncated", "tokens_cached"],
    }


def test_llama_vim_infill_body_gets_llama_cpp_fields_and_the_local_answer(server, runner):
    from sharpen.app.serve.llama import cut_at_indent

    body = llama_vim_body(PREFIX, "        ", SUFFIX)
    answer = httpx.post(f"{server}/infill", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert set(data) == set(body["response_fields"])  # only the fields asked for, under their paths
    assert data["truncated"] is False and data["tokens_cached"] == 0 and data["timings/predicted_n"] >= 1
    before = "import os\n" + PREFIX + "        "
    alone = local_text(runner, before + SUFFIX, len(before), 128, top_k=40, top_p=0.9)
    assert data["content"] == cut_at_indent(alone, 4)
    # llama.vim's warm-up (ring buffer update): n_predict 0 runs nothing and answers at once.
    warm = {**body, "n_predict": 0, "input_prefix": "", "input_suffix": "", "prompt": "", "response_fields": [""]}
    started = time.perf_counter()
    assert httpx.post(f"{server}/infill", json=warm, timeout=10).json() == {}
    assert time.perf_counter() - started < 2


def test_infill_reads_n_predict_and_reports_stop_type_as_llama_cpp_does(server, runner):
    at = PREFIX + "        "
    endless = httpx.post(f"{server}/infill", json={"input_prefix": at, "input_suffix": SUFFIX, "n_predict": -1}, timeout=60)
    assert endless.status_code == 200, endless.text  # -1: no limit but the server's own
    bound = min(512, runner.info.max_len // 2)  # --max-tokens, and half the canvas: room left for context
    assert endless.json()["content"] == local_text(runner, at + SUFFIX, len(at), bound)
    assert httpx.post(f"{server}/infill", json={"input_prefix": at, "n_predict": -2}, timeout=30).status_code == 400
    for n in (1, 2, 64):
        data = httpx.post(f"{server}/infill", json={"input_prefix": at, "input_suffix": SUFFIX, "n_predict": n}, timeout=60).json()
        assert data["stop_type"] == ("limit" if data["tokens_predicted"] >= n else "eos"), data
        if n == 1:
            assert data["stop_type"] == "limit"  # the one slot holds content: an infill is never empty


def test_openai_package_fills_the_middle_with_a_suffix_and_zeds_fim_prompt(server, runner):
    import openai

    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", timeout=60)
    assert [m.id for m in client.models.list().data] == ["sharpen-embedded"]
    alone = local_text(runner, PREFIX + "        " + SUFFIX, len(PREFIX) + 8, 24)
    done = client.completions.create(model="sharpen-embedded", prompt=PREFIX + "        ", suffix=SUFFIX, max_tokens=24)
    assert done.choices[0].text == alone and done.choices[0].finish_reason in ("stop", "length")
    assert done.usage.completion_tokens >= 1
    zed = f"<|fim_prefix|>{PREFIX}        <|fim_suffix|>{SUFFIX}<|fim_middle|>"  # Zed's format for Qwen tokenizers
    assert client.completions.create(model="sharpen-embedded", prompt=zed, max_tokens=24).choices[0].text == alone


def test_openai_chat_streamed_with_diffusing_on_the_embedded_model_sends_one_whole_draft_per_step(server, runner):
    """The embedded model's chat template writes the conversation as comments; its answer streams
    as one whole draft per denoising step, each the local run's frame over the same prompt."""
    import openai

    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", timeout=60)
    messages = [{"role": "system", "content": "Answer in Python."}, {"role": "user", "content": "Sum a list."}]
    chunks = list(client.chat.completions.create(model="sharpen-embedded", messages=messages, max_tokens=16, stream=True,
                                                 extra_body={"diffusing": True}))
    drafts = [c.choices[0].delta.content for c in chunks]
    prompt = runner.chat_text(messages)
    assert prompt == "# system: Answer in Python.\n# user: Sum a list.\n# assistant:\n"
    frames = [e for e in runner.run(EditRequest(prompt, (Span(len(prompt), len(prompt), max_tokens=16),))) if isinstance(e, Progress)]
    assert drafts[:-1] == [f.spans[0].text for f in frames] and len(frames) >= 4
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    whole = client.chat.completions.create(model="sharpen-embedded", messages=messages, max_tokens=16).choices[0].message.content
    assert drafts[-1] == whole


async def test_a_model_without_a_chat_template_answers_chat_with_one_line_400(tiny_denoiser):
    from sharpen.app.backend import LocalBackend
    from sharpen.app.serve.app import build_app
    from sharpen.app.serve.common import Limits, Server

    backend = LocalBackend.of(tiny_denoiser)
    app = build_app(Server(backend, backend.describe(), Limits()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        answer = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "the model tiny-random has no chat template; use a completion or infill endpoint"


def test_usage_counts_the_prompt_tokens_the_canvas_held(server, runner):
    """prompt_tokens (OpenAI) and prompt_n (llama.cpp) are the context the model read: a long
    file is cut to what fits beside the slots, and that cut is what they count."""
    from sharpen.core.canvas import build_canvas
    from sharpen.core.settings import Editing

    long_prefix = "".join(f"value_{i} = {i} * 2\n" for i in range(300)) + PREFIX + "        "
    den = runner.denoiser
    canvas = build_canvas(long_prefix + SUFFIX, [Span(len(long_prefix), len(long_prefix), max_tokens=24)], den.tokenizer,
                          den.spec.mask_id, Editing().context_tokens, den.max_len)
    held = len(canvas.ids) - len(canvas.slots[0])
    assert 0 < held <= den.max_len - 24
    done = httpx.post(f"{server}/v1/completions", json={"prompt": long_prefix, "suffix": SUFFIX, "max_tokens": 24}, timeout=60).json()
    assert done["usage"]["prompt_tokens"] == held
    assert done["usage"]["total_tokens"] == held + done["usage"]["completion_tokens"]
    infill = httpx.post(f"{server}/infill", json={"input_prefix": long_prefix, "input_suffix": SUFFIX, "n_predict": 24}, timeout=60).json()
    assert infill["timings"]["prompt_n"] == infill["tokens_evaluated"] == held


def test_four_clients_at_once_each_get_what_they_would_alone(server, runner):
    import openai

    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", timeout=120)
    jobs = [(PREFIX + "        ", SUFFIX, seed, tokens) for seed, tokens in ((0, 16), (1, 24), (2, 12), (3, 20))]
    answers: dict[int, str] = {}

    def ask(i, prefix, suffix, seed, tokens):
        out = client.completions.create(model="m", prompt=prefix, suffix=suffix, max_tokens=tokens, seed=seed, temperature=0.8)
        answers[i] = out.choices[0].text

    passes, runs = metric(server, "sharpen_packed_passes_total"), metric(server, "sharpen_packed_pass_runs_total")
    threads = [threading.Thread(target=ask, args=(i, *job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i, (prefix, suffix, seed, tokens) in enumerate(jobs):
        assert answers[i] == local_text(runner, prefix + suffix, len(prefix), tokens, seed=seed, temperature=0.8)
    # /metrics shows the sharing: more runs' passes than passes run.
    passes, runs = metric(server, "sharpen_packed_passes_total") - passes, metric(server, "sharpen_packed_pass_runs_total") - runs
    assert 0 < passes < runs
    # Runs per pass as a histogram: its count and sum are those totals, its buckets cumulative;
    # each infill's length pass is a whole canvas, so some passes held canvases.
    total, summed = metric(server, "sharpen_packed_passes_total"), metric(server, "sharpen_packed_pass_runs_total")
    assert (metric(server, "sharpen_pass_runs_count"), metric(server, "sharpen_pass_runs_sum")) == (total, summed)
    buckets = [metric(server, f'sharpen_pass_runs_bucket{{le="{le}"}}') for le in (1, 2, 3, 4, 6, 8, 16, "+Inf")]
    assert buckets == sorted(buckets) and buckets[-1] == total and buckets[0] < total
    assert 0 < metric(server, "sharpen_whole_canvas_passes_total") <= metric(server, "sharpen_whole_canvas_pass_runs_total")
    assert metric(server, "sharpen_passes_held_total") >= 0 and metric(server, "sharpen_passes_held_seconds_total") >= 0


def test_edits_stream_sends_each_steps_slot_states_then_the_change_set(server, runner):
    text = PREFIX + "        \n" + SUFFIX
    request = EditRequest(text, (Span(len(PREFIX) + 8, len(PREFIX) + 8, max_tokens=12), Span(4, 12, "rewrite", strength=0.5)), Sampling(steps=6))
    local = list(runner.run(request))
    events = []
    with httpx.stream("POST", f"{server}/v1/edits", json={**request.to_json(), "stream": True}, timeout=60) as answer:
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    frames = [Progress.from_json(e) for e in events if e["type"] == "frame"]
    assert [f.spans for f in frames] == [e.spans for e in local if isinstance(e, Progress)]  # what a local preview draws
    done = Done.from_json(events[-1], request)
    assert done.result.text == local[-1].result.text
    plain = httpx.post(f"{server}/v1/edits", json=request.to_json(), timeout=60).json()
    assert plain["changes"] == local[-1].to_json()["changes"]


def _stream_then_leave(url: str, path: str, body: dict) -> None:
    """A client that reads the first event of a stream and hangs up."""
    parts = urlsplit(url)
    payload = json.dumps(body).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
        seen = b""
        while b"data: " not in seen:
            seen += sock.recv(65536)


def test_a_client_that_leaves_cancels_its_run_within_a_step(server):
    # A long run: 8 samples of 128 slots, no cache: seconds of work if nobody stopped it.
    body = {"text": PREFIX + SUFFIX, "spans": [{"start": len(PREFIX), "max_tokens": 128}], "stream": True,
            "sampling": {"steps": 128, "samples": 8, "cache": "none"}}
    stopped, tokens = metric(server, "sharpen_runs_stopped_total"), metric(server, "sharpen_tokens_generated_total")
    left = time.perf_counter()
    _stream_then_leave(server, "/v1/edits", body)
    while metric(server, "sharpen_runs_stopped_total") == stopped:
        assert time.perf_counter() - left < 5, "the run went on after its client left"
        time.sleep(0.05)
    assert metric(server, "sharpen_tokens_generated_total") == tokens  # it never finished
    # The handler counts the stop when the client leaves; the run leaves the model at its next step.
    while metric(server, "sharpen_runs_waiting") != 0:
        assert time.perf_counter() - left < 5, "the run still held the model after its client left"
        time.sleep(0.05)
    quick = httpx.post(f"{server}/v1/completions", json={"prompt": PREFIX, "max_tokens": 4}, timeout=30)
    assert quick.status_code == 200


@pytest.mark.parametrize("body, status, message", [
    (b"{not json", 400, "the body is not JSON"),
    (b"[1, 2]", 400, "the body must be a JSON object"),
    (b"[" * 50_000 + b"]" * 50_000, 400, "the body is not JSON"),  # deeper than Python's recursion limit
    (b"\xff\xfe", 400, "the body is not UTF-8"),
    (json.dumps({"prompt": 3}).encode(), 400, "prompt must be a string"),
    (json.dumps({"prompt": "x", "max_tokens": -5}).encode(), 400, "max_tokens must be at least 0"),  # more than the bound is clamped
    (json.dumps({"prompt": "x", "temperature": "hot"}).encode(), 400, "temperature must be a number"),
    (json.dumps({"prompt": "x", "top_p": 0}).encode(), 400, "top_p must be in (0, 1]"),
    (json.dumps({"prompt": "x", "n": 3}).encode(), 400, "n must be 1"),
    (json.dumps({"prompt": "x" * LIMIT}).encode(), 413, "the body is too large"),
])
def test_malformed_and_oversized_bodies_get_one_line_json_errors(server, body, status, message):
    answer = httpx.post(f"{server}/v1/completions", content=body, headers={"Content-Type": "application/json"}, timeout=30)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert error["message"].startswith(message) and "\n" not in error["message"] and "Traceback" not in answer.text
    assert httpx.get(f"{server}/health").json()["status"] == "ok"  # and the server goes on


def test_bad_edits_and_unknown_paths_are_json_errors(server):
    cases = [
        ({"text": "abc", "spans": [{"start": 9}]}, 400, "span spans[0]: outside the text"),
        ({"text": "abc", "spans": [{"start": 1, "max_tokens": 100000}]}, 400, "span spans[0]: max_tokens must be between 1 and 4096"),
        ({"text": "abc", "spans": [{"start": 1}] * 65}, 400, "too many spans"),
        ({"text": "abc", "spans": [{"start": 1}], "sampling": {"policy": "best"}}, 400, "sampling.policy must be one of"),
    ]
    for body, status, message in cases:
        answer = httpx.post(f"{server}/v1/edits", json=body, timeout=30)
        assert answer.status_code == status and answer.json()["error"]["message"].startswith(message), answer.text
    assert httpx.get(f"{server}/nowhere").json()["error"]["message"] == "no such endpoint: /nowhere"
    assert httpx.get(f"{server}/v1/edits").status_code == 405


def _sharpen(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sharpen.app.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_headless_backend_edits_a_file_through_the_server_like_a_local_run(server, tmp_path):
    path = tmp_path / "fizz.py"
    original = PREFIX + "        \n" + SUFFIX
    path.write_text(original)
    local = _sharpen(str(path), "--apply-edit", "3:9-3:9", "--max-tokens", "16", "--steps", "8", "--json", "-q")
    remote = _sharpen(str(path), "--apply-edit", "3:9-3:9", "--max-tokens", "16", "--steps", "8", "--in-place", "-q", "--backend", server)
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr
    new = path.read_text()
    assert new == json.loads(local.stdout)["text"]
    at = len(PREFIX) + 8
    assert new[:at] == original[:at] and new.endswith(original[at:])  # outside the span: unchanged


def test_headless_backend_failures_are_one_line_and_exit_4(tmp_path):
    path = tmp_path / "f.py"
    path.write_text("x = 1\n")
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    out = _sharpen(str(path), "--apply-edit", "1:5-1:5", "--in-place", "--backend", f"http://127.0.0.1:{port}")
    assert out.returncode == 4 and out.stderr.count("\n") == 1 and "cannot reach" in out.stderr
    assert path.read_text() == "x = 1\n"


def test_server_killed_mid_request_is_one_line_exit_4_and_the_file_untouched(tmp_path):
    path = tmp_path / "f.py"
    original = PREFIX + SUFFIX
    path.write_text(original)
    with live_server() as (url, process):
        run = subprocess.Popen([sys.executable, "-m", "sharpen.app.cli", str(path), "--apply-edit", "3:1-3:1", "--in-place", "--backend", url,
                                "--max-tokens", "128", "--steps", "128", "--samples", "8", "--cache", "none"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        deadline = time.monotonic() + 60
        while metric(url, "sharpen_runs_waiting") == 0:  # the run has started on the server
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.05)
        process.kill()
        _, err = run.communicate(timeout=60)
    assert run.returncode == 4 and err.count("\n") == 1 and "closed the connection" in err, err
    assert path.read_text() == original


async def test_the_editor_runs_through_the_server_and_its_preview_is_the_local_one(server, runner, tmp_path):
    from pilot import wait_for

    from sharpen.app.config import Config
    from sharpen.app.tui.editor_app import SharpenApp
    from sharpen.app.tui.editor_pane import PREVIEW
    from sharpen.app.tui.themes import load_themes

    path = tmp_path / "fizz.py"
    original = PREFIX + "        \n" + SUFFIX
    path.write_text(original)
    config = Config.of(steps=6).layered({"backend": {"backend": server}})
    app = SharpenApp([path], config, load_themes(None))
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_for(pilot, lambda: app.backend is not None, timeout=60)
        assert app.status.model == "sharpen-embedded" and "127.0.0.1" in app.status.device
        seen: list = []
        backend, run = app.backend, app.backend.run

        def recorded(request, should_stop, every):
            seen.append(request)
            for event in run(request, should_stop, every):
                seen.append(event)
                yield event

        backend.run = recorded
        pane = app.active_pane()
        pane.editor.selection = ((2, 8), (2, 8))
        await pilot.press("alt+i")
        await wait_for(pilot, lambda: pane.phase == PREVIEW, timeout=60)
        request, frames = seen[0], [e for e in seen[1:] if isinstance(e, Progress)]
        local = {e.step: e for e in runner.run(request) if isinstance(e, Progress)}
        # Each frame drawn (the editor coalesces to its frame rate) is the local run's frame of that step.
        assert frames and all(f.spans == local[f.step].spans for f in frames)
        assert isinstance(seen[-1], Done) and seen[-1].last.spans == runner.result(request).last.spans
        await pilot.press("tab")
        new = pane.editor.buffer_text
        at = len(PREFIX) + 8
        assert new == runner.result(request).result.text
        assert new[:at] == original[:at] and new.endswith(original[at:])


@pytest.fixture(scope="module")
def asgi(runner):
    """The application in this process (httpx's ASGI transport), with a key and a line of one run."""
    from sharpen.app.backend import LocalBackend
    from sharpen.app.serve.app import build_app
    from sharpen.app.serve.common import Limits, Server

    backend = LocalBackend.of(runner.denoiser, max_waiting=0)
    server = Server(backend, backend.describe(), Limits(waiting=0), api_key="s3cret")
    return build_app(server), backend


async def test_the_key_is_required_except_for_health(asgi):
    app, _ = asgi
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        assert (await client.get("/health")).status_code == 200
        refused = await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
        wrong = await client.get("/v1/models", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        ok = await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200


async def test_a_full_line_answers_503_with_retry_after(asgi):
    app, backend = asgi
    holding = backend.runner.run(EditRequest(PREFIX, (Span(len(PREFIX), len(PREFIX), max_tokens=4),)))
    next(holding)  # a run holds the model; with no room in line, the next is refused at once
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            busy = await client.post("/v1/edits", json={"text": "ab", "spans": [{"start": 1}]}, headers={"Authorization": "Bearer s3cret"})
        assert busy.status_code == 503 and busy.headers["Retry-After"] == "1" and "busy" in busy.json()["error"]["message"]
    finally:
        holding.close()


def test_serve_refuses_a_public_host_without_a_key():
    out = _sharpen("serve", "--host", "0.0.0.0", "--port", "0", timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "SHARPEN_API_KEY" in out.stderr


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory):
    """A server on a tiny instruct checkpoint in LLaDA's release layout (it has a chat template)."""
    from family_checkpoints import write_llada

    model = write_llada(tmp_path_factory.mktemp("llada") / "instruct", instruct=True)
    with live_server("--model", str(model), "--steps", "6") as (url, process):
        yield url, model


def test_openai_chat_streamed_with_diffusing_sends_one_whole_draft_per_step(chat_server):
    import openai

    from sharpen.core.models.loading import load_denoiser

    url, model = chat_server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=60)
    messages = [{"role": "user", "content": "Name a prime."}]
    chunks = list(client.chat.completions.create(model="m", messages=messages, max_tokens=12, stream=True, extra_body={"diffusing": True}))
    drafts = [c.choices[0].delta.content for c in chunks]
    whole = client.chat.completions.create(model="m", messages=messages, max_tokens=12).choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert drafts[-1] == whole  # the last draft is the answer itself, not a delta
    # One chunk per frame: the local run over the same chat prompt has as many.
    local = Runner(load_denoiser(model))
    prompt = local.chat_text(messages)
    frames = [e for e in local.run(EditRequest(prompt, (Span(len(prompt), len(prompt), max_tokens=12),), Sampling(steps=6))) if isinstance(e, Progress)]
    assert drafts[:-1] == [f.spans[0].text for f in frames]
    assert len(drafts) == len(frames) + 1 and len(frames) >= 2


def test_remote_backend_on_one_span_servers_sends_a_request_per_span(server, runner):
    """Mercury-style (diffusing drafts become frames) and plain OpenAI completions (no drafts):
    two spans are two requests, each answered as a local one-span run over the same text."""
    from sharpen.app.remote import RemoteBackend
    from sharpen.core.settings import Editing

    text = PREFIX + "        \n" + SUFFIX
    spans = (Span(len(PREFIX) + 8, len(PREFIX) + 8, max_tokens=10), Span(len(text) - 1, len(text) - 1, max_tokens=6))
    request = EditRequest(text, spans, Sampling(), Editing())
    alone_results = [runner.result(EditRequest(text, (s,))).result for s in spans]
    alone = [r.spans[0].text for r in alone_results]
    for protocol, drafts in (("mercury", True), ("openai", False)):
        backend = RemoteBackend(server, protocol=protocol)
        assert backend.load().drafts is drafts
        events = list(backend.run(request))
        done = events[-1]
        assert isinstance(done, Done) and [r.text for r in done.result.spans] == alone
        a, b = spans
        assert done.result.text == text[:a.start] + alone[0] + text[a.end:b.start] + alone[1] + text[b.end:]
        frames = [e for e in events if isinstance(e, Progress)]
        if drafts:  # each draft a frame: the spans' texts as they sharpen, no slot states
            assert len(frames) > 2 and all(not s.slots for f in frames for s in f.spans)
        else:
            assert len(frames) == 1 and [s.text for s in frames[0].spans] == ["", ""]  # only the start
            assert done.result.prompt_tokens == sum(r.prompt_tokens for r in alone_results)  # each answer's usage, summed


def test_remote_backend_without_the_key_is_one_line_exit_4(tmp_path, runner):
    path = tmp_path / "f.py"
    path.write_text("x = 1\n")
    with live_server(env={"SHARPEN_API_KEY": "k3y"}) as (url, _):
        import os

        env = {k: v for k, v in os.environ.items() if k != "SHARPEN_API_KEY"}
        out = subprocess.run([sys.executable, "-m", "sharpen.app.cli", str(path), "--apply-edit", "1:5-1:5", "--in-place", "--backend", url],
                             capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
        assert out.returncode == 4 and out.stderr.count("\n") == 1 and "refused the request (401" in out.stderr and "SHARPEN_API_KEY" in out.stderr
        keyed = subprocess.run([sys.executable, "-m", "sharpen.app.cli", str(path), "--apply-edit", "1:5-1:5", "--backend", url],
                               capture_output=True, text=True, cwd=ROOT, env={**env, "SHARPEN_API_KEY": "k3y"}, timeout=120)
        assert keyed.returncode == 0, keyed.stderr
    assert path.read_text() == "x = 1\n"


async def test_a_run_that_fails_mid_stream_ends_with_one_error_event():
    from sharpen.app.serve.app import build_app
    from sharpen.app.serve.common import Server
    from sharpen.core.errors import ModelError
    from sharpen.core.run import ModelInfo, SpanDraft

    class Failing:  # a backend whose run breaks after its first frame (a GPU running out of memory)
        def run(self, request, should_stop, every):
            yield Progress(0, 4, 0.0, (SpanDraft("", ()),))
            raise ModelError("out of GPU memory")

    app = build_app(Server(Failing(), ModelInfo("m", "sharpen", "cpu", "mask", None, 256)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        answer = await client.post("/v1/edits", json={"text": "ab", "spans": [{"start": 1}], "stream": True})
    lines = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
    events = [json.loads(line) for line in lines[:-1]]
    assert answer.status_code == 200 and events[0]["type"] == "frame" and lines[-1] == "[DONE]"
    assert events[-1] == {"type": "error", "error": {"message": "out of GPU memory", "type": "server_error", "code": 500}}


async def test_the_editor_on_a_server_without_drafts_says_so_and_still_edits(server, runner, tmp_path):
    from pilot import wait_for

    from sharpen.app.config import Config
    from sharpen.app.tui.editor_app import SharpenApp
    from sharpen.app.tui.editor_pane import PREVIEW
    from sharpen.app.tui.themes import load_themes

    path = tmp_path / "fizz.py"
    original = PREFIX + "        \n" + SUFFIX
    path.write_text(original)
    config = Config.of(steps=6).layered({"backend": {"backend": server, "backend_protocol": "openai"}})
    app = SharpenApp([path], config, load_themes(None))
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_for(pilot, lambda: app.backend is not None, timeout=60)
        assert app.status.model == "sharpen-embedded (no drafts)"
        assert any("sends no drafts" in str(n.message) for n in app._notifications)
        pane = app.active_pane()
        pane.editor.selection = ((2, 8), (2, 8))
        await pilot.press("alt+i")
        await wait_for(pilot, lambda: pane.phase == PREVIEW, timeout=60)
        await pilot.press("tab")
        at = len(PREFIX) + 8
        # A plain completions request carries no steps: the server's own defaults apply.
        filled = runner.result(EditRequest(original, (Span(at, at, max_tokens=config.editing.infill_tokens),))).result.spans[0].text
        assert pane.editor.buffer_text == original[:at] + filled + original[at:]
