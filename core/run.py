"""One runner per loaded model: it owns the model's lock and turns an EditRequest into events.

    runner = Runner(denoiser)
    for event in runner.run(request, should_stop, every=1 / 30):
        if isinstance(event, Progress): draw(event.spans)      # each span's text and slot states
        else: apply(event.result.changes())                     # Done: the result

Events are plain data (core/events.py: no tensors, no token ids): a Progress per denoising step (or coalesced
to `every` seconds) with each span's current draft and the state of every slot (masked, noise,
sharp, end), then one Done with the engine's EditResult. `to_json()` on either is the one
wire and file form: the headless runner's --json, the server's /v1/edits frames and the remote
backend all read and write it, so a preview drawn from a server is the local one.

Only the runner takes the model's lock. Runs wait their turn in arrival order; a run whose
`should_stop` turns true while it waits leaves the line without touching the model, and a
line longer than `max_waiting` refuses new runs at once (Busy): a server answers 503.

With `batch` > 1 and a model whose passes pack (core/batch.py), up to `batch` runs hold the
model at once and share one forward pass per step (continuous batching): a run joins at the
next step boundary when its turn comes, leaves when it ends or stops, and gets exactly what it
would get alone. Other models, and batch 1 (the editor's), run one at a time.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from typing import Callable, Iterator

from .errors import Cancelled, ModelError, UsageError
# The event vocabulary lives in core/events.py (torch-free); re-exported here, where callers found it.
from .events import (EDITED, END, MASKED, NOISE, SHARP, SLOT_STATES, Done, Event, Failed, ModelInfo, Progress,  # noqa: F401
                     Slot, SpanDraft, Stopped)
from .request import EditRequest
from .result import EditResult, SpanResult

log = logging.getLogger(__name__)


class Busy(ModelError):
    """Too many runs already wait for this model (a server answers 503 with Retry-After)."""


class _Ticket:
    """A run's place in line."""

    def __init__(self, shared: bool) -> None:
        self.shared = shared  # it runs in the step batcher, alongside others
        self.running = False


class Runner:
    """The one owner of a loaded model: runs requests on it in arrival order, one at a time or
    (`batch` > 1, a model whose passes pack) up to `batch` at once, sharing each step's pass."""

    def __init__(self, denoiser, max_waiting: int = 16, batch: int = 1) -> None:
        from .batch import StepBatcher, batchable

        self.denoiser = denoiser
        self.max_waiting = max_waiting
        self.batch = max(1, batch)
        self.batcher = StepBatcher(denoiser) if self.batch > 1 and batchable(denoiser) else None
        self._line: deque[_Ticket] = deque()  # runs waiting or running, in arrival order
        self._turns = threading.Condition()
        spec = denoiser.spec
        # How its canvas starts: random tokens (DiffusionGemma's loop) or masks (every other loop).
        random = getattr(spec, "loop", None) == "random-token" or getattr(denoiser, "noise", "mask") == "random"
        block = getattr(spec, "block", None)
        self.info = ModelInfo(spec.name or spec.family, spec.family, str(denoiser.device), "random" if random else "mask",
                              spec.chat_template, denoiser.max_len, instruct=spec.takes_instructions,
                              edits=getattr(spec, "loop", None) == "block-causal" and bool(block and block.edits))

    @property
    def waiting(self) -> int:
        """Runs in line, the running one included."""
        return len(self._line)

    def run(self, request: EditRequest, should_stop: Callable[[], bool] = lambda: False,
            every: float | None = 0.0) -> Iterator[Event]:
        """Progress events (every step with every=0, at most one per `every` seconds, none with
        None), then Done. Ends without Done when `should_stop` turns true; raises SharpenError."""
        done = None
        with self._turn(should_stop) as ours:
            if ours:
                # In the batcher, the run's denoiser is its view of the shared passes.
                model = self.batcher.member() if self.batcher is not None else nullcontext(self.denoiser)
                with model as denoiser:
                    for event in self._events(denoiser, request, should_stop, every):
                        if isinstance(event, Done):
                            done = event
                            break
                        yield event
        if done is not None:  # after the turn ends: whoever reads the result finds the model free
            yield done

    def result(self, request: EditRequest, should_stop: Callable[[], bool] = lambda: False) -> Done:
        """Run to the end; Cancelled if stopped."""
        for event in self.run(request, should_stop, every=None):
            if isinstance(event, Done):
                return event
        raise Cancelled("the edit was cancelled")

    def chat_text(self, messages: list[dict]) -> str:
        """A chat rendered by the model's own template, ready for the answer's slots."""
        from .instruct import render_chat

        template = self.info.chat_template
        if not template:
            raise UsageError(f"the model {self.info.name} has no chat template; use a completion or infill endpoint")
        return render_chat(template, messages, add_generation_prompt=True)

    @contextmanager
    def _turn(self, should_stop: Callable[[], bool]) -> Iterator[bool]:
        """Wait for this run's turn; yields False when it was stopped while waiting."""
        ticket = _Ticket(self.batcher is not None)
        with self._turns:
            waiting = sum(not t.running for t in self._line)
            running = len(self._line) - waiting
            runs_now = waiting == 0 and (running == 0 or (ticket.shared and running < self.batch))
            if not runs_now and waiting >= self.max_waiting:
                raise Busy(f"the model is busy ({waiting} runs waiting); try again shortly")
            self._line.append(ticket)
        try:
            with self._turns:
                while not self._admits(ticket) and not should_stop():
                    self._turns.wait(0.05)  # short: a stop while waiting is seen within 50 ms
                ticket.running = not should_stop()
                self._turns.notify_all()  # the run after this one may join it
            yield ticket.running
        finally:
            with self._turns:
                self._line.remove(ticket)
                self._turns.notify_all()

    def _admits(self, ticket: _Ticket) -> bool:
        """Whether `ticket` may run now: every run before it runs (arrival order), and either the
        model is free or it joins a batch of shared runs with room left."""
        running = 0
        for other in self._line:
            if other is ticket:
                break
            if not other.running:
                return False
            running += 1
        return running == 0 or (ticket.shared and running < self.batch)

    def _events(self, denoiser, request: EditRequest, should_stop, every: float | None) -> Iterator[Event]:
        import torch  # deferred: the editor imports this module before its first paint

        from . import prefix_cache
        from .engine import run_request

        end_ids, mask_id = set(denoiser.spec.end_ids), denoiser.spec.mask_id
        tok = denoiser.tokenizer
        # Kept on the device, read once at the end: reading them per step was a host sync inside
        # every block (docs/speed.md); progress below is built only at the consumer's rate.
        sharp_per_step: list = []
        last_sent = float("-inf")
        with prefix_cache.counting() as cached:  # prompt tokens this run's prefills take from the model's prefix cache
            for update in run_request(denoiser, request, should_stop):
                frame = update.frame
                if update.result is not None:
                    last = progress_of(frame, tok, end_ids, mask_id)
                    counts = tuple(int(v) for v in torch.stack(sharp_per_step).tolist()) if sharp_per_step else ()
                    result = replace(update.result, cached_tokens=cached.tokens)
                    yield Done(result, last, self.info.name, self.info.noise, counts)
                    return
                sharp_per_step.append(frame.sharp_slots())
                now = time.perf_counter()
                if every is not None and now - last_sent >= every:
                    last_sent = now
                    yield progress_of(frame, tok, end_ids, mask_id)


