"""Text + spans -> one token canvas: context window, mask slots per span, map back to text.

Only span slots are ever decoded; the text outside the spans is never re-encoded into the
result, so the round trip is exact by construction (see core/changes.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import SpanError
from .spans import Span
from .tokenizer import Tokenizer

DEFAULT_POINT_INFILL = 32  # slots for an infill at a bare cursor (no selection)


def infill_slots(span: Span, selected_tokens: int) -> int:
    """How many mask slots an infill span gets; pad/eos trims what the model does not use."""
    if span.max_tokens is not None:
        return span.max_tokens
    if selected_tokens == 0:
        return DEFAULT_POINT_INFILL
    # Room to grow past the selection's own length: a fixed length is the main cause of bad infills.
    return max(8, math.ceil(1.5 * selected_tokens) + 4)


def encode_selection(region: str, span: Span, tokenizer: Tokenizer, max_len: int) -> list[int]:
    """The tokens of a span's selection, refused (SpanError) before encoding when even its fewest
    possible tokens could not fit the canvas: encoding a 50 MB line whole took gigabytes or
    ended in the tokenizer's panic, only to be refused afterwards. An infill with max_tokens
    needs no count: []."""
    if span.mode != "rewrite" and span.max_tokens is not None:
        return []  # the slot count is given: an infill's selection is never encoded
    fewest = tokenizer.fewest_tokens(region)
    needed = fewest if span.mode == "rewrite" else infill_slots(span, fewest)
    if needed > max_len:
        raise SpanError(f"span {span.name}: the selection is {len(region):,} characters, at least {fewest:,} tokens, "
                        f"but the model's canvas holds {max_len}")
    return tokenizer.encode(region)


@dataclass(frozen=True)
class Canvas:
    ids: tuple[int, ...]  # the whole canvas; infill slots hold the mask id, rewrite slots the draft
    slots: tuple[range, ...]  # per span, its canvas positions
    spans: tuple[Span, ...]  # sorted, validated
    window: tuple[int, int]  # character range of the text the canvas covers
    mask_id: int
    rows: tuple[tuple[int, ...], ...] | None = None  # optional per-row starting canvases of the same length
    # (candidate lengths: a row's extra slots start as pad), denoised together as one batch
    # Some of the text around the spans did not fit (the context was clipped to the budget):
    # what a server reports as a truncated prompt (llama.cpp's `truncated`).
    cut: bool = False


def _lines_tail(text: str, budget: int, tokenizer: Tokenizer) -> tuple[list[int], int]:
    """Tokens of the longest tail of `text` that starts at a line start and fits `budget`, and
    how many characters of `text` they hold."""
    if not text or budget <= 0:
        return [], 0
    # Look at a generous character window first so huge files never get encoded whole.
    start = max(0, len(text) - budget * 8)
    if start > 0:
        newline = text.find("\n", start)
        start = newline + 1 if newline != -1 else len(text)
    while True:
        ids = tokenizer.encode(text[start:])
        if len(ids) <= budget:
            return ids, len(text) - start
        # Drop a share of lines proportional to the overflow and try again.
        drop = max(1, int((len(ids) - budget) / len(ids) * (len(text) - start)))
        newline = text.find("\n", start + drop - 1)
        start = newline + 1 if newline != -1 else len(text)


def _lines_head(text: str, budget: int, tokenizer: Tokenizer) -> tuple[list[int], int]:
    """Tokens of the longest head of `text` that ends at a line end and fits `budget`, and how
    many characters of `text` they hold."""
    if not text or budget <= 0:
        return [], 0
    end = min(len(text), budget * 8)
    if end < len(text):
        end = text.rfind("\n", 0, end) + 1
    while True:
        ids = tokenizer.encode(text[:end])
        if len(ids) <= budget:
            return ids, end
        drop = max(1, int((len(ids) - budget) / len(ids) * end))
        end = text.rfind("\n", 0, max(0, end - drop)) + 1


def _gap(text: str, budget: int, tokenizer: Tokenizer) -> tuple[list[int], bool]:
    """Text between two spans: whole when it fits, else its head and tail lines; and whether
    it was cut."""
    if not text:
        return [], False
    ids = tokenizer.encode(text) if 0 < budget and len(text) <= budget * 8 else None
    if ids is not None and len(ids) <= budget:
        return ids, False
    head, _ = _lines_head(text, budget // 2, tokenizer)
    tail, _ = _lines_tail(text, budget - budget // 2, tokenizer)
    return head + tail, True


def build_canvas(text: str, spans: list[Span], tokenizer: Tokenizer, mask_id: int, context_tokens: int, max_len: int) -> Canvas:
    """Lay out prefix | slots | gap | slots | ... | suffix within `max_len` tokens.

    `spans` must already be validated and sorted. `context_tokens` is the budget for all
    fixed text together: each gap between spans takes at most an equal share, and what the gaps
    leave goes half before the first span and half after the last (a side with less text leaves
    its rest to the other).
    """
    drafts: list[list[int]] = []
    for span in spans:
        selected = encode_selection(text[span.start:span.end], span, tokenizer, max_len)
        if span.mode == "rewrite":
            drafts.append(selected)
        else:
            drafts.append([mask_id] * infill_slots(span, len(selected)))
    slot_total = sum(len(d) for d in drafts)
    if slot_total > max_len:
        raise SpanError(f"the spans need {slot_total} tokens but the model's canvas holds {max_len}")
    budget = max(0, min(context_tokens, max_len - slot_total))
    n_gaps = len(spans) - 1
    gap_budget = budget // (2 + n_gaps) if n_gaps else 0
    # Gaps first, each at most its share: what short gaps leave goes to the two edges.
    gaps = [_gap(text[a.end:b.start], gap_budget, tokenizer) for a, b in zip(spans, spans[1:])]
    edge_budget = (budget - sum(len(ids) for ids, _ in gaps)) // 2

    head, tail = text[: spans[0].start], text[spans[-1].end:]
    # A side that needs less than its half leaves the rest to the other: an infill at the end of
    # a file (or a chat, all prefix) reads twice the text before it instead of an empty half. The
    # text after goes first, so that common case encodes each side once.
    suffix, after = _lines_head(tail, edge_budget, tokenizer)
    prefix, before = _lines_tail(head, 2 * edge_budget - len(suffix) if after == len(tail) else edge_budget, tokenizer)
    if after < len(tail) and before == len(head):
        suffix, after = _lines_head(tail, 2 * edge_budget - len(prefix), tokenizer)
    cut = before < len(head) or after < len(tail) or any(gap_cut for _, gap_cut in gaps)
    ids: list[int] = list(prefix)
    slots: list[range] = []
    for i, (span, draft) in enumerate(zip(spans, drafts)):
        if i:
            ids += gaps[i - 1][0]
        slots.append(range(len(ids), len(ids) + len(draft)))
        ids += draft
    ids += suffix
    window = (spans[0].start - before, spans[-1].end + after)
    return Canvas(ids=tuple(ids), slots=tuple(slots), spans=tuple(spans), window=window, mask_id=mask_id, cut=cut)


def span_text(ids: list[int], tokenizer: Tokenizer, drop_ids: tuple[int, ...]) -> str:
    """A finished span's text: pad/eos (and any mask left over) deleted, then decoded."""
    return tokenizer.decode([i for i in ids if i not in drop_ids])
