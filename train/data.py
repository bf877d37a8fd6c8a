"""Training examples for the masked-diffusion objective, in the sampler's canvas format.

Two kinds, both as (ids [L], maskable [L]); `mask_batch` then masks each sequence's
maskable positions at a ratio t ~ U(eps, 1):

- plain: a window of the token stream (files joined by eos); every position maskable.
- infill: [prefix][span tokens + pad ... pad][suffix], exactly like core/canvas.py lays an
  infill out at inference: no BOS, prefix and suffix encoded separately from the span,
  the prefix starting at a line start. Only the slots are maskable, so the model learns to
  write the span into the first slots and pad into the rest (variable-length infill).
"""
from __future__ import annotations

import bisect
import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def token_stream(tokenizer, texts: list[str], eos_id: int) -> torch.Tensor:
    """All texts encoded and joined by eos: [N] int32 (the plain-MDM windows come from here)."""
    ids: list[int] = []
    for encoding in tokenizer.hf.encode_batch(texts, add_special_tokens=False):
        ids.extend(encoding.ids)
        ids.append(eos_id)
    return torch.tensor(ids, dtype=torch.int32)


def lines_tail(text: str, budget: int, tokenizer) -> list[int]:
    """Tokens of the longest tail of `text` that starts at a line start and fits `budget`.

    Same rule as the canvas builder: context is cut at line boundaries, never mid-line.
    """
    if not text or budget <= 0:
        return []
    start = max(0, len(text) - budget * 8)  # a generous character window; never encode huge files whole
    if start > 0:
        start = text.find("\n", start - 1) + 1 or len(text)
    while True:
        ids = tokenizer.encode(text[start:])
        if len(ids) <= budget:
            return ids
        drop = max(1, int((len(ids) - budget) / len(ids) * (len(text) - start)))
        start = text.find("\n", start + drop - 1) + 1 or len(text)


def head_tokens(text: str, n: int, tokenizer) -> list[int]:
    """The first `n` tokens of `text` (fewer if the text is shorter)."""
    if n <= 0 or not text:
        return []
    window = n * 8
    while True:
        ids = tokenizer.encode(text[:window])
        if len(ids) >= n or window >= len(text):
            return ids[:n]
        window *= 2


@dataclass
class InfillConfig:
    max_span: int = 96  # longest span in tokens; inference spans beyond this are rare in an editor
    line_span_share: float = 0.75  # whole lines (the editor's and HumanEval's usual case); rest: a piece of a line
    keep_newline_share: float = 0.6  # whole-line spans that include their final newline


def _line_end(text: str, start: int) -> int:
    """Offset of the newline ending the line at `start` (len(text) for the last line)."""
    end = text.find("\n", start)
    return len(text) if end == -1 else end


def choose_span(text: str, rng: random.Random, cfg: InfillConfig) -> tuple[int, int] | None:
    """Character range of a span: 1..8 whole lines, or a piece of one line.

    The line is found from a random character offset (no per-file line index), which
    favours longer lines: blank and one-token lines are poor infill targets anyway.
    """
    if len(text) < 2:
        return None
    pos = rng.randrange(len(text))
    start = text.rfind("\n", 0, pos) + 1
    line_end = _line_end(text, start)
    content = text[start:line_end]
    if not content.strip():
        return None
    if rng.random() < cfg.line_span_share:
        k = rng.choices([1, 2, 3, 4, 6, 8], weights=[50, 20, 12, 8, 6, 4])[0]
        end = line_end
        for _ in range(k - 1):
            if end >= len(text) - 1:
                break
            end = _line_end(text, end + 1)
        if end < len(text) and rng.random() < cfg.keep_newline_share:
            end += 1
        return start, end
    indent = len(content) - len(content.lstrip())
    a = rng.randint(indent, len(content) - 1)
    b = len(content) if rng.random() < 0.5 else rng.randint(a + 1, len(content))
    return start + a, start + b


def slot_count(span_len: int, limit: int, rng: random.Random) -> int:
    """Slots for a span: its length plus random slack, so pad slots teach where it ends."""
    r = rng.random()
    if r < 0.15:
        slack = 0
    elif r < 0.6:
        slack = rng.randint(0, span_len)
    else:  # the editor gives ~1.5x + 4, a bare cursor 32: cover generous budgets too
        slack = rng.randint(0, 2 * span_len + 16)
    return min(limit, span_len + slack)