def progress_of(frame, tokenizer, end_ids: set[int], mask_id: int) -> Progress:
    """A sampler Frame as plain data, read through its public per-span state only."""
    return Progress(frame.step, frame.total_steps, frame.elapsed, tuple(draft_of(s, tokenizer, end_ids, mask_id) for s in frame.spans))


def draft_of(state, tokenizer, end_ids: set[int], mask_id: int) -> SpanDraft:
    """One span's state (tokens, confidence, guesses, noise) -> its draft text and slot states.

    Runs of committed tokens are decoded together, so a character split across tokens shows
    on the token that completes it (the tokenizer's `pieces`)."""
    noise = state.noise or (None,) * len(state.tokens)
    # The loop's per-slot states where it gives them (core.loops.frame), else derived from the tokens.
    states = getattr(state, "states", None) or tuple(SHARP if t is not None else NOISE if d is not None else MASKED
                                                     for t, d in zip(state.tokens, noise))
    slots: list[Slot | None] = [None] * len(state.tokens)
    run: list[int] = []  # slot indexes of the current run of committed content

    def flush() -> None:
        if run:
            for i, text in zip(run, tokenizer.pieces([state.tokens[i] for i in run])):
                slots[i] = Slot(SHARP, text, state.confidence[i])
            run.clear()

    for i, (token, drawn, kind) in enumerate(zip(state.tokens, noise, states)):
        if token is None:
            flush()
            slots[i] = Slot(NOISE, tokenizer.pieces([drawn])[0], state.confidence[i]) if drawn is not None else Slot(MASKED, "", state.confidence[i])
        elif token in end_ids:
            flush()
            slots[i] = Slot(END, "", state.confidence[i])
        elif kind == EDITED:
            flush()
            slots[i] = Slot(EDITED, tokenizer.pieces([token])[0], state.confidence[i])
        else:
            run.append(i)
    flush()
    # The draft: what each slot holds now, the model's guess where it is still masked.
    ids = [t if t is not None else (d if d is not None else g) for t, d, g in zip(state.tokens, noise, state.guesses)]
    return SpanDraft(tokenizer.decode([t for t in ids if t not in end_ids and t != mask_id]), tuple(slots))
