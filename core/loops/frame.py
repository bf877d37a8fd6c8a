"""What every denoising loop yields: a Frame per step, read by front ends through public fields.

A front end (the editor's preview, the headless progress line, a server's draft stream)
reads `Frame.spans`: per span, per slot, the token shown, how sure the model is, its
current guess and the slot's *state*, one of SLOT_STATES:

- "masked": the slot holds the mask token (masked and block-causal loops); drawn as blur.
- "noise":  the slot holds a random token that is not accepted (random-token loops); drawn faint.
- "sharp":  the slot holds a committed (or, random-token, accepted) token.
- "edited": a token committed earlier was replaced by another one (a loop that edits its own
  output, e.g. LLaDA2.1's token-to-token editing); drawn as an edit, `replaced` holds the old id.

Frames keep device tensors and turn them into Python values only when `spans` is read, so a
consumer that only wants the result pays no host copy per step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch

SLOT_STATES = ("masked", "noise", "sharp", "edited")
# Codes of the per-position state tensor a loop hands to its Frame (index into SLOT_STATES).
MASKED, NOISE, SHARP, EDITED = range(len(SLOT_STATES))
UNSHARP = ("masked", "noise")  # states whose slot shows no token yet


@dataclass(frozen=True)
class SpanState:
    tokens: tuple[int | None, ...]  # the token each slot shows as text; None where masked or noise
    confidence: tuple[float, ...]  # probability at commit, or of the current guess while unsharp
    guesses: tuple[int, ...]  # the model's current best token for every slot (the blurry preview)
    states: tuple[str, ...]  # per slot, one of SLOT_STATES
    # Per slot, the random token a "noise" slot holds this step; None elsewhere (and for loops without noise).
    noise: tuple[int | None, ...] | None = None
    # Per slot, the token an "edited" slot held before the loop replaced it; None elsewhere.
    replaced: tuple[int | None, ...] | None = None


def slot_states(canvas: torch.Tensor, mask_id: int) -> torch.Tensor:
    """The state codes of a masked canvas: MASKED where it holds the mask, else SHARP. [T] -> [T] uint8."""
    return torch.where(canvas == mask_id, MASKED, SHARP).to(torch.uint8)


@dataclass(frozen=True)
class Frame:
    step: int  # 0 is the starting canvas (for rewrites: the re-noised draft)
    total_steps: int  # planned steps; threshold commits may finish earlier
    elapsed: float  # seconds since the loop started
    done: bool
    loop: str  # the kind of loop that made it (core.loops.LOOPS)
    _ids: torch.Tensor = field(repr=False)  # [T] first sample's canvas at this step
    _confidence: torch.Tensor = field(repr=False)  # [T]
    _guesses: torch.Tensor = field(repr=False)  # [T]
    _state: torch.Tensor = field(repr=False)  # [T] uint8 codes into SLOT_STATES
    _slots: tuple[range, ...] = field(repr=False)  # per span, its canvas positions
    final_ids: tuple[tuple[tuple[int, ...], ...], ...] | None = None  # done only: [sample][span] slot ids
    sample_scores: tuple[float, ...] | None = None  # done only: mean log-probability of each sample's slots
    final_confidence: tuple[tuple[tuple[float, ...], ...], ...] | None = None  # done only: [sample][span] per-slot probability
    _replaced: torch.Tensor | None = field(default=None, repr=False)  # [T] the id an EDITED position held before
    # done only, loops that edit their own tokens (core/loops/editing.py): per span, (mask-to-token
    # commits, token-to-token edits) of the first sample, for --json and the status line.
    edit_counts: tuple[tuple[int, int], ...] | None = None

    @cached_property
    def spans(self) -> tuple[SpanState, ...]:
        """Per span, the first sample's state (converted from device tensors on first read)."""
        row, conf, guess = self._ids.tolist(), self._confidence.tolist(), self._guesses.tolist()
        codes = self._state.tolist()
        replaced = self._replaced.tolist() if self._replaced is not None else None
        out = []
        for r in self._slots:
            states = tuple(SLOT_STATES[codes[p]] for p in r)
            out.append(SpanState(
                tokens=tuple(None if s in UNSHARP else row[p] for p, s in zip(r, states)),
                confidence=tuple(conf[p] for p in r),
                guesses=tuple(guess[p] for p in r),
                states=states,
                noise=tuple(row[p] if s == "noise" else None for p, s in zip(r, states)) if "noise" in states else None,
                replaced=tuple(replaced[p] if s == "edited" else None for p, s in zip(r, states)) if replaced and "edited" in states else None,
            ))
        return tuple(out)

    @cached_property
    def masked(self) -> int:
        """Slots that show no token yet (masked or noise)."""
        return sum(s in UNSHARP for span in self.spans for s in span.states)

    def sharp_slots(self) -> torch.Tensor:
        """[] the count of slots that show a token, on the canvas's device: a consumer that keeps it
        every step and converts the lot once at the end reads the host once per run, not per step
        (`spans` and `masked` read it on first use)."""
        positions = torch.arange(self._state.shape[0], device=self._state.device)  # [T]
        in_slots = torch.zeros_like(positions, dtype=torch.bool)
        for r in self._slots:
            in_slots |= (positions >= r.start) & (positions < r.stop)
        sharp = self._state >= SLOT_STATES.index("sharp")  # codes past the unsharp ones: sharp, edited
        return (in_slots & sharp).sum()

    @property
    def unsharp_name(self) -> str:
        """What an unsharp slot is in this loop, for progress lines: "noise" or "masked"."""
        return "noise" if self.loop == "random-token" else "masked"


def finished_rows(x: torch.Tensor, confidence: torch.Tensor, written: torch.Tensor, slots: range):
    """A done frame's per-row results: each row's slot tokens and their confidences, and its score,
    the mean log-confidence over the positions the run wrote (`written` [B, T'] lines up with
    `confidence`'s first T' columns)."""
    rows = range(x.shape[0])
    final = tuple((tuple(x[b, slots.start:slots.stop].tolist()),) for b in rows)
    final_conf = tuple((tuple(confidence[b, slots.start:slots.stop].tolist()),) for b in rows)
    kept = confidence[:, :written.shape[1]]
    logp = torch.where(written, kept.clamp_min(1e-9).log(), torch.zeros_like(kept))
    scores = tuple((logp.sum(1) / written.sum(1).clamp_min(1)).tolist())
    return final, final_conf, scores
