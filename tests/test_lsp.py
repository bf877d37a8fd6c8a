"""`sharpen lsp` driven by pygls' own LanguageClient over stdio, as Neovim 0.12 would drive it."""
from __future__ import annotations

import asyncio
import sys
import time

import pytest
from serving import ROOT

from sharpen.core.request import EditRequest
from sharpen.core.run import Runner
from sharpen.core.settings import Editing, Sampling
from sharpen.core.spans import Span

TEXT = "def fizzbuzz(n):\n    for i in range(1, n + 1):\n        \n    return n\n"
LINE, COLUMN = 2, 8


@pytest.fixture(scope="module")
def runner():
    from sharpen.core.models.load import load_model
    from sharpen.core.settings import ModelRequest

    return Runner(load_model(ModelRequest()))


async def _client(*args: str):
    from lsprotocol import types as lsp
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("sharpen-test", "1")
    await client.start_io(sys.executable, "-m", "sharpen.app.cli", "lsp", *args, cwd=str(ROOT))
    capabilities = lsp.ClientCapabilities(text_document=lsp.TextDocumentClientCapabilities(inline_completion=lsp.InlineCompletionClientCapabilities()))
    result = await client.initialize_async(lsp.InitializeParams(capabilities=capabilities, process_id=None, root_uri=None))
    client.initialized(lsp.InitializedParams())
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem("file:///tmp/fizz.py", "python", 1, TEXT)))
    return client, result


def _params():
    from lsprotocol import types as lsp

    return lsp.InlineCompletionParams(
        context=lsp.InlineCompletionContext(trigger_kind=lsp.InlineCompletionTriggerKind.Invoked),
        text_document=lsp.TextDocumentIdentifier("file:///tmp/fizz.py"), position=lsp.Position(LINE, COLUMN))


async def _stop(client) -> None:
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()


async def test_inline_completion_is_the_local_infill_at_the_cursor(runner):
    client, result = await _client("--steps", "8")
    try:
        assert result.capabilities.inline_completion_provider is not None
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(_params()), 60)
        at = TEXT.index("        \n") + 8
        alone = runner.result(EditRequest(TEXT, (Span(at, at, max_tokens=Editing().infill_tokens),), Sampling(steps=8))).result.spans[0].text
        assert len(answer.items) == 1 and answer.items[0].insert_text == alone
        assert (answer.items[0].range.start.line, answer.items[0].range.start.character) == (LINE, COLUMN)
    finally:
        await _stop(client)


async def test_cancel_request_stops_the_run(tmp_path):
    from lsprotocol import types as lsp

    config = tmp_path / "config.toml"
    config.write_text("[edit]\ninfill_tokens = 128\n")
    # A run of seconds: 8 samples of 128 slots, 128 steps, no cache.
    client, _ = await _client("--config", str(config), "--steps", "128", "--samples", "8", "--cache", "none")
    try:
        started = time.perf_counter()
        await asyncio.wait_for(client.text_document_inline_completion_async(_params()), 120)
        whole = time.perf_counter() - started
        slow = client.protocol.send_request_async(lsp.TEXT_DOCUMENT_INLINE_COMPLETION, _params(), msg_id="slow-1")
        await asyncio.sleep(min(0.5, whole / 4))
        client.protocol.notify(lsp.CANCEL_REQUEST, lsp.CancelParams(id="slow-1"))
        with pytest.raises(Exception):
            await asyncio.wait_for(slow, 30)
        # The model is free again within a step: the next completion takes one run, not the rest of the cancelled one too.
        started = time.perf_counter()
        await asyncio.wait_for(client.text_document_inline_completion_async(_params()), 120)
        assert time.perf_counter() - started < whole * 1.5, (time.perf_counter() - started, whole)
    finally:
        await _stop(client)


async def test_a_document_not_open_is_no_completion_and_a_position_past_the_end_answers_at_the_end(runner, tmp_path):
    from lsprotocol import types as lsp

    client, _ = await _client("--steps", "8")
    try:
        # Not opened by the client, and not on disk: pygls would read the URI from disk and fail with a traceback.
        elsewhere = lsp.InlineCompletionParams(context=_params().context, text_document=lsp.TextDocumentIdentifier((tmp_path / "gone.py").as_uri()),
                                               position=lsp.Position(0, 0))
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(elsewhere), 60)
        assert list(answer.items) == []
        past = lsp.InlineCompletionParams(context=_params().context, text_document=_params().text_document, position=lsp.Position(99, 0))
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(past), 60)
        alone = runner.result(EditRequest(TEXT, (Span(len(TEXT), len(TEXT), max_tokens=Editing().infill_tokens),), Sampling(steps=8))).result.spans[0].text
        assert len(answer.items) == 1 and answer.items[0].insert_text == alone
        end = answer.items[0].range.start
        assert (end.line, end.character) == (TEXT.count("\n"), 0)  # the document's end, not line 99
    finally:
        await _stop(client)


async def test_a_request_whose_params_do_not_read_gets_an_invalid_params_answer(runner):
    """JSON-RPC answers every request: a malformed inlineCompletion gets -32602 at once (pygls
    alone sent nothing, and the client waited for ever), and the server goes on answering."""
    from lsprotocol import types as lsp
    from pygls.exceptions import JsonRpcException

    client, _ = await _client("--steps", "8")
    try:
        typed = client.protocol.get_message_type
        client.protocol.get_message_type = lambda method: None  # send the dict as it is, untyped
        try:
            broken = client.protocol.send_request_async(lsp.TEXT_DOCUMENT_INLINE_COMPLETION, {"textDocument": 5, "position": "here"})
        finally:
            client.protocol.get_message_type = typed
        with pytest.raises(JsonRpcException) as caught:
            await asyncio.wait_for(broken, 30)
        assert caught.value.code == -32602 and "textDocument/inlineCompletion" in caught.value.message
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(_params()), 60)
        assert len(answer.items) == 1
    finally:
        await _stop(client)


async def test_a_completion_menu_selection_is_extended_over_its_range(runner):
    """LSP 3.18: with an item selected in the client's completion menu, the inline completion
    must start with that item's text and replace the item's range (else VS Code shows nothing):
    the model fills after the item's text, as if it had been typed."""
    from lsprotocol import types as lsp

    client, _ = await _client("--steps", "8")
    try:
        # The cursor after "    for i in r" on line 1, the menu offering "range" for "r".
        line = TEXT.split("\n")[1]
        typed = "    for i in r"
        assert line.startswith(typed)
        chosen = lsp.SelectedCompletionInfo(range=lsp.Range(lsp.Position(1, len(typed) - 1), lsp.Position(1, len(typed))), text="range")
        params = lsp.InlineCompletionParams(
            context=lsp.InlineCompletionContext(trigger_kind=lsp.InlineCompletionTriggerKind.Automatic, selected_completion_info=chosen),
            text_document=_params().text_document, position=lsp.Position(1, len(typed)))
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(params), 60)
        start = TEXT.index(typed) + len(typed) - 1
        as_typed = TEXT[:start] + "range" + TEXT[start + 1:]
        at = start + len("range")
        alone = runner.result(EditRequest(as_typed, (Span(at, at, max_tokens=Editing().infill_tokens),), Sampling(steps=8))).result.spans[0].text
        assert len(answer.items) == 1 and answer.items[0].insert_text == "range" + alone
        where = answer.items[0].range
        assert (where.start.line, where.start.character, where.end.line, where.end.character) == (1, len(typed) - 1, 1, len(typed))
    finally:
        await _stop(client)
