"""Where model commands run: a Backend loads (or reaches) a model, describes it, and runs requests.

    backend = backend_for(config)          # local, or a server with --backend URL (app/remote.py)
    info = backend.load()                  # core.run.ModelInfo
    for event in backend.run(request, should_stop, every=1 / 30): ...   # core.run.Progress, then Done

The editor (app/tui/model_runner.py), the headless runner, the server (app/serve/) and the
language server (app/lsp.py) are adapters of this one protocol. The local backend hands every
run to its model's core.run.Runner, the only holder of the model's lock.

A server also asks a backend what it answers with beside the run (count_tokens, chat_text,
load_report, waiting, batching): `served(backend)` gives those to a backend that only runs
requests (app/remote.py's: a remote model's tokens are estimated, its chat is refused), so
`sharpen serve` serves any backend, another server included.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable, Iterator, Protocol

from ..core.errors import ModelError, UsageError
from ..core.events import ModelInfo
from ..core.request import EditRequest
from ..core.settings import ModelRequest

# Characters per token where the tokenizer is not here (a remote model): code runs about 3-4
# characters a token in the released vocabularies; 4 errs toward counting fewer.
CHARS_PER_TOKEN = 4


class Backend(Protocol):
    def load(self) -> ModelInfo: ...  # loads (or reaches) the model once; later calls return at once

    def describe(self) -> ModelInfo: ...  # after load

    def run(self, request: EditRequest, should_stop: Callable[[], bool] = lambda: False,
            every: float | None = 0.0) -> Iterator[object]: ...

    # -- what a server answers with beside the run (app/serve) --------------------------------

    def count_tokens(self, text: str, at_most: int | None = None) -> int: ...  # above at_most: any larger count (a cheap bound may stop early)

    def chat_text(self, messages: list[dict]) -> str: ...  # the chat through the model's own template (UsageError: it has none)

    def load_report(self) -> str: ...  # one line for a server's start: how concurrent runs share the model

    def waiting(self) -> int: ...  # runs in line, the running ones included

    def batching(self) -> tuple | None: ...  # (packed passes, runs' passes they held, ...: core.batch.BatchCounts) when runs share passes

    def reads(self, sampling) -> frozenset[str] | None: ...  # the Sampling fields the model's loop reads (None: the backend decides)


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

    def count_tokens(self, text: str, at_most: int | None = None) -> int:
        tokenizer = self._loaded().denoiser.tokenizer
        fewest = tokenizer.fewest_tokens(text)  # a long text is never encoded whole to learn it is too long
        if at_most is not None and fewest > at_most:
            return fewest
        return len(tokenizer.encode(text))

    def chat_text(self, messages: list[dict]) -> str:
        return self._loaded().chat_text(messages)

    def load_report(self) -> str:
        """How concurrent requests share the model: a server's users should know whether their runs
        pack into one pass or queue (core.batch.batchable says which models pack)."""
        runner = self._loaded()
        if runner.batcher is not None:  # compiled: packs on bucketed shapes, a CUDA graph each (core/models/compiled_pack.py)
            compiled = ", compiled per batch bucket" if runner.batcher.compiled is not None else ""
            return f"up to {runner.batch} runs share each forward pass{compiled}"
        if runner.batch == 1:
            return "one run at a time (--max-batch 1)"
        return "one run at a time: this model's runs do not pack (core.batch.batchable)"

    def waiting(self) -> int:
        return self.runner.waiting if self.runner is not None else 0

    def batching(self) -> tuple | None:
        batcher = self.runner.batcher if self.runner is not None else None
        return batcher.counts() if batcher is not None else None

    def reads(self, sampling) -> frozenset[str] | None:
        from ..core.loops import kind_of

        denoiser = self._loaded().denoiser
        return kind_of(denoiser).reads(denoiser, sampling)

    def _loaded(self):
        if self.runner is None:
            self.load()
        return self.runner


class Served:
    """A backend that only runs requests (load, describe, run: app/remote.py's), with what a server
    also asks of one: tokens estimated from characters, no chat template here, no queue seen."""

    def __init__(self, backend) -> None:
        self.backend = backend

    def load(self) -> ModelInfo:
        return self.backend.load()

    def describe(self) -> ModelInfo:
        return self.backend.describe()

    def run(self, request: EditRequest, should_stop: Callable[[], bool] = lambda: False, every: float | None = 0.0):
        return self.backend.run(request, should_stop, every)

    def close(self) -> None:
        getattr(self.backend, "close", lambda: None)()

    def count_tokens(self, text: str, at_most: int | None = None) -> int:
        return -(-len(text) // CHARS_PER_TOKEN)

    def chat_text(self, messages: list[dict]) -> str:
        raise UsageError(f"the model {self.describe().name} renders its chat on the server this one reaches; "
                         "send the chat there, or use a completion or infill endpoint here")

    def load_report(self) -> str:
        return f"runs go to {getattr(self.backend, 'url', 'the backend')}, which shares its model as it does"

    def waiting(self) -> int:
        return 0

    def batching(self) -> tuple | None:
        return None

    def reads(self, sampling) -> frozenset[str] | None:
        return None  # the server it reaches judges the fields


SERVER_NEEDS = ("count_tokens", "chat_text", "load_report", "waiting", "batching", "reads")


def served(backend) -> Backend:
    """`backend` with everything a server asks of one: itself when it has it all, else Served."""
    return backend if all(callable(getattr(backend, name, None)) for name in SERVER_NEEDS) else Served(backend)


def backend_for(config, quiet: bool = True, editor: bool = False) -> Backend:
    """The backend an app.config.Config names: its [backend] server when set, else the local model."""
    if config.remote.backend:
        from .remote import RemoteBackend

        return RemoteBackend.from_config(config.remote)
    return LocalBackend(config.model, quiet=quiet, editor=editor)
