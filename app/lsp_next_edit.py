"""`sharpen lsp`'s next edit: textDocument/copilotInlineEdit, the request sidekick.nvim and
cursortab.nvim send to Copilot's language server, answered from sharpen's model.

    params: {textDocument: {uri, version}, position: {line, character}}   (UTF-16 columns)
    result: {edits: [{range, text, textDocument: {uri, version}, command}]}

The server keeps each open document's recent edits (didOpen / didChange, as values in
core.next_edit.history), so a request carries the history the prediction follows; the answer's
hunks are the edits, one change set over the document as the client sent it (their ranges do
not overlap). An empty list is "no edit". $/cancelRequest stops the run at its next step.
`register(server, completer)` adds the handlers to app/lsp.py's server.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from urllib.parse import unquote, urlparse

from ..core.changes import ChangeSet
from ..core.errors import SharpenError, UsageError
from ..core.next_edit.history import EditHistory
from ..core.next_edit.predict import predict_to_end
from ..core.next_edit.request import NextEditRequest

log = logging.getLogger(__name__)

COPILOT_INLINE_EDIT = "textDocument/copilotInlineEdit"
ACCEPT_COMMAND = "sharpen.didAcceptNextEdit"  # the command an accepted edit names (its arguments: the answer's id)


class EditTracker:
    """Each open document's last text, and the edits between texts as one history."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.history = EditHistory()

    def opened(self, uri: str, text: str) -> None:
        self.texts[uri] = text

    def changed(self, uri: str, text: str) -> None:
        old = self.texts.get(uri)
        self.texts[uri] = text
        if old is None or old == text:
            return
        start = 0
        while start < min(len(old), len(text)) and old[start] == text[start]:
            start += 1
        end_old, end_new = len(old), len(text)
        while end_old > start and end_new > start and old[end_old - 1] == text[end_new - 1]:
            end_old, end_new = end_old - 1, end_new - 1
        self.history.record(path_of(uri), old, ChangeSet.of([(start, end_old, text[start:end_new])]))


def path_of(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path).lstrip("/") if parsed.scheme == "file" else uri


def _field(obj, name: str):
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def predict_for(completer, request: NextEditRequest, stop: threading.Event):
    """The prediction on the completer's backend (blocking; None when stopped)."""
    from ..core.errors import Cancelled

    completer.ready.wait()
    if completer.error:
        raise UsageError(f"the model is unavailable: {completer.error}")
    try:
        return predict_to_end(completer.backend, request, should_stop=stop.is_set)
    except Cancelled:
        return None


def register(server, completer) -> EditTracker:
    from lsprotocol import types as lsp

    tracker = EditTracker()

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls, params: lsp.DidOpenTextDocumentParams):
        tracker.opened(params.text_document.uri, params.text_document.text)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls, params: lsp.DidChangeTextDocumentParams):
        document = ls.workspace.text_documents.get(unquote(params.text_document.uri))
        if document is not None:
            tracker.changed(params.text_document.uri, document.source)

    @server.command(ACCEPT_COMMAND)
    def accepted(ls, *args):
        """A client runs an accepted edit's command (sidekick.nvim does): nothing to do, the
        edit arrives as a didChange like any other."""
        return None

    @server.feature(COPILOT_INLINE_EDIT)
    async def inline_edit(ls, params):
        identifier, position = _field(params, "textDocument"), _field(params, "position")
        uri = _field(identifier, "uri") if identifier is not None else None
        line, character = _field(position, "line"), _field(position, "character")
        if not isinstance(uri, str) or not isinstance(line, int) or not isinstance(character, int):
            raise _invalid("copilotInlineEdit needs textDocument.uri and position {line, character}")
        document = ls.workspace.text_documents.get(unquote(uri))
        if document is None:
            ls.window_log_message(lsp.LogMessageParams(lsp.MessageType.Warning, f"sharpen: {uri} is not open"))
            return {"edits": []}
        text = document.source
        offset = document.offset_at_position(lsp.Position(line, character))
        request = NextEditRequest.around(path_of(uri), text, offset, tracker.history.events(),
                                         sampling=completer.sampling, editing=completer.editing)
        stop = threading.Event()
        try:
            done = await asyncio.to_thread(predict_for, completer, request, stop)
        except asyncio.CancelledError:
            stop.set()
            raise
        except SharpenError as exc:
            ls.window_log_message(lsp.LogMessageParams(lsp.MessageType.Warning, f"sharpen: {exc}"))
            return {"edits": []}
        if done is None or done.answer.quiet:
            return {"edits": []}
        answer_id = uuid.uuid4().hex

        def position_of(at: int) -> dict:
            p = document.client_position_at_offset(at)
            return {"line": p.line, "character": p.character}

        version = _field(identifier, "version")
        return {"edits": [{"range": {"start": position_of(h.start), "end": position_of(h.end)}, "text": h.text,
                           "textDocument": {"uri": uri, "version": version if isinstance(version, int) else document.version},
                           "command": {"title": "Accept next edit", "command": ACCEPT_COMMAND, "arguments": [answer_id]}}
                          for h in done.answer.hunks]}

    return tracker


def _invalid(message: str):
    from pygls.exceptions import JsonRpcInvalidParams

    return JsonRpcInvalidParams(message)
