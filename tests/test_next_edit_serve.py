"""Next edit over HTTP (app/serve/next_edit.py) with the real clients' request bodies: Zed's
Mercury request and cursortab.nvim's, on /v1/edit/completions; cursortab's Zeta 2 and Sweep
bodies on /v1/completions, answered in their own formats; a plain prompt still goes to the
ordinary completion. The model is the scripted one (tests/next_edit_scripted.py)."""
from __future__ import annotations

import asyncio
import json

import re

import httpx
import pytest
from next_edit_scripted import ScriptedBackend, renamer
from test_next_edit_formats import MERCURY, SWEEP, TEXT, ZETA2

EXPECTED = TEXT.replace("#[derive(Debug)]", "#[derive(Debug, Serialize)]")


def _derive(text: str, span) -> str:
    return text.replace("#[derive(Debug)]", "#[derive(Debug, Serialize)]")


def _app(backend):
    from sharpen.app.serve.app import build_app
    from sharpen.app.serve.common import Server

    return build_app(Server(backend, backend.describe()))


async def _post(backend, path: str, body: dict) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app(backend)), base_url="http://test") as client:
        return await client.post(path, json=body, timeout=60)


# Zed's crates/edit_prediction/src/mercury.rs: open_ai::Request with the prompt in one user message;
# crates/open_ai leaves out the empty `stop` and `tools` and every None field.
def zed_mercury_body(prompt: str) -> dict:
    return {"model": "mercury-coder", "messages": [{"role": "user", "content": prompt}], "stream": False}


# cursortab.nvim's recorded Mercury request (server/eval/scenarios/*/mercuryapi.ndjson).
def cursortab_mercury_body(prompt: str) -> dict:
    return {"model": "mercury-edit", "messages": [{"role": "user", "content": prompt}], "stream": False}


@pytest.mark.parametrize("body", [zed_mercury_body, cursortab_mercury_body])
async def test_mercury_edit_completions_answers_the_rewritten_region_fenced(body):
    backend = ScriptedBackend(_derive)
    answer = await _post(backend, "/v1/edit/completions", body(MERCURY))
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert data["object"] == "chat.completion"
    assert data["choices"][0]["message"]["content"] == "```\n" + EXPECTED + "```"  # what Zed strips and diffs
    edit = backend.requests[-1]  # the run (a draft from the history is verified by a pass before it)
    assert edit.text == TEXT and [s.mode for s in edit.spans] == ["rewrite"]


# mercury.rs build_prompt: each section's content then "\n" then its closing tag (push_delimited), no
# blank lines; the editable region (whole lines, without the last newline) inside the file's text.
ZED_MERCURY = ("<|recently_viewed_code_snippets|>\n\n<|/recently_viewed_code_snippets|>\n<|current_file_content|>\n"
               "current_file_path: shapes.py\n<|code_to_edit|>\ndef area(w<|cursor|>, height):\n    return width * height\n"
               "<|/code_to_edit|>\n\n\nprint(area(2, 3))\n\n<|/current_file_content|>\n<|edit_diff_history|>\n"
               "--- a/shapes.py\n+++ b/shapes.py\n@@ -1,2 +1,2 @@\n-def area(width, height):\n+def area(w, height):\n"
               "     return width * height\n\n<|/edit_diff_history|>\n")


def zed_mercury_window(content: str) -> str | None:
    """mercury.rs: strip a leading "```\\n" and a trailing "\\n```"; "None" is no prediction, else the
    text is diffed against the editable region."""
    content = content.removeprefix("```\n").removesuffix("\n```")
    return None if content == "None" else content


async def test_zeds_mercury_request_is_answered_as_zed_reads_it():
    answer = await _post(ScriptedBackend(renamer("width", "w")), "/v1/edit/completions", zed_mercury_body(ZED_MERCURY))
    data = answer.json()  # open_ai::Response: id, object, created, model, choices[].message + finish_reason, usage
    assert {"id", "object", "created", "model", "choices", "usage"} <= set(data) and data["choices"][0]["finish_reason"] == "stop"
    assert zed_mercury_window(data["choices"][0]["message"]["content"]) == RENAMED[:-1]  # the region as Zed holds it
    quiet = await _post(ScriptedBackend(lambda t, s: t), "/v1/edit/completions", zed_mercury_body(ZED_MERCURY))
    assert zed_mercury_window(quiet.json()["choices"][0]["message"]["content"]) is None


