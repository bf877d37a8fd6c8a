"""Candidate lengths in one batch, ranked by whether the file still parses, then by confidence.

A span of the wrong length is the main reason diffusion infills fail, and a code infill
that does not parse is worse than none. So each infill span gets several lengths at once:
one canvas, sized for the longest, and one starting row per length where the slots past
that length already hold pad (exactly the layout the model was trained on: the span in the
first slots, pad after it). All rows are denoised together in one run (Canvas.rows); each
finished row is a whole candidate text, parsed with tree-sitter and ranked:

    1. no new ERROR/MISSING nodes against the original text (fewer new ones first),
    2. the model's own confidence, normalised by length (see `row_confidence`).

A candidate that breaks the parse is never first while one that parses exists.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .canvas import DEFAULT_POINT_INFILL, Canvas
from .errors import SpanError
from .spans import Span
from .syntax import error_count, parse_document

DEFAULT_SCALES = (0.5, 0.75, 1.0, 1.5, 2.0)  # x the span's base length (selection, or max_tokens)
# An insertion point has no length to scale: a ladder, x sqrt(2) per rung from 4 to 64 slots. The short
# rungs matter: on HumanEval single-line infilling most passing completions are 4-8 tokens long
# (`return x`), which an exact row of 8 cannot write; (8, 16, 32, 64) passed 1 item in 100, this 4.
DEFAULT_POINT_LENGTHS = (4, 6, 8, 11, 16, 23, 32, 45, 64)


@dataclass(frozen=True)
class CandidatePlan:
    scales: tuple[float, ...] = DEFAULT_SCALES
    point_lengths: tuple[int, ...] = DEFAULT_POINT_LENGTHS
    syntax: bool = True  # rank parsing candidates first (False: confidence only)
    language: str | None = None  # grammar name; None: detected from `path` and the text
    path: str | None = None  # the file's name, for language detection
    confidence: str = "content"  # "content": per written token + the end; "slots": the sampler's per-slot mean
    exact: bool = True  # a row's slots must all hold content (pad/eos banned there): each rung is a distinct
    # length, and blank filler at the end is trimmed like pad; False: rungs are upper bounds (pad allowed)

    def __post_init__(self) -> None:
        if not self.scales or any(s <= 0 for s in self.scales):
            raise ValueError("candidate scales must be positive")
        if not self.point_lengths or any(n < 1 for n in self.point_lengths):
            raise ValueError("candidate point lengths must be at least 1")
        if self.confidence not in ("content", "slots"):
            raise ValueError(f"unknown confidence {self.confidence!r}; known: content, slots")


def plan_for_count(n: int, **options) -> CandidatePlan:
    """A plan with `n` lengths: scales spread geometrically over 0.5x..2x, points over 4..64 slots."""
    if n < 2:
        return CandidatePlan(scales=(1.0,), point_lengths=(DEFAULT_POINT_INFILL,), **options)
    scales = tuple(round(0.5 * 4 ** (i / (n - 1)), 3) for i in range(n))
    points = tuple(sorted({round(4 * 16 ** (i / (n - 1))) for i in range(n)}))
    return CandidatePlan(scales=scales, point_lengths=points, **options)


@dataclass(frozen=True)
class Candidate:
    row: int  # canvas row (before `samples` repetition: row // samples)
    lengths: tuple[int, ...]  # slots per span in this row
    texts: tuple[str, ...]  # per span, the new text
    text: str  # the whole new text
    confidence: float  # length-normalised mean log-probability (higher is better)
    new_errors: int | None  # ERROR/MISSING nodes beyond the original's; None: not checked
    errors: int | None = None  # ERROR/MISSING nodes in the candidate's whole text
    batch: int = 0  # batch row (canvas row x samples) it came from

    @property
    def parses(self) -> bool:
        return not self.new_errors


def ladder(span: Span, selected_tokens: int, plan: CandidatePlan) -> tuple[int, ...]:
    """Candidate slot counts for one span, ascending. Rewrites keep their own tokens (one length)."""
    if span.mode == "rewrite":
        return (selected_tokens,)
    base = span.max_tokens or selected_tokens
    if not base:
        return tuple(sorted(set(plan.point_lengths)))
    return tuple(sorted({max(1, math.ceil(base * s)) for s in plan.scales}))


def row_lengths(ladders: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """One row per rung: row r gives span i its r-th length (a shorter ladder repeats its top).

    The middle rung (1x the base, or the default point budget) comes first: row 0 is the one
    the sampler's frames show while the batch denoises, so the preview has a typical length.
    """
    n = max(len(l) for l in ladders)
    rows = list(dict.fromkeys(tuple(l[min(r, len(l) - 1)] for l in ladders) for r in range(n)))  # distinct
    rows.insert(0, rows.pop(len(rows) // 2))
    return rows


def widen_spans(spans: list[Span], ladders: list[tuple[int, ...]]) -> list[Span]:
    """Infill spans sized for their longest candidate (the canvas holds the widest row)."""
    return [s if s.mode == "rewrite" else replace(s, max_tokens=max(l)) for s, l in zip(spans, ladders)]


def candidate_rows(canvas: Canvas, lengths: list[tuple[int, ...]], pad_id: int) -> Canvas:
    """The canvas with one starting row per length tuple: slots past a span's length hold pad."""
    rows = []
    for row in lengths:
        ids = list(canvas.ids)
        for span, slots, n in zip(canvas.spans, canvas.slots, row):
            if span.mode == "infill":
                ids[slots.start + n:slots.stop] = [pad_id] * (len(slots) - n)
        rows.append(tuple(ids))
    return replace(canvas, rows=tuple(rows))


