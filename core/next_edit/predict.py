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

Drafts from the edit history (drafts.py: a rename's other uses, a repeated fix) start the canvas
where there are any: a masked model's run holds the drafted tokens (never re-noised) and each
drafted hunk is verified by the model's first pass (its probability of the drafted tokens against
its probability of the original ones, read from one pass over the current text); a self-editing
model's window starts as the drafted text, each drafted token the loop's to keep or replace. The
instruct path takes no draft (docs/next_edit.md, "Drafts from the edit history").

The window's new text is diffed against the old (difflib, on words) into hunks; a hunk's
confidence is its least sure token's; hunks under `request.min_confidence` are dropped, and so
is every hunk of a window the model rewrote past `MAX_CHANGED_SHARE` (a sign it did not
understand it, not of an edit). Nothing left is "no edit".
"""
from __future__ import annotations

import difflib
import logging
import re
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from ..errors import Cancelled
from ..events import SHARP, Slot, SpanDraft
from ..request import EditRequest
from ..spans import Span
from .drafts import DraftHunk, Piece, draft_hunks, drafted_text, pieces, to_drafted, token_probability, with_blanks
from .formats import native
from .request import Hunk, NextEditAnswer, NextEditRequest, Window

log = logging.getLogger(__name__)

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
    drafts: int = 0  # hunks drafted from the edit history (drafts.py)
    drafts_kept: int = 0  # of them, the ones the model's verification accepted (masked path; self-editing: the loop's)


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
            every: float | None = 0.0, drafts: bool = True) -> Iterator[NextEditDraft | NextEditDone]:
    """Drafts as the run sharpens (every step with every=0; none with None), then NextEditDone.
    Ends without NextEditDone when `should_stop` turns true (typing cancels a stale prediction).
    `drafts`: start from the edit history's draft where it gives one (False: the model alone)."""
    from ..run import Done, Progress

    started = time.perf_counter()
    first = None
    info = backend.describe()
    if instruct is None:
        instruct = info.instruct
    revise = self_editing(info, request)
    drafted = draft_hunks(request) if drafts and (revise or not instruct) else ()  # the instruct path holds no given token to start from
    if drafted:
        yield from _predict_drafted(backend, request, drafted, instruct, revise, should_stop, every, started)
        return
    final: dict[Window, tuple[str, object]] = {}
    tokens = prompt_tokens = 0
    for edit, windows in plan(request, instruct, revise=revise):
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

_WORD = re.compile(r"\w")


def _predict_drafted(backend, request: NextEditRequest, drafts: tuple[DraftHunk, ...], instruct: bool, revise: bool,
                     should_stop: Callable[[], bool], every: float | None, started: float) -> Iterator[NextEditDraft | NextEditDone]:
    """predict() when the history drafted hunks: the run from the draft, whose first pass verifies it.

    The draft is not shown before the model's first pass has verified it: a draft the model then
    rejected would flash up and vanish (users of next-edit ask first for no flicker and quiet when
    unsure), and the first pass is one forward of the window."""
    first: float | None = None
    windows = tuple(w for w in request.windows if w.end > w.start)
    text = drafted_text(request.text, drafts)
    runs = _revise_runs(request, drafts, windows, text, instruct) if revise else _masked_run(backend, request, drafts, windows, text, should_stop)
    final: dict[Window, tuple[str, object]] = {}
    tokens = prompt_tokens = 0
    verified: list[Hunk] = []
    shown = time.perf_counter()
    for edit, read in runs:
        done, passes = None, 0
        for event in _events(backend, edit, should_stop):
            if event[0] == "progress":
                first_pass = not passes
                passes += 1
                if first_pass or (every is not None and time.perf_counter() - shown >= every):
                    own, verified = read(event[1], [s.text for s in event[1]])  # the first pass verifies the draft
                if every is not None and time.perf_counter() - shown >= every:
                    shown = time.perf_counter()
                    now = dict(final)
                    now.update(own)
                    first = shown - started if first is None else first
                    yield NextEditDraft(event[2], event[3], time.perf_counter() - started, _with_drafts(request, now, verified))
            else:
                done = event[1]
        if done is None:
            if should_stop():
                return
            raise Cancelled("the next-edit run ended without a result")
        tokens, prompt_tokens = tokens + done.result.tokens, prompt_tokens + done.result.prompt_tokens
        own, verified = read(done.last.spans, [r.text for r in done.result.spans])
        final.update(own)
    if not final:  # stopped before the first pass answered (the verification's run ended without a result)
        return
    ordered = sorted(final.items(), key=lambda kv: kv[0].start)
    answer = _with_drafts(request, final, verified)
    kept = sum(any(h.start <= d.start and d.end <= h.end and d.text in h.text for h in answer.hunks) for d in drafts)
    yield NextEditDone(answer, time.perf_counter() - started, first, tuple((w, t) for w, (t, _) in ordered), tokens, prompt_tokens,
                       len(drafts), kept)


def _events(backend, edit: EditRequest, should_stop: Callable[[], bool]):
    """A run's events as ("progress", spans, step, total) and ("done", Done); every step asked
    for (the verification reads the first)."""
    from ..run import Done, Progress

    for event in backend.run(edit, should_stop, 0.0):
        if isinstance(event, Progress):
            yield "progress", event.spans, event.step, event.total_steps
        elif isinstance(event, Done):
            yield "done", event


def _revise_runs(request: NextEditRequest, drafts, windows, text: str, instruct: bool):
    """A self-editing model's runs: each window a revise span of the drafted text, so its answer
    starts as the draft's tokens; the loop keeps or replaces each one (its own verification)."""
    for w in windows:
        start, end = to_drafted(drafts, w.start), to_drafted(drafts, w.end)
        span = Span(start, end, "rewrite", instruction=native.build(request, w) if instruct else None, revise=True)
        edit = EditRequest(text, (span,), request.sampling, request.editing, request.path)
        yield edit, lambda spans, texts, w=w: ({w: (texts[0], spans[0])}, [])