async def test_mercury_no_prediction_is_None():
    answer = await _post(ScriptedBackend(lambda t, s: t), "/v1/edit/completions", cursortab_mercury_body(MERCURY))
    assert answer.json()["choices"][0]["message"]["content"] == "None"


async def test_mercury_diffusing_streams_whole_drafts_then_the_answer():
    body = {**cursortab_mercury_body(MERCURY), "stream": True, "diffusing": True}
    answer = await _post(ScriptedBackend(_derive, steps=4), "/v1/edit/completions", body)
    events = [line[6:] for line in answer.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) == 5 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["content"] == "None"  # step 0: the draft is still the old text
    assert chunks[-1]["choices"][0]["delta"]["content"] == "```\n" + EXPECTED + "```" and chunks[-1]["choices"][0]["finish_reason"] == "stop"


# cursortab.nvim's recorded zeta-2 and sweep-next-edit bodies (/v1/completions).
ZETA2_BODY = {"model": "zeta-2", "prompt": ZETA2, "temperature": 0, "max_tokens": 2048,
              "stop": [">>>>>>> UPDATED\n", ">>>>>>> UPDATED"], "n": 1, "echo": False, "stream": False}
SWEEP_BODY = {"model": "sweep-next-edit-1.5B", "prompt": SWEEP, "temperature": 0, "max_tokens": 2048,
              "stop": ["<|file_sep|>", "<|endoftext|>"], "n": 1, "echo": False, "stream": False}


async def test_a_zeta2_prompt_on_completions_is_answered_as_zeta2():
    answer = await _post(ScriptedBackend(_derive), "/v1/completions", ZETA2_BODY)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["text"] == EXPECTED  # the client's stop cut >>>>>>> UPDATED
    quiet = await _post(ScriptedBackend(lambda t, s: t), "/v1/completions", ZETA2_BODY)
    assert quiet.json()["choices"][0]["text"] == ""  # cursortab's zeta2 provider: an empty answer is no completion


async def test_a_sweep_prompt_is_answered_after_its_prefill():
    # An edit below the prefilled lines: `MissingKey` renamed.
    backend = ScriptedBackend(lambda t, s: t.replace("MissingKey", "AbsentKey"))
    answer = await _post(backend, "/v1/completions", SWEEP_BODY)
    assert answer.json()["choices"][0]["text"] == TEXT.replace("MissingKey", "AbsentKey")[len("#[derive(Debug)]\n"):]


# cursortab.nvim's recorded "zeta" (Zeta 1) request and answer (server/eval/scenarios/02-js-greet-return/zeta.ndjson).
CURSORTAB_ZETA1_BODY = {
    "model": "zeta", "temperature": 0, "max_tokens": 2048, "stop": ["\n<|editable_region_end|>"], "n": 1, "echo": False, "stream": False,
    "prompt": ("### Instruction:\nYou are a code completion assistant and your task is to analyze user edits and then rewrite an "
               "excerpt that the user provides, suggesting the appropriate edits within the excerpt, taking into account the "
               "cursor location.\n\n### User Edits:\n\n\n\n### User Excerpt:\n\n```greet.js\n<|start_of_file|>\n"
               "<|editable_region_start|>\nfunction greet(name) {\n  return \"hello\"<|user_cursor_is_here|>;\n}\n"
               "<|editable_region_end|>\n```\n\n### Response:\n")}


async def test_cursortabs_zeta1_request_gets_the_answer_its_recorded_model_gave():
    backend = ScriptedBackend(lambda text, span: text.replace('"hello"', '"hello " + name'))
    answer = await _post(backend, "/v1/completions", CURSORTAB_ZETA1_BODY)
    assert answer.json()["choices"][0]["text"] == '<|editable_region_start|>\nfunction greet(name) {\n  return "hello " + name;\n}'


async def test_other_prompts_still_get_the_ordinary_completion():
    backend = ScriptedBackend(lambda t, s: "filled")
    answer = await _post(backend, "/v1/completions", {"prompt": "def f():\n    return", "max_tokens": 4})
    assert answer.status_code == 200 and answer.json()["choices"][0]["text"] == "filled"
    edit = backend.requests[-1]  # the run (a draft from the history is verified by a pass before it)
    assert [s.mode for s in edit.spans] == ["infill"]


async def test_a_malformed_mercury_prompt_is_one_line_400():
    answer = await _post(ScriptedBackend(_derive), "/v1/edit/completions", cursortab_mercury_body("no tags here"))
    assert answer.status_code == 400 and "mercury prompt" in answer.json()["error"]["message"]


