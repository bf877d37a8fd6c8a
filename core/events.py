"""What a run says, as plain data: the vocabulary every front end reads (torch-free, no model).

    Progress   a denoising step: each span's draft and every slot's state (masked, noise, sharp, edited, end)
    Done       the end: the engine's EditResult and the last frame
    Stopped    a run that ended without Done: its client left, or its time ran out
    Failed     a run that failed after its answer began (a server sends it as an error event)
    ModelInfo  what a front end may know of a model without touching it

`to_json()` on Progress and Done is the one wire and file form: the headless runner's --json, the
server's /v1/edits frames and the remote backend all read and write it, so a preview drawn from a
server is the local one. core/run.py (the Runner) makes these; app/ reads them; nothing here
imports torch or a model, so a remote client or a test can use them alone.
"""
from __future__ import annotations

from dataclasses import dataclass

from .changes import ChangeSet
from .errors import ModelError
from .request import EditRequest

# A slot's state in a frame: the loop's own (core.loops.frame.SLOT_STATES), and "end" for a
# committed pad/eos, which the result deletes (so a front end draws nothing there).
MASKED, NOISE, SHARP, EDITED, END = "masked", "noise", "sharp", "edited", "end"
SLOT_STATES = (MASKED, NOISE, SHARP, EDITED, END)


@dataclass(frozen=True)
class Slot:
    state: str  # one of SLOT_STATES: masked (blank), noise (a random token), sharp (committed), edited (written over a committed token), end (pad/eos: deleted)
    text: str  # what the slot shows: the committed text, the noise token's text; "" when masked or end
    confidence: float  # probability at commit, or of the model's current guess while unsharp


@dataclass(frozen=True)
class SpanDraft:
    text: str  # the span as it stands: sharp text, and the model's current guess (or noise) elsewhere
    slots: tuple[Slot, ...]

    @property
    def unsharp(self) -> int:
        return sum(s.state in (MASKED, NOISE) for s in self.slots)


@dataclass(frozen=True)
class Progress:
    step: int  # 0: the starting canvas
    total_steps: int
    elapsed: float  # seconds since the loop started
    spans: tuple[SpanDraft, ...]  # in the request's span order (sorted)

    @property
    def unsharp(self) -> int:
        """Slots still masked or noise."""
        return sum(s.unsharp for s in self.spans)

    @property
    def sharp(self) -> int:
        """Slots decided (pad/eos included: they are decisions too)."""
        return sum(len(s.slots) for s in self.spans) - self.unsharp

    def to_json(self) -> dict:
        return {
            "type": "frame",
            "step": self.step,
            "total_steps": self.total_steps,
            "elapsed": self.elapsed,
            # Confidence unrounded: the preview's shading cuts at 0.5 and 0.9, and a client's
            # preview must be the local one.
            "spans": [{"text": s.text, "slots": [[x.state, x.text, x.confidence] for x in s.slots]} for s in self.spans],
        }

    @classmethod
    def from_json(cls, data: dict) -> "Progress":
        spans = tuple(SpanDraft(s["text"], tuple(Slot(state, text, float(p)) for state, text, p in s["slots"])) for s in data["spans"])
        return cls(int(data["step"]), int(data["total_steps"]), float(data.get("elapsed", 0.0)), spans)


@dataclass(frozen=True)
class Done:
    result: object  # core.result.EditResult
    last: Progress  # the final frame (what the preview shows when the run ends)
    model: str  # the model's name
    noise: str  # "mask" or "random": how the canvas started
    sharp_per_step: tuple[int, ...] = ()  # slots sharp after each step (0: the start)

    def to_json(self) -> dict:
        result = self.result
        return {
            "type": "result",
            "model": self.model,
            "noise": self.noise,
            "steps": result.steps,
            "tokens": result.tokens,
            "prompt_tokens": result.prompt_tokens,
            "cached_tokens": result.cached_tokens,
            "context_cut": result.context_cut,
            "denoise_seconds": round(result.seconds, 4),
            "tokens_per_second": round(result.tokens / max(result.seconds, 1e-9), 2),
            "sharp_per_step": list(self.sharp_per_step),
            "settings": dict(result.settings),  # what the loop ran with (steps, block size, thresholds)
            "changes": [{"start": c.start, "end": c.end, "text": c.text} for c in result.changes().changes],
            "spans": [
                {"start": r.span.start, "end": r.span.end, "mode": r.span.mode, "text": r.text, "tokens": r.tokens,
                 "alternatives": list(r.alternatives[1:]),
                 # a loop that edits its own tokens (LLaDA2.1) counts its commits and edits per span
                 **({"commits": r.commits, "edits": r.edits} if r.edits is not None else {})}
                for r in result.spans
            ],
            "last": self.last.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict, request: EditRequest) -> "Done":
        """The Done a server sent for `request` (the text is the client's own: only changes travel)."""
        from .result import EditResult, SpanResult

        if len(data["spans"]) != len(request.spans):
            raise ModelError("the server answered for a different number of spans")
        spans = tuple(
            SpanResult(span, s["text"], int(s["tokens"]), (s["text"], *s.get("alternatives", ())), s.get("commits"), s.get("edits"))
            for span, s in zip(request.spans, data["spans"])
        )
        new_text = ChangeSet.of((r.span.start, r.span.end, r.text) for r in spans).apply(request.text)
        result = EditResult(new_text, spans, int(data["steps"]), float(data.get("denoise_seconds", 0.0)), (new_text,),
                            prompt_tokens=int(data.get("prompt_tokens", 0)), context_cut=bool(data.get("context_cut", False)),
                            settings=dict(data.get("settings") or {}), cached_tokens=int(data.get("cached_tokens", 0)))
        return cls(result, Progress.from_json(data["last"]), data.get("model", ""), data.get("noise", "mask"),
                   tuple(data.get("sharp_per_step", ())))


@dataclass(frozen=True)
class ModelInfo:
    """What a front end may know of a model without touching it."""

    name: str
    family: str
    device: str
    noise: str  # "mask" | "random"
    chat_template: str | None  # None: no chat
    max_len: int  # longest canvas
    drafts: bool = True  # whether runs stream per-step drafts (a plain completions server does not)
    instruct: bool = False  # it takes instructions (ModelSpec.takes_instructions): the editor asks for one
    # Its loop can edit its own tokens (LLaDA2.1's editing decode, unless --editing off): a span may
    # revise its text (Span.revise), which is how a next edit starts from the window's text.
    edits: bool = False

    def to_json(self) -> dict:
        return {"name": self.name, "family": self.family, "device": self.device, "noise": self.noise,
                "chat": self.chat_template is not None, "instruct": self.instruct, "max_len": self.max_len, "drafts": self.drafts,
                "edits": self.edits}


Event = Progress | Done


@dataclass(frozen=True)
class Stopped:
    """A run that ended without Done (a server's run bridge ends its events with it)."""

    reason: str  # "cancelled" (the client left, or the handler gave up) or "deadline" (the time budget ran out)
    last: Progress | None  # the last frame seen, None when the run never started


@dataclass(frozen=True)
class Failed:
    """A run that failed after its streamed answer had started: sent as the stream's error event."""

    status: int  # the HTTP status it would have had before the stream began
    message: str  # one plain line