class ExactRows:
    """A denoiser view that bans pad/eos inside each row's candidate length (CandidatePlan.exact).

    Without it a model that over-predicts pad writes every row empty, and the rows differ only
    in how much room they offered; with it row r is exactly its length, like an oracle-length
    run at each rung, and the parse check and confidence choose between them.
    """

    def __init__(self, denoiser, canvas: Canvas, samples: int) -> None:
        import torch

        self.inner = denoiser
        rows = torch.tensor(canvas.rows, device=denoiser.device).repeat_interleave(samples, dim=0)  # [B, T]
        self.content = rows == canvas.mask_id  # [B, T] slots that must receive a non-end token
        self.end_ids = torch.tensor(denoiser.spec.end_ids, dtype=torch.long, device=denoiser.device)  # [E]

    # The rest of the DenoiserLike interface is the inner denoiser's.
    spec = property(lambda self: self.inner.spec)
    tokenizer = property(lambda self: self.inner.tokenizer)
    supports_cache = property(lambda self: self.inner.supports_cache)
    device = property(lambda self: self.inner.device)
    max_len = property(lambda self: self.inner.max_len)
    banned_ids = property(lambda self: self.inner.banned_ids)

    def source_positions(self, want: list[int]) -> list[int]:
        return self.inner.source_positions(want)

    def new_cache(self, batch: int, length: int):
        return self.inner.new_cache(batch, length)

    def logits(self, x, want=None, run=None, cache=None):
        import torch

        out = self.inner.logits(x, want=want, run=run, cache=cache)  # [B, W, V]
        positions = torch.arange(x.shape[1], device=x.device) if want is None else want
        is_end = torch.zeros(out.shape[-1], dtype=torch.bool, device=out.device).index_fill(0, self.end_ids, True)  # [V]
        ban = self.content[:, positions, None] & is_end  # [B, W, V]
        return out.masked_fill(ban, float("-inf"))  # out of place: logits may be inference tensors


def plan_canvas_spans(spans: list[Span], selected: list[int], plan: CandidatePlan) -> tuple[list[Span], list[tuple[int, ...]]]:
    """(spans widened for the canvas, the length tuple of each row)."""
    ladders = [ladder(s, n, plan) for s, n in zip(spans, selected)]
    return widen_spans(spans, ladders), row_lengths(ladders)


def content_tokens(ids: tuple[int, ...], length: int, end_ids: tuple[int, ...], tokenizer) -> int:
    """How many of a row's first slots are content: up to its last non-blank token, before any pad.

    A run of blank tokens (spaces, line breaks) at the end of a span is padding in disguise:
    with pad banned (exact rows), or before the pads, a model fills spare slots with them.
    """
    written = list(ids[:length])
    for i, token in enumerate(written):
        if token in end_ids:
            written = written[:i]
            break
    pieces = tokenizer.pieces(written)
    return next((i + 1 for i in range(len(pieces) - 1, -1, -1) if pieces[i].strip()), 0)


