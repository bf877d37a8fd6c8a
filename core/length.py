"""Adaptive span length without an oracle: grow while the model fills the span, shrink by its pads.

A diffusion infill has to be given its length up front. Too short and the model crams or
truncates; too long and a weak model pads badly or rambles. So:

- a rewrite keeps its selection's own tokens (the draft), and pad/eos it writes are deleted;
- an infill starts from the selection's own token length (an insertion point: a small
  budget), and after each run, a span whose last slots hold confident non-pad tokens was
  cut short: it runs again with a longer canvas (x `grow`, bounded by `max_tokens`, the
  model's canvas and `rounds`). Pads the model writes inside the span shrink it as always.

This module is the policy only (pure functions on budgets and final slots); the rounds
themselves run in core/engine.py, which owns every denoising run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .spans import Span


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