def infill_example(text: str, length: int, tokenizer, pad_id: int, rng: random.Random, cfg: InfillConfig = InfillConfig()):
    """(ids [length], maskable [length]) or None when this text cannot fill the canvas."""
    span = choose_span(text, rng, cfg)
    if span is None:
        return None
    start, end = span
    span_ids = tokenizer.encode(text[start:end])
    limit = min(cfg.max_span, length // 2)
    if not span_ids or len(span_ids) > limit:
        return None
    slots = slot_count(len(span_ids), limit, rng)
    rest = length - slots
    # Half the context before, half after, as the canvas builder budgets it; the suffix
    # fills the exact remainder (cut at a token, at the far end where it matters least).
    prefix = lines_tail(text[:start], rest // 2, tokenizer)
    suffix = head_tokens(text[end:], rest - len(prefix), tokenizer)
    if len(prefix) + len(suffix) < rest:  # near the end of a file: give the prefix more room
        prefix = lines_tail(text[:start], rest - len(suffix), tokenizer)
    if len(prefix) + len(suffix) != rest:
        return None
    ids = prefix + span_ids + [pad_id] * (slots - len(span_ids)) + suffix
    maskable = [False] * len(prefix) + [True] * slots + [False] * len(suffix)
    return torch.tensor(ids), torch.tensor(maskable)


class Batches:
    """Deterministic batches: half plain windows, half infill canvases, one length per batch."""

    def __init__(self, texts: list[str], stream: torch.Tensor, tokenizer, pad_id: int, seq_len: int,
                 batch_size: int, infill_share: float = 0.5, seed: int = 0) -> None:
        self.texts, self.stream, self.tokenizer, self.pad_id = texts, stream, tokenizer, pad_id
        self.seq_len, self.batch_size, self.infill_share = seq_len, batch_size, infill_share
        self.rng = random.Random(seed)
        self.cumulative = []
        total = 0
        for text in texts:  # pick files in proportion to their size
            total += len(text)
            self.cumulative.append(total)

    def state(self):
        return self.rng.getstate()

    def set_state(self, state) -> None:
        self.rng.setstate(state)

    def length(self) -> int:
        # Canvases at inference are often shorter than max_seq_len (small files, line cuts).
        if self.rng.random() < 0.6:
            return self.seq_len
        return self.rng.randint(self.seq_len // 4, self.seq_len)

    def plain(self, length: int):
        start = self.rng.randrange(len(self.stream) - length)
        return self.stream[start:start + length].long(), torch.ones(length, dtype=torch.bool)

    def infill(self, length: int):
        for _ in range(50):
            pick = bisect.bisect_right(self.cumulative, self.rng.randrange(self.cumulative[-1]))
            example = infill_example(self.texts[pick], length, self.tokenizer, self.pad_id, self.rng)
            if example is not None:
                return example
        return self.plain(length)  # only for a corpus of tiny files (tests)

    def next(self, plain_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [B, L] long, maskable [B, L] bool."""
        length = self.length()
        n_infill = 0 if plain_only else round(self.batch_size * self.infill_share)
        rows = [self.infill(length) for _ in range(n_infill)]
        rows += [self.plain(length) for _ in range(self.batch_size - n_infill)]
        return torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows])


def mask_batch(ids: torch.Tensor, maskable: torch.Tensor, mask_id: int, generator: torch.Generator, eps: float = 0.02):
    """Mask each row at its own ratio t ~ U(eps, 1) over its maskable positions.

    Returns (noisy ids [B, L], masked [B, L] bool, t [B]). Every row gets at least one
    masked position so its loss term is defined. eps bounds the 1/t weight at 1/eps.
    """
    B, L = ids.shape
    t = eps + (1 - eps) * torch.rand(B, generator=generator)  # [B]
    masked = (torch.rand(B, L, generator=generator) < t[:, None]) & maskable  # [B, L]
    # Rows with nothing masked: mask one random maskable position.
    empty = ~masked.any(1)
    if empty.any():
        scores = torch.rand(B, L, generator=generator).masked_fill(~maskable, -1.0)
        forced = torch.zeros_like(masked).scatter_(1, scores.argmax(1, keepdim=True), True)
        masked |= forced & empty[:, None]
    noisy = ids.masked_fill(masked, mask_id)
    return noisy, masked, t
