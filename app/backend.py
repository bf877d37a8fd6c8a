"""Where model commands run: a Backend loads (or reaches) a model, describes it, and runs requests.

    backend = backend_for(config)          # local, or a server with --backend URL (app/remote.py)
    info = backend.load()                  # core.run.ModelInfo
    for event in backend.run(request, should_stop, every=1 / 30): ...   # core.run.Progress, then Done

The editor (app/tui/model_runner.py), the headless runner, the server (app/serve/) and the
language server (app/lsp.py) are adapters of this one protocol. The local backend hands every
run to its model's core.run.Runner, the only holder of the model's lock.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable, Iterator, Protocol

from ..core.errors import ModelError
from ..core.request import EditRequest
from ..core.run import ModelInfo
from ..core.settings import ModelRequest


class Backend(Protocol):
    def load(self) -> ModelInfo: ...  # loads (or reaches) the model once; later calls return at once

    def describe(self) -> ModelInfo: ...  # after load

    def run(self, request: EditRequest, should_stop: Callable[[], bool] = lambda: False,
            every: float | None = 0.0) -> Iterator[object]: ...


class LocalBackend:
    """A model in this process: loaded once (`load`), run through its Runner."""

    def __init__(self, request: ModelRequest = ModelRequest(), quiet: bool = True, editor: bool = False, max_waiting: int = 16,
                 batch: int = 1) -> None:
        self.request, self.quiet, self.editor, self.max_waiting = request, quiet, editor, max_waiting
        self.batch = batch  # runs sharing one forward pass per step (core/batch.py); 1: one at a time
        self.runner = None  # core.run.Runner once loaded
        self._loading = threading.Lock()

    @classmethod
    def of(cls, denoiser, max_waiting: int = 16, batch: int = 1) -> "LocalBackend":
        """A backend around a model already loaded (tests, benchmarks, bench/soak.py)."""
        from ..core.run import Runner

        backend = cls(max_waiting=max_waiting, batch=batch)
        backend.runner = Runner(denoiser, max_waiting, batch)
        return backend

    def load(self):
        with self._loading:
            if self.runner is None:
                from ..core.run import Runner
                from ..core.models.load import load_model

                notes = None if self.quiet else (lambda line: sys.stderr.write(line + "\n"))  # a command line's stderr, else the log
                self.runner = Runner(load_model(self.request, notes=notes, editor=self.editor), self.max_waiting, self.batch)
        return self.runner.info

    def describe(self):
        if self.runner is None:
            raise ModelError("the model is not loaded yet")
        return self.runner.info

    def run(self, request: EditRequest, should_stop: Callable[[], bool] = lambda: False, every: float | None = 0.0):
        if self.runner is None:
            self.load()
        return self.runner.run(request, should_stop, every)

    def close(self) -> None:
        pass


def backend_for(config, quiet: bool = True, editor: bool = False) -> Backend:
    """The backend an app.config.Config names: its [backend] server when set, else the local model."""
    if config.remote.backend:
        from .remote import RemoteBackend

        return RemoteBackend.from_config(config.remote)
    return LocalBackend(config.model, quiet=quiet, editor=editor)