# -- Zed's OpenAI-compatible edit-prediction provider, on a running server ----------------------
# Read from zed-industries/zed (crates/edit_prediction/src/open_ai_compatible.rs
# send_custom_server_request, zeta.rs, fim.rs, sweep_prompt.rs; crates/zeta_prompt): Zed POSTs to
# its `api_url` as written, with Content-Type application/json and the body RawCompletionRequest
# serializes: model, prompt, max_tokens, stop (temperature and environment are None, so left out).
# max_tokens is max_output_tokens (256 by default) times 4 for Zeta. It reads
# RawCompletionResponse (id, object, created, model, choices[].text + finish_reason, usage: all
# required) and takes choices[0].text.

SHAPES_AFTER = "\n\nprint(area(2, 3))\n"
SHAPES_HISTORY = ("<filename>edit_history\n--- a/shapes.py\n+++ b/shapes.py\n@@ -1,2 +1,2 @@\n-def area(width, height):\n"
                  "+def area(w, height):\n     return width * height\n\n")
SHAPES_REGION = "def area(w, height):\n    return width * height\n"
RENAMED = SHAPES_REGION.replace("width *", "w *")
# zeta_prompt's seed_coder (V0211SeedCoder, "Zeta 2") and multi_region (V0318SeedMultiRegions,
# "Zeta 2.1"): suffix first, then the edit history, then the file with the editable region.
ZED_ZETA2 = ("<[fim-suffix]>" + SHAPES_AFTER + "<[fim-prefix]>" + SHAPES_HISTORY + "<filename>shapes.py\n<<<<<<< CURRENT\n"
             "def area(w<|user_cursor|>, height):\n    return width * height\n=======\n<[fim-middle]>")
ZED_ZETA21 = ("<[fim-suffix]>" + SHAPES_AFTER + "<[fim-prefix]>" + SHAPES_HISTORY + "<filename>shapes.py\n<|marker_1|>"
              "def area(w<|user_cursor|>, height):\n    return width * height\n<|marker_2|>\n<[fim-middle]>")
END_OF_SENTENCE = "<[end▁of▁sentence]>"
# zeta_prompt's zeta1 (`"prompt_format": "zeta"`): the instruction, the edits as ```diff blocks, the
# excerpt with its editable region (a region that ends at a line's end, as Zed's ranges do).
ZED_ZETA1 = ("### Instruction:\nYou are a code completion assistant and your task is to analyze user edits and then rewrite an "
             "excerpt that the user provides, suggesting the appropriate edits within the excerpt, taking into account the "
             "cursor location.\n\n### User Edits:\n\nUser edited shapes.py:\n```diff\n@@ -1,2 +1,2 @@\n-def area(width, height):\n"
             "+def area(w, height):\n     return width * height\n\n```\n\n### User Excerpt:\n\n```shapes.py\n<|start_of_file|>\n"
             "<|editable_region_start|>\ndef area(w<|user_cursor_is_here|>, height):\n    return width * height\n"
             "<|editable_region_end|>\n" + SHAPES_AFTER + "\n```\n\n### Response:\n")  # the region's own last newline follows the marker
ZETA1_END = "<|editable_region_end|>"


def zed_body(model: str, prompt: str, max_tokens: int, stop: list) -> dict:
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stop": stop}


