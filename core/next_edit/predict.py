"""Decoding a next edit: the request's windows rewritten by the model, diffed into hunks.

    for event in predict(backend, request):        # a Backend: app/backend.py (local or a server)
        if isinstance(event, NextEditDraft): draw(event.answer.hunks)   # as the run sharpens
        else: offer(event.answer)                   # NextEditDone; answer.quiet: draw nothing

How a window is rewritten depends on the model (docs/next_edit.md):

- instruct and chat families (ModelInfo.instruct: SDAR-Chat, Stable-DiffCoder-Instruct,
  LLaDA2.x, Dream-Coder-Instruct, DiffusionGemma) get each window as a span with an
  instruction (formats/native.py: the recent edits, the viewed snippets, the cursor, the task),
  laid out by the engine's own chat path (core/instruct.py, core/prompted.py); the answer's
  slots are the window's new text. One run per window.
- a model whose loop edits its own tokens (ModelInfo.edits: LLaDA2.1's editing decode) gets the
  same instruction, and its answer starts as the window's own tokens, not masks: a revise span
  (Span.revise), each of whose tokens the loop may replace where the model prefers another one
  above the editing threshold (core/loops/editing.py), then a short tail of masks the answer may
  grow into (core/prompted.py REVISE_TAIL). A model that keeps every token answers "no edit".
- masked-infill families (the embedded model, LLaDA / Dream base) get every window as a
  rewrite span of one canvas (core/engine.run_edit's rewrite path): the window's own tokens,
  the share `strength` re-masked where the model is least sure of them (core/loops/spans.py,
  `renoise_rewrites`), then denoised with the text around as context. All windows denoise
  together, in the same steps.

The window's new text is diffed against the old (difflib, on words) into hunks; a hunk's
confidence is its least sure token's; hunks under `request.min_confidence` are dropped, and so
is every hunk of a window the model rewrote past `MAX_CHANGED_SHARE` (a sign it did not
understand it, not of an edit). Nothing left is "no edit".
"""
from __future__ import annotations

import difflib
import re
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from ..errors import Cancelled
from ..request import EditRequest
from ..spans import Span
from .formats import native
from .request import Hunk, NextEditAnswer, NextEditRequest, Window

REWRITE_STRENGTH = 0.35  # the share of a window a masked model re-noises: an edit is a few tokens in many
MAX_CHANGED_SHARE = 0.6  # a window rewritten past this share of its characters is noise, not an edit
_TOKENS = re.compile(r"\w+|\s+|[^\w\s]")


@dataclass(frozen=True)
class NextEditDraft:
    step: int  # the run's step (0: its starting canvas)
    total_steps: int
    elapsed: float  # seconds since predict started
    answer: NextEditAnswer  # the hunks the drafts show now (the bar applied as at the end)


@dataclass(frozen=True)
class NextEditDone:
    answer: NextEditAnswer
    seconds: float  # predict's wall time
    first_draft: float | None  # seconds to the first draft (None: the run gave none)
    windows: tuple[tuple[Window, str], ...]  # each window and its new text
    tokens: int = 0  # tokens the model wrote (every run's slots less pad/eos)
    prompt_tokens: int = 0  # tokens it read besides them


def self_editing(info, request: NextEditRequest) -> bool:
    """Whether the model's loop edits its own tokens in this request's run (ModelInfo.edits, and
    not turned off by --editing off): its windows then start from their own text (Span.revise)."""
    return bool(getattr(info, "edits", False)) and request.sampling.editing != "off"


def plan(request: NextEditRequest, instruct: bool, strength: float = REWRITE_STRENGTH,
         revise: bool = False) -> list[tuple[EditRequest, tuple[Window, ...]]]:
    """The engine requests that rewrite the request's windows, each with the windows its spans are.
    `revise`: a self-editing model's (self_editing): each window's answer starts as its own text."""
    windows = tuple(w for w in request.windows if w.end > w.start)
    if not windows:
        return []
    if instruct or revise:  # a revise span's prompt is still the instruction: only its canvas starts differently
        return [(EditRequest(request.text, (Span(w.start, w.end, "rewrite", instruction=native.build(request, w) if instruct else None,
                                                 revise=revise),),
                             request.sampling, request.editing, request.path), (w,)) for w in windows]
    spans = tuple(Span(w.start, w.end, "rewrite", strength=strength) for w in windows)
    return [(EditRequest(request.text, spans, request.sampling, request.editing, request.path), windows)]


def hunks_between(old: str, new: str, base: int, confidence: Callable[[int, int], float] = lambda a, b: 1.0) -> list[Hunk]:
    """The changes turning `old` into `new` as hunks at offset `base`: words compared, each run
    of changed words one hunk. `confidence(a, b)` rates new[a:b]."""
    if old == new:
        return []
    a, b = _TOKENS.findall(old), _TOKENS.findall(new)
    starts_a, starts_b = _starts(a), _starts(b)
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        start, end, n1, n2 = starts_a[i1], starts_a[i2], starts_b[j1], starts_b[j2]
        out.append(Hunk(base + start, base + end, new[n1:n2], confidence(n1, n2)))
    return out


