"""The editor's model: loading it in a worker thread, what the status bar and toasts say when it
loads or fails, and with --backend the reconnect to a server that is not up yet (tried again
less and less often, app.remote.Backoff, keeping one RemoteBackend across tries).

Moved out of editor_app.py: the model's lifecycle is one responsibility apart from buffers,
keys and the palette. The app keeps its Textual message handlers and hands each message here.
"""
from __future__ import annotations

from functools import partial

from .messages import ModelFailed, ModelLoaded
from .model_runner import load_model


class ModelLink:
    """One per app: starts the model's load and reacts to its outcome on the app's status bar."""

    def __init__(self, app) -> None:
        self.app = app  # the SharpenApp: its config, session, status bar, timers and workers
        self.reconnect = None  # with --backend: (its RemoteBackend, app.remote.Backoff), kept across tries

    def start(self) -> None:
        app = self.app
        if app.session.model_error is None:  # a retry keeps saying why it retries
            app.status.model = "loading model…"
        remote = {}
        if app.config.remote.backend:  # --backend URL: every model command runs on that server
            from ..remote import Backoff, RemoteBackend

            if self.reconnect is None:
                self.reconnect = (RemoteBackend.from_config(app.config.remote), Backoff(most=10.0))
            remote["backend"] = self.reconnect[0]
        app.run_worker(partial(load_model, app.config.model, app.post_message, **remote), thread=True, group="model", exit_on_error=False)

    def loaded(self, message: ModelLoaded) -> None:
        app = self.app
        came_back = app.session.model_error is not None  # a server that was not reachable before
        app.session.backend, app.session.model_error = message.backend, None
        if app.session.queued is not None:  # a model command asked for while it loaded
            pane, action = app.session.queued
            app.session.queued = None
            if pane.is_mounted:
                app.call_later(getattr(pane, f"action_{action}"))
        info = message.backend.describe()
        app.status.model, app.status.model_failed, app.status.device = info.name, False, message.device
        if not info.drafts:  # a plain completions server: no steps to draw, the text arrives whole
            app.status.model = f"{info.name} (no drafts)"
            app.notify("this server sends no drafts: each result arrives whole", title=info.name, timeout=6)
        if came_back:
            app.notify(f"{info.name} answers again: model commands work", title="Server reachable", timeout=6)

    def failed(self, message: ModelFailed) -> None:
        app = self.app
        first = app.session.model_error is None
        app.session.model_error = message.error
        app.status.model, app.status.model_failed, app.status.device = "model unavailable", True, ""
        if self.reconnect is not None:  # a server may come up later: try again, less and less often
            app.status.model = "server unavailable (retrying)"
            app.set_timer(self.reconnect[1].failed(), self.start)
        if first:
            app.notify(message.error, title="Model unavailable; editing still works", severity="error", timeout=10)
