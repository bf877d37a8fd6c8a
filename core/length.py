"""Adaptive span length without an oracle: grow while the model fills the span, shrink by its pads.

A diffusion infill has to be given its length up front. Too short and the model crams or
truncates; too long and a weak model pads badly or rambles. So:

- a rewrite keeps its selection's own tokens (the draft), and pad/eos it writes are deleted;
- an infill starts from the selection's own token length (an insertion point: a small
  budget), and after each run, a span whose last slots hold confident non-pad tokens was
  cut short: it runs again with a longer canvas (x `grow`, bounded by `max_tokens`, the
  model's canvas and `rounds`). Pads the model writes inside the span shrink it as always.

Works with or without a CandidatePlan: with one, the best candidate's length is the one
that is judged and grown from, and the next round's ladder is centred on it. With exact
rows (CandidatePlan.exact) no row can end early, so a span grows when its longest rung won.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from .spans import Span

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdaptiveLength:
    point_start: int = 16  # first budget at an insertion point (no selection to measure)
    min_start: int = 4  # a one-token selection still gets room to say a little more
    grow: float = 2.0  # a span cut short gets this many times its length next round
    max_tokens: int = 256  # never grow past this (nor past the model's canvas)
    rounds: int = 3  # denoising runs at most
    tail: int = 2  # the last slots that decide whether the span filled up
    confident: float = 0.5  # their mean probability from which "filled up" counts (below: the model was unsure)


def start_budget(span: Span, selected: int, policy: AdaptiveLength) -> int | None:
    """The first round's slots for an infill span (None for rewrites: their draft is their length)."""
    if span.mode == "rewrite":
        return None
    own = max(policy.min_start, selected) if selected else policy.point_start
    return min(own, span.max_tokens) if span.max_tokens else own  # an explicit max_tokens stays the cap


def filled_up(ids: tuple[int, ...], conf: tuple[float, ...], length: int, end_ids: tuple[int, ...], policy: AdaptiveLength) -> bool:
    """Whether the first `length` slots end in confident content (no pad/eos): the span was cut short."""
    n = min(policy.tail, length)
    if n == 0:
        return False
    tail_ids, tail_conf = ids[length - n:length], conf[length - n:length]
    return all(t not in end_ids for t in tail_ids) and sum(tail_conf) / n >= policy.confident


def next_budgets(budgets: list[int | None], used: list[int | None], filled: list[bool], caps: list[int], grow: float) -> list[int | None]:
    """Grow the spans that filled up (from the length they used); the others keep their budget."""
    return [
        b if b is None or not f else min(cap, max(b, math.ceil(u * grow)))
        for b, u, f, cap in zip(budgets, used, filled, caps)
    ]


def adaptive_edit(denoiser, text: str, ordered: list[Span], settings, context_tokens: int,
                  should_stop: Callable[[], bool], candidates=None, policy: AdaptiveLength = AdaptiveLength()) -> Iterator:
    """Rounds of engine.run_once with growing budgets; only the last round's done frame is yielded."""
    from .candidates import selected_tokens
    from .engine import EditFrame, run_once

    end_ids = denoiser.spec.end_ids
    selected = selected_tokens(text, ordered, denoiser.tokenizer)
    budgets = [start_budget(s, n, policy) for s, n in zip(ordered, selected)]
    room = denoiser.max_len // 2  # never let slots crowd out all context
    caps = [min(s.max_tokens or policy.max_tokens, room) for s in ordered]
    steps, seconds = 0, 0.0
    for round_ in range(policy.rounds):
        spans = [s if b is None else replace(s, max_tokens=b) for s, b in zip(ordered, budgets)]
        done = None
        for update in run_once(denoiser, text, spans, settings, context_tokens, should_stop, candidates):
            if update.done:
                done = update
            else:
                yield update
        if done is None:  # cancelled
            return
        frame, result = done.frame, done.result
        steps, seconds = steps + result.steps, seconds + result.seconds
        b = result.best_row
        used = list(result.candidates[0].lengths) if result.candidates else budgets
        used = [None if budget is None else n for budget, n in zip(budgets, used)]  # rewrites never grow
        if candidates is not None and candidates.exact and result.candidates:
            # Exact rows cannot end early, so "filled up" means: the longest rung won.
            top = [max(c.lengths[i] for c in result.candidates) for i in range(len(ordered))]
            filled = [n is not None and n == t for n, t in zip(used, top)]
        else:
            filled = [n is not None and filled_up(frame.final_ids[b][i], frame.final_confidence[b][i], n, end_ids, policy)
                      for i, n in enumerate(used)]
        grown = next_budgets(budgets, used, filled, caps, policy.grow)
        log.debug("adaptive round %d: budgets %s used %s filled %s -> %s", round_, budgets, used, filled, grown)
        if grown == budgets or round_ == policy.rounds - 1:
            break
        budgets = grown
    spans_back = tuple(replace(r, span=s) for r, s in zip(result.spans, ordered))  # offsets as the caller gave them
    yield EditFrame(frame, replace(result, spans=spans_back, steps=steps, seconds=seconds))