def _starts(tokens: list[str]) -> list[int]:
    out, at = [0], 0
    for t in tokens:
        at += len(t)
        out.append(at)
    return out


def slot_confidence(draft, text: str) -> Callable[[int, int], float]:
    """new-text range -> the least confidence of the slots that wrote it (core.run.SpanDraft);
    a pure deletion is rated by the slots around it. Without slots: 1.0."""
    if draft is None or not draft.slots:
        return lambda a, b: 1.0
    per_char: list[float] = []
    for slot in draft.slots:
        per_char += [slot.confidence] * len(slot.text)
    if not per_char:
        return lambda a, b: 1.0
    scale = len(per_char) / max(1, len(text))  # the slots' pieces and the result's text differ by a newline style at most

    def rate(a: int, b: int) -> float:
        lo, hi = int(a * scale), int(b * scale + 0.999)
        lo, hi = max(0, min(lo, len(per_char) - 1)), max(1, min(hi, len(per_char)))
        if hi <= lo:
            lo, hi = max(0, lo - 1), min(len(per_char), lo + 1)
        return min(per_char[lo:hi])

    return rate


def answer_of(request: NextEditRequest, rewritten: list[tuple[Window, str, object]]) -> NextEditAnswer:
    """Each (window, new text, its slots' draft) diffed, rated and filtered into the answer."""
    hunks: list[Hunk] = []
    for window, new, draft in rewritten:
        old = request.text[window.start:window.end]
        found = hunks_between(old, new, window.start, slot_confidence(draft, new))
        changed = sum(max(h.end - h.start, len(h.text)) for h in found)
        if changed > MAX_CHANGED_SHARE * max(1, len(old)):
            continue
        hunks += [h for h in found if h.confidence >= request.min_confidence]
    return NextEditAnswer(tuple(sorted(hunks, key=lambda h: h.start)))


def predict(backend, request: NextEditRequest, instruct: bool | None = None, should_stop: Callable[[], bool] = lambda: False,
            every: float | None = 0.0) -> Iterator[NextEditDraft | NextEditDone]:
    """Drafts as the run sharpens (every step with every=0; none with None), then NextEditDone.
    Ends without NextEditDone when `should_stop` turns true (typing cancels a stale prediction)."""
    from ..run import Done, Progress

    started = time.perf_counter()
    first = None
    info = backend.describe()
    if instruct is None:
        instruct = info.instruct
    final: dict[Window, tuple[str, object]] = {}
    tokens = prompt_tokens = 0
    for edit, windows in plan(request, instruct, revise=self_editing(info, request)):
        done = None
        for event in backend.run(edit, should_stop, every):
            if isinstance(event, Progress):
                first = time.perf_counter() - started if first is None else first
                drafts = dict(final)
                drafts.update({w: (s.text, s) for w, s in zip(windows, event.spans)})  # the slots rate the draft too
                answer = answer_of(request, [(w, t, d) for w, (t, d) in sorted(drafts.items(), key=lambda kv: kv[0].start)])
                yield NextEditDraft(event.step, event.total_steps, time.perf_counter() - started, answer)
            elif isinstance(event, Done):
                done = event
        if done is None:
            if should_stop():
                return
            raise Cancelled("the next-edit run ended without a result")
        tokens, prompt_tokens = tokens + done.result.tokens, prompt_tokens + done.result.prompt_tokens
        for w, result, draft in zip(windows, done.result.spans, done.last.spans):
            final[w] = (result.text, draft)
    ordered = sorted(final.items(), key=lambda kv: kv[0].start)
    answer = answer_of(request, [(w, t, d) for w, (t, d) in ordered])
    yield NextEditDone(answer, time.perf_counter() - started, first, tuple((w, t) for w, (t, _) in ordered), tokens, prompt_tokens)


def window_after(request: NextEditRequest, answer: NextEditAnswer, window: Window) -> str:
    """The window's text with the answer's hunks inside it applied: what a format answers."""
    inside = [h for h in answer.hunks if window.start <= h.start and h.end <= window.end]
    text = request.text[window.start:window.end]
    for h in reversed(inside):
        text = text[:h.start - window.start] + h.text + text[h.end - window.start:]
    return text


def predict_to_end(backend, request: NextEditRequest, instruct: bool | None = None,
                   should_stop: Callable[[], bool] = lambda: False) -> NextEditDone:
    for event in predict(backend, request, instruct, should_stop, every=None):
        if isinstance(event, NextEditDone):
            return event
    raise Cancelled("the next-edit prediction was cancelled")