def zed_post(url: str, body: dict) -> str:
    """What Zed's client does with the answer: fail on a non-2xx, parse RawCompletionResponse, take choices[0].text."""
    answer = httpx.post(url + "/v1/completions", content=json.dumps(body), headers={"Content-Type": "application/json"}, timeout=120)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert isinstance(data["id"], str) and isinstance(data["object"], str) and isinstance(data["created"], int)
    assert isinstance(data["model"], str) and {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(data["usage"])
    assert all("text" in c and "finish_reason" in c for c in data["choices"])
    return data["choices"][0]["text"] if data["choices"] else ""


def zed_zeta2_window(text: str) -> str | None:
    """zeta.rs: an empty answer is no prediction; zeta_prompt strips V0211SeedCoder's end marker and
    takes the rest as the new editable region (there is no NO_EDITS for this format)."""
    return None if text == "" else text.removesuffix(">>>>>>> UPDATED\n").replace("<|user_cursor|>", "")


def zed_zeta1_window(text: str) -> str:
    """zeta_prompt's clean_zeta1_model_output (after the start marker and its newline, up to the end
    marker less the newline before it), then zeta.rs gives the region a last newline."""
    start, end = text.find("<|editable_region_start|>"), text.find(ZETA1_END)
    start = 0 if start == -1 else start + len("<|editable_region_start|>") + text[start:].startswith("<|editable_region_start|>\n")
    end = len(text) if end == -1 else end - (end > 0 and text[end - 1] == "\n")
    region = text[start:end].replace("<|user_cursor_is_here|>", "")
    return region if not region or region.endswith("\n") else region + "\n"


def zed_zeta21_window(text: str, old: str) -> str | None:
    """multi_region::apply_marker_span_v0318: the text between consecutive markers replaces blocks
    first..last; the same marker twice is the old region. Zed warns on a skipped marker: none here."""
    from sharpen.core.next_edit.formats.zeta import marker_offsets

    if text == "":
        return None
    text = text.removesuffix(END_OF_SENTENCE)
    tags = list(re.finditer(r"<\|marker_(\d+)\|>", text))
    numbers = [int(t.group(1)) for t in tags]
    assert len(numbers) >= 2
    if numbers[0] == numbers[-1]:
        return old
    assert numbers == list(range(numbers[0], numbers[-1] + 1))
    offsets = marker_offsets(old)
    content = "".join(text[a.end():b.start()] for a, b in zip(tags, tags[1:]))
    return old[:offsets[numbers[0] - 1]] + content.replace("<|user_cursor|>", "") + old[offsets[numbers[-1] - 1]:]


def zed_sweep_window(text: str, current: str) -> str | None:
    """sweep_prompt.rs: cut at <|file_sep|> or </s>; empty or the current window is no prediction,
    else the new window, diffed byte for byte against the current one."""
    for stop in ("<|file_sep|>", "</s>"):
        text = text.split(stop)[0]
    return None if text in ("", current) else text


@pytest.fixture
def zed_server():
    from serving import in_process_server

    def serve(rewrite):
        backend = ScriptedBackend(rewrite)
        return backend, in_process_server(_app(backend))

    return serve


@pytest.mark.parametrize(("model", "prompt", "stop", "window"), [
    ("zeta", ZED_ZETA1, [ZETA1_END, ZETA1_END + "\n", ZETA1_END + "\n\n", ZETA1_END + "\n\n\n"], zed_zeta1_window),
    ("zeta2", ZED_ZETA2, [], zed_zeta2_window),  # V0211SeedCoder: stop_tokens_for_format is empty
    ("zeta2.1", ZED_ZETA21, [END_OF_SENTENCE], lambda text: zed_zeta21_window(text, SHAPES_REGION)),
], ids=["zeta1", "zeta2", "zeta2.1"])
def test_zed_zeta_bodies_are_answered_as_zed_parses_them(zed_server, model, prompt, stop, window):
    backend, server = zed_server(renamer("width", "w"))
    with server as url:
        assert window(zed_post(url, zed_body(model, prompt, 1024, stop))) == RENAMED
    edit = backend.requests[0]  # the first run reads the current text (a draft's verification pass; the run after it, the draft)
    assert edit.text == SHAPES_REGION + SHAPES_AFTER
    _, quiet = zed_server(lambda text, span: text)
    with quiet as url:
        text = zed_post(url, zed_body(model, prompt, 1024, stop))
    assert window(text) in (None, SHAPES_REGION)  # no prediction, never a NO_EDITS written into the buffer
    assert "NO_EDITS" not in text


def test_zeta1_builds_zeds_prompt_byte_for_byte_and_reads_it_back():
    from sharpen.core.next_edit.formats import detect_format, format_of
    from sharpen.core.next_edit.history import EditEvent
    from sharpen.core.next_edit.request import NextEditRequest, Window

    text = SHAPES_REGION + SHAPES_AFTER
    event = EditEvent("shapes.py", "@@ -1,2 +1,2 @@\n-def area(width, height):\n+def area(w, height):\n     return width * height\n")
    request = NextEditRequest("shapes.py", text, len("def area(w"), (Window(0, len(SHAPES_REGION) - 1),), (event,))
    zeta1 = format_of("zeta1")
    assert zeta1.build(request) == ZED_ZETA1 and detect_format(ZED_ZETA1) == "zeta1"
    back = zeta1.parse_prompt(ZED_ZETA1).request()
    assert (back.text, back.cursor, back.windows, back.history) == (text, request.cursor, request.windows, (event,))
    answer = zeta1.render_answer(SHAPES_REGION[:-1], RENAMED[:-1])
    assert zed_zeta1_window(answer) == RENAMED and zeta1.parse_answer(answer, SHAPES_REGION[:-1]) == RENAMED[:-1]


@pytest.mark.parametrize("stop", [["<|file_sep|>", "</s>"], []])
def test_zed_sweep_body_is_answered_with_the_whole_new_window(zed_server, stop):
    from test_next_edit_formats import ZED_SWEEP, ZED_WINDOW

    backend, server = zed_server(renamer("line 11", "line eleven"))
    with server as url:
        text = zed_post(url, zed_body("sweep-next-edit-1.5b", ZED_SWEEP, 256, stop))
    assert zed_sweep_window(text, ZED_WINDOW) == ZED_WINDOW.replace("line 11", "line eleven")
    edit = backend.requests[-1]  # the run (a draft from the history is verified by a pass before it)
    assert edit.text == ZED_WINDOW  # the window alone: Zed sends no whole file
    _, quiet = zed_server(lambda text, span: text)
    with quiet as url:
        assert zed_sweep_window(zed_post(url, zed_body("sweep-next-edit-1.5b", ZED_SWEEP, 256, stop)), ZED_WINDOW) is None


# fim.rs format_fim_prompt and its stop list, for every prompt_format that is not Zeta or Sweep.
ZED_FIM_STOP = ["<|endoftext|>", "<|file_separator|>", "<|fim_pad|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<PRE>", "<SUF>", "<MID>", "[PREFIX]", "[SUFFIX]"]
FIM_PREFIX, FIM_SUFFIX = "def area(w, height):\n    return ", "\n\nprint(area(2, 3))\n"
ZED_FIM = {
    "code_llama": f"<PRE> {FIM_PREFIX} <SUF>{FIM_SUFFIX} <MID>",
    "star_coder": f"<fim_prefix>{FIM_PREFIX}<fim_suffix>{FIM_SUFFIX}<fim_middle>",
    "deepseek_coder": f"<\uff5cfim\u2581begin\uff5c>{FIM_PREFIX}<\uff5cfim\u2581hole\uff5c>{FIM_SUFFIX}<\uff5cfim\u2581end\uff5c>",
    "qwen": f"<|fim_prefix|>{FIM_PREFIX}<|fim_suffix|>{FIM_SUFFIX}<|fim_middle|>",  # code_gemma too
    "codestral": f"[SUFFIX]{FIM_SUFFIX}[PREFIX]{FIM_PREFIX}",
    "glm": f"<|code_prefix|>{FIM_PREFIX}<|code_suffix|>{FIM_SUFFIX}<|code_middle|>",
}


@pytest.mark.parametrize("name", sorted(ZED_FIM))
def test_zed_fim_bodies_fill_the_middle_at_the_cursor(zed_server, name):
    backend, server = zed_server(lambda text, span: "w * height")
    with server as url:
        text = zed_post(url, zed_body("local", ZED_FIM[name], 256, ZED_FIM_STOP))
    for token in ZED_FIM_STOP:  # fim.rs clean_fim_completion, then the text goes in at the cursor
        text = text.split(token)[0]
    assert text == "w * height"
    edit = backend.requests[-1]  # the run (a draft from the history is verified by a pass before it)
    assert edit.text == FIM_PREFIX + FIM_SUFFIX and [s.mode for s in edit.spans] == ["infill"]


# -- `sharpen lsp`: textDocument/copilotInlineEdit through a JSON-RPC client over stdio ---------

SHAPES = "def area(width, height):\n    return width * height\n"
SCRIPTED_LSP = """
import sys
sys.path.insert(0, {tests!r})
from next_edit_scripted import ScriptedBackend, renamer
from sharpen.app.lsp import Completer, build_server
from sharpen.core.settings import Editing, Sampling
rename = renamer("width", "w")
# An instruct model that follows the history it is given: it renames only when the instruction shows the rename.
follow = lambda text, span: rename(text, span) if "+def area(w, height):" in (span.instruction or "") else text
completer = Completer(ScriptedBackend(follow, instruct=True), Sampling(), Editing())
completer.ready.set()
build_server(completer).start_io()
"""


async def _lsp_client(*command: str):
    from lsprotocol import types as lsp
    from pygls.lsp.client import LanguageClient

    from serving import ROOT

    client = LanguageClient("sidekick-like", "1")
    await client.start_io(*command, cwd=str(ROOT))
    await client.initialize_async(lsp.InitializeParams(capabilities=lsp.ClientCapabilities(), process_id=None, root_uri=None))
    client.initialized(lsp.InitializedParams())
    return client


async def _inline_edit(client, line: int, character: int, version: int) -> dict:
    import asyncio

    # The body sidekick.nvim sends (lua/sidekick/nes/init.lua: make_position_params, the buffer's
    # version, context.triggerKind 2); cursortab.nvim sends the same without the context.
    params = {"textDocument": {"uri": "file:///tmp/shapes.py", "version": version}, "position": {"line": line, "character": character},
              "context": {"triggerKind": 2}}
    return await asyncio.wait_for(client.protocol.send_request_async("textDocument/copilotInlineEdit", params), 120)


def _as_dict(value):
    if hasattr(value, "_asdict"):
        return {k: _as_dict(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: _as_dict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_dict(v) for v in value]
    return value


async def test_copilot_inline_edit_follows_the_edit_the_document_just_had():
    import sys
    from pathlib import Path

    from lsprotocol import types as lsp

    client = await _lsp_client(sys.executable, "-c", SCRIPTED_LSP.format(tests=str(Path(__file__).parent)))
    try:
        uri = "file:///tmp/shapes.py"
        client.text_document_did_open(lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(uri, "python", 1, SHAPES)))
        # The user renames the parameter on its definition: `width` -> `w` (line 0, columns 9-14).
        change = lsp.TextDocumentContentChangePartial(range=lsp.Range(lsp.Position(0, 9), lsp.Position(0, 14)), text="w")
        client.text_document_did_change(lsp.DidChangeTextDocumentParams(lsp.VersionedTextDocumentIdentifier(version=2, uri=uri), [change]))
        result = _as_dict(await _inline_edit(client, 0, 10, 2))
        assert result == {"edits": [{
            "range": {"start": {"line": 1, "character": 11}, "end": {"line": 1, "character": 16}}, "text": "w",
            "textDocument": {"uri": uri, "version": 2},
            "command": {"title": "Accept next edit", "command": "sharpen.didAcceptNextEdit", "arguments": result["edits"][0]["command"]["arguments"]}}]}
        accepted = await asyncio.wait_for(client.protocol.send_request_async(
            "workspace/executeCommand", lsp.ExecuteCommandParams("sharpen.didAcceptNextEdit", arguments=result["edits"][0]["command"]["arguments"])), 30)
        assert accepted is None  # the accepted edit's command is known to the server
        not_open = _as_dict(await client.protocol.send_request_async(
            "textDocument/copilotInlineEdit", {"textDocument": {"uri": "file:///tmp/none.py", "version": 1}, "position": {"line": 0, "character": 0}}))
        assert not_open == {"edits": []}
    finally:
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()


async def test_copilot_inline_edit_with_cursortabs_whole_document_sync():
    """cursortab.nvim (server/buffer/buffer.go SendCopilotNESRequest) syncs the buffer before each
    request with one didChange whose range runs from 0:0 to line 2147483647 (INT32_MAX) and whose
    text is the buffer's lines joined by newlines, then asks with make_position_params (UTF-16)
    plus the version: no context."""
    import sys
    from pathlib import Path

    from lsprotocol import types as lsp

    client = await _lsp_client(sys.executable, "-c", SCRIPTED_LSP.format(tests=str(Path(__file__).parent)))
    try:
        uri = "file:///tmp/shapes.py"
        client.text_document_did_open(lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(uri, "python", 1, SHAPES)))
        renamed = SHAPES.replace("def area(width,", "def area(w,")
        whole = lsp.TextDocumentContentChangePartial(range=lsp.Range(lsp.Position(0, 0), lsp.Position(2147483647, 0)),
                                                     text=renamed.removesuffix("\n"))
        client.text_document_did_change(lsp.DidChangeTextDocumentParams(lsp.VersionedTextDocumentIdentifier(version=2, uri=uri), [whole]))
        params = {"textDocument": {"uri": uri, "version": 2}, "position": {"line": 0, "character": 10}}
        result = _as_dict(await asyncio.wait_for(client.protocol.send_request_async("textDocument/copilotInlineEdit", params), 120))
        (edit,) = result["edits"]
        assert (edit["range"], edit["text"], edit["textDocument"]) == (
            {"start": {"line": 1, "character": 11}, "end": {"line": 1, "character": 16}}, "w", {"uri": uri, "version": 2})
    finally:
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()
