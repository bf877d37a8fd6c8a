"""`sharpen lsp`: a language server on stdio that answers LSP 3.18 textDocument/inlineCompletion.

    sharpen lsp [--model M | --backend URL] [--steps N ...]

Editors with an inline-completion client (Neovim 0.12's vim.lsp.inline_completion, VS Code
through a small extension, Emacs lsp-bridge) start it and ask for a completion at the cursor;
the answer is an infill at that point from the same Backend the editor uses (a local model's
core.run.Runner, or a server with --backend). $/cancelRequest stops the run at its next step.
Built on pygls (the Python LSP library the Open Law Library maintains), whose client the tests
drive it with; app/lsp_protocol.py reads the frames and gives the answers pygls leaves out (parse
errors, bounded frames, not initialized, exit codes). stdout carries only the protocol; logs go
to stderr. A --backend server that is not up yet is tried again on later requests (Completer).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import math
import sys
import threading

from ..core.errors import SharpenError, UsageError
from ..core.request import EditRequest
from ..core.settings import Editing, ModelRequest, Sampling
from ..core.spans import Span

log = logging.getLogger(__name__)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    from .config import Remote
    from .flags import add_settings

    parser = _Parser(prog="sharpen lsp", description="A language server on stdio answering textDocument/inlineCompletion with infills.")
    parser.add_argument("--config", metavar="PATH", help="config file whose [model], [sampling], [edit] and [backend] tables apply")
    add_settings(parser, ModelRequest, "model")
    add_settings(parser, Sampling, "sampling")
    add_settings(parser, Editing, "edit settings (infill_tokens in the config file: slots per completion)")
    add_settings(parser, Remote, "backend (the key only from $SHARPEN_API_KEY)")
    return parser


class Completer:
    """The model side of the server: loads the backend once (in the background), runs infills.
    A server that was not up (or not reachable) when the language server started is tried again
    on a later request, with backoff (app/remote.Backoff); `came_back` says when it answered."""

    def __init__(self, backend, sampling: Sampling, editing: Editing) -> None:
        from .remote import Backoff

        self.backend, self.sampling, self.editing = backend, sampling, editing
        self.ready = threading.Event()
        self.error: str | None = None
        self.retries = getattr(backend, "retry_load", False)  # a local model that failed to load fails again
        self.backoff = Backoff()
        self.came_back = False  # loaded after a failure, not yet told to the client
        self._loading = threading.Lock()

    def load(self, retrying: bool = False) -> None:
        with self._loading:
            if retrying and (self.error is None or not self.backoff.due()):  # another request tried meanwhile
                return
            failed_before = self.error is not None
            try:
                self.backend.load()
                self.error = None
            except SharpenError as exc:
                self.error = str(exc)
            except Exception as exc:  # the server stays up and says why in each answer
                log.exception("loading the model failed")
                self.error = f"{type(exc).__name__}: {exc}"
            if self.error is None:
                self.backoff.succeeded()
                self.came_back = self.came_back or failed_before
            else:
                self.backoff.failed()
        self.ready.set()

    def complete(self, text: str, offset: int, stop: threading.Event) -> str:
        """The infill at `offset` (blocking; returns "" when stopped)."""
        from ..core.run import Done

        self.ready.wait()
        if self.error and self.retries and self.backoff.due():
            self.load(retrying=True)
        if self.error:
            again = f"; tried again on a request from {math.ceil(self.backoff.seconds_left())} s on" if self.retries else ""
            raise UsageError(f"the model is unavailable: {self.error}{again}")
        request = EditRequest(text, (Span(offset, offset, max_tokens=self.editing.infill_tokens),), self.sampling, self.editing)
        for event in self.backend.run(request, stop.is_set, every=None):
            if isinstance(event, Done):
                return event.result.spans[0].text
        return ""


def build_server(completer: Completer):
    from importlib.metadata import PackageNotFoundError, version

    from urllib.parse import unquote

    from lsprotocol import types as lsp
    from pygls.lsp.server import LanguageServer

    from .lsp_protocol import answering_protocol

    try:
        release = version("sharpen")
    except PackageNotFoundError:
        release = "0"
    server = LanguageServer("sharpen", release, protocol_cls=answering_protocol())

    @server.feature(lsp.TEXT_DOCUMENT_INLINE_COMPLETION, lsp.InlineCompletionOptions())
    async def inline_completion(ls: LanguageServer, params: lsp.InlineCompletionParams):
        # Only documents the client opened: pygls would read any other URI from disk (a missing
        # file answered a FileNotFoundError with its traceback; a FIFO would block the server).
        document = ls.workspace.text_documents.get(unquote(params.text_document.uri))
        if document is None:
            ls.window_log_message(lsp.LogMessageParams(lsp.MessageType.Warning, f"sharpen: {params.text_document.uri} is not open"))
            return lsp.InlineCompletionList(items=[])
        text = document.source
        offset = document.offset_at_position(params.position)  # the client's UTF-16 columns, as characters
        # A position past the end is clamped to it (pygls): the answer's range is where the text goes.
        here = document.client_position_at_offset(offset) if text else lsp.Position(0, 0)
        where, lead = lsp.Range(here, here), ""
        chosen = params.context.selected_completion_info if params.context else None
        if chosen is not None:
            # LSP 3.18: with an item selected in the completion menu, an inline completion must
            # extend that item's text over its range, or the client does not show it. So the
            # model fills after the item's text, as if it were typed, and the answer starts with it.
            start, end = sorted((document.offset_at_position(chosen.range.start), document.offset_at_position(chosen.range.end)))
            text, offset, lead = text[:start] + chosen.text + text[end:], start + len(chosen.text), chosen.text
            where = lsp.Range(document.client_position_at_offset(start), document.client_position_at_offset(end))
        stop = threading.Event()
        try:
            filled = await asyncio.to_thread(completer.complete, text, offset, stop)
        except asyncio.CancelledError:  # $/cancelRequest (or the client went away): stop at the next step
            stop.set()
            raise
        except SharpenError as exc:
            ls.window_log_message(lsp.LogMessageParams(lsp.MessageType.Warning, f"sharpen: {exc}"))
            return None
        finally:
            if completer.came_back:  # the editor's status line: the server answers again
                completer.came_back = False
                ls.window_show_message(lsp.ShowMessageParams(lsp.MessageType.Info, f"sharpen: {completer.backend.describe().name} is reachable again"))
        if not filled:
            return lsp.InlineCompletionList(items=[])
        return lsp.InlineCompletionList(items=[lsp.InlineCompletionItem(insert_text=lead + filled, range=where)])

    from .lsp_next_edit import register as register_next_edit  # textDocument/copilotInlineEdit (app/lsp_next_edit.py)

    register_next_edit(server, completer)
    return server


def main(argv: list[str]) -> int:
    from .backend import backend_for
    from .flags import config_from

    args = build_parser().parse_args(argv)
    config = config_from(args)  # the one argparse-to-settings step of every command line
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="sharpen lsp: %(message)s")
    completer = Completer(backend_for(config, quiet=True), config.sampling, config.editing)
    threading.Thread(target=completer.load, daemon=True, name="sharpen-load").start()
    from .lsp_protocol import serve_stdio

    return serve_stdio(build_server(completer))