def _masked_run(backend, request: NextEditRequest, drafts, windows, text: str, should_stop: Callable[[], bool]):
    """A masked model's run over the drafted canvas: each draft (with its leading blanks) a span
    of strength 0 (held: never re-noised), the window's text between drafts re-noised as without
    a draft. Before it, one pass over the current text rates the original tokens at the drafted
    places; in the run's first pass a draft whose tokens the model finds less probable than the
    originals is rejected (its place reads as the original), an accepted one is rated by its
    share of the two: p(draft) / (p(draft) + p(original)), per-token geometric means."""
    original = _first_pass(backend, EditRequest(
        request.text, tuple(Span(with_blanks(request.text, d.start, drafts[i - 1].end if i else 0), d.end, "rewrite", strength=0.0)
                            for i, d in enumerate(drafts)), request.sampling, request.editing, request.path), should_stop)
    if original is None:
        return
    p_original = [token_probability(s.slots) for s in original]
    layout = [(w, pieces(request.text, w, drafts)) for w in windows]
    spans = tuple(Span(p.start, p.end, "rewrite", strength=REWRITE_STRENGTH if p.draft is None and _WORD.search(text[p.start:p.end]) else 0.0)
                  for _, ps in layout for p in ps)
    rating: dict[int, float | None] = {}

    def read(span_drafts, texts) -> dict:
        if not rating:  # the run's first pass: each draft verified once
            at = 0
            for _, ps in layout:
                for p in ps:
                    if p.draft is not None:
                        mine = token_probability(span_drafts[at].slots)
                        # The model's choice between the two texts the history offers: the draft's share.
                        share = mine / (mine + p_original[p.draft]) if mine + p_original[p.draft] > 0 else 0.0
                        rating[p.draft] = share if mine > p_original[p.draft] else None  # a tie is no preference: quiet when unsure
                        log.debug("draft %r -> %r: p(draft) %.3f, p(original) %.3f", request.text[drafts[p.draft].start:drafts[p.draft].end],
                                  drafts[p.draft].text, mine, p_original[p.draft])
                    at += 1
        verified = [Hunk(drafts[i].start, drafts[i].end, drafts[i].text, r) for i, r in sorted(rating.items()) if r is not None]
        return _drafted_windows(request, drafts, layout, text, span_drafts, texts), verified

    yield EditRequest(text, spans, request.sampling, request.editing, request.path), read


def _first_pass(backend, edit: EditRequest, should_stop: Callable[[], bool]):
    """The span drafts of a run's first frame (the canvas as given, rated by one pass)."""
    first = None
    for event in _events(backend, edit, should_stop):
        if event[0] == "progress" and first is None:
            first = event[1]
        elif event[0] == "done":
            return first if first is not None else event[1].last.spans
    if should_stop():
        return None
    raise Cancelled("the next-edit verification pass ended without a result")


def _drafted_windows(request: NextEditRequest, drafts, layout: list[tuple[Window, list[Piece]]], text: str, span_drafts,
                     texts) -> dict:
    """Each window's own rewrite put back together from its pieces: the run's text between drafts,
    each draft's place as the original text (a draft is answered by its verification, not by the
    window's diff: `_with_drafts`)."""
    out, at = {}, 0
    for w, ps in layout:
        parts, slots = [], []
        for p in ps:
            piece, draft = texts[at], span_drafts[at]
            at += 1
            if p.draft is None:
                own = tuple(draft.slots) if draft is not None else ()
                if "".join(s.text for s in own) != piece:  # the slots do not spell the text: rated as a whole, by its least sure
                    own = (Slot(SHARP, piece, min((s.confidence for s in own), default=1.0)),)
            else:
                d = drafts[p.draft]
                piece = text[p.start:p.end - len(d.text)] + request.text[d.start:d.end]
                own = (Slot(SHARP, piece, 1.0),)
            parts.append(piece)
            slots += own
        new = "".join(parts)
        out[w] = (new, SpanDraft(new, tuple(slots)))
    return out


def _with_drafts(request: NextEditRequest, windows: dict, verified: list[Hunk]) -> NextEditAnswer:
    """The answer from the windows' own rewrites (filtered as without a draft) and the verified
    drafted hunks over the bar; where the two overlap, the verified draft stands."""
    own = answer_of(request, [(w, t, d) for w, (t, d) in sorted(windows.items(), key=lambda kv: kv[0].start)]).hunks
    drafted = [h for h in verified if h.confidence >= request.min_confidence]
    kept = [h for h in own if not any(h.start < d.end and d.start < h.end or h.start == h.end == d.start for d in drafted)]
    return NextEditAnswer(tuple(sorted(kept + drafted, key=lambda h: h.start)))


def window_after(request: NextEditRequest, answer: NextEditAnswer, window: Window) -> str:
    """The window's text with the answer's hunks inside it applied: what a format answers."""
    inside = [h for h in answer.hunks if window.start <= h.start and h.end <= window.end]
    text = request.text[window.start:window.end]
    for h in reversed(inside):
        text = text[:h.start - window.start] + h.text + text[h.end - window.start:]
    return text


def predict_to_end(backend, request: NextEditRequest, instruct: bool | None = None,
                   should_stop: Callable[[], bool] = lambda: False, drafts: bool = True) -> NextEditDone:
    for event in predict(backend, request, instruct, should_stop, every=None, drafts=drafts):
        if isinstance(event, NextEditDone):
            return event
    raise Cancelled("the next-edit prediction was cancelled")