def trim_filler(span_text: str, after: str) -> str:
    """A candidate's span text without trailing blank filler: its line break kept unless the text after has one."""
    content = span_text.rstrip()
    tail = span_text[len(content):]
    if not content:
        return ""  # blank only: a non-answer
    if "\n" not in tail:
        return span_text  # spaces before the rest of the line may matter
    if after.startswith(("\n", "\r\n")):
        return content
    return content + tail[: tail.index("\n") + 1]


def row_confidence(ids: tuple[int, ...], conf: tuple[float, ...], keep: int, length: int) -> tuple[float, int]:
    """(sum of log-probabilities, count) over a row's `keep` content tokens and the token after them.

    The token after the content (a pad, or the first filler) is the model's word that the span
    ends there; the pads or filler after it repeat that decision and are left out, so a short
    candidate is not rewarded for many easy pads, nor a long one for its length.
    """
    n = min(length, keep + 1)
    return sum(math.log(max(p, 1e-9)) for p in conf[:n]), n


def rank(candidates: list[Candidate]) -> list[Candidate]:
    """Best first: parsing before breaking, then fewer errors, then confidence; text-distinct.

    "Parsing" is relative to the original: no ERROR/MISSING nodes beyond its own (a file
    already broken elsewhere does not sink every candidate); among those, fewer errors
    overall still wins (a candidate may also repair the original). An empty infill is a
    non-answer to "fill this": it comes after the non-empty ones that parse.
    """
    def key(c: Candidate):
        return (bool(c.new_errors), not any(c.texts), c.errors or 0, -c.confidence, c.row)

    seen, out = set(), []
    for c in sorted(candidates, key=key):
        if c.text not in seen:
            seen.add(c.text)
            out.append(c)
    return out


def score_rows(text: str, spans: list[Span], frame, row_lengths_: list[tuple[int, ...]], samples: int,
               span_texts: list[list[str]], end_ids: tuple[int, ...], plan: CandidatePlan, tokenizer) -> list[Candidate]:
    """One Candidate per batch row of a finished frame (rows are canvas rows x `samples`)."""
    from .changes import ChangeSet

    language, before = baseline_errors(text, plan)
    out = []
    for b, raw in enumerate(span_texts):
        lengths = row_lengths_[b // samples]
        infills = [i for i, s in enumerate(spans) if s.mode == "infill"]
        texts = [trim_filler(t, text[s.end:]) if s.mode == "infill" else t for s, t in zip(spans, raw)]
        if plan.confidence == "slots":
            confidence = frame.sample_scores[b]
        else:
            parts = [row_confidence(frame.final_ids[b][i], frame.final_confidence[b][i],
                                    content_tokens(frame.final_ids[b][i], lengths[i], end_ids, tokenizer), lengths[i])
                     for i in infills]
            total, count = sum(p[0] for p in parts), sum(p[1] for p in parts)
            confidence = total / count if count else frame.sample_scores[b]
        whole = ChangeSet.of((s.start, s.end, t) for s, t in zip(spans, texts)).apply(text)
        errors = None if before is None else error_count(parse_document(whole, language))
        new = None if errors is None else max(0, errors - before)
        out.append(Candidate(b // samples, lengths, tuple(texts), whole, confidence, new, errors, b))
    return out


def baseline_errors(text: str, plan: CandidatePlan) -> tuple[str, int | None]:
    """(language, the original text's error count), or None errors where nothing can be checked."""
    doc = parse_document(text, plan.language, plan.path)
    if not plan.syntax or doc.tree is None:
        return doc.language, None
    return doc.language, error_count(doc)


def selected_tokens(text: str, spans: list[Span], tokenizer, max_len: int | None = None) -> list[int]:
    """Each span's selection in tokens; with `max_len`, one whose fewest possible tokens exceed the
    canvas is refused before it is encoded (a 50 MB line took gigabytes to count)."""
    counts = []
    for s in spans:
        region = text[s.start:s.end]
        if max_len is not None and (fewest := tokenizer.fewest_tokens(region)) > max_len:
            raise SpanError(f"span {s.name}: the selection is {len(region):,} characters, at least {fewest:,} tokens, "
                            f"but the model's canvas holds {max_len}")
        counts.append(len(tokenizer.encode(region)))
    return counts

