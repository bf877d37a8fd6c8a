"""The random-token loop (kind "random-token": DiffusionGemma): a canvas of noise refined into text, as Frames.

Masked diffusion (masked.py) starts every slot as the mask token and commits tokens
for good. Here a canvas starts as random tokens; each step the decoder proposes every
position (fed its previous logits: self-conditioning), a token is drawn for each, the
lowest-entropy draws are accepted while their summed entropy, less the largest, stays
within the entropy bound, and every other position is re-drawn at random. Acceptance is
decided afresh each step, so a token sharp now can be noise again next step. The run stops
at the step budget, or once the argmax canvas has repeated for `stability` steps and its
mean entropy is below `confidence`; the result is the last argmax canvas, cut at the
first end token of each span.

Every rule follows transformers' DiffusionGemma `generate` (EntropyBoundSampler, its
linear temperature schedule, StableAndConfidentStoppingCriteria), in the same order of
random draws, so with the same seed a plain canvas comes out token for token as `generate`
writes it (tests/test_diffusion_gemma.py). What sharpen adds is editing: canvas positions
outside the spans (the text after an infill, the gaps between spans) are held: set back to
the file's tokens after every step, never accepted or re-noised, left out of the entropy
budget and of the stopping rule, so the decoder sees both sides and the text comes back
byte for byte. A rewrite's slots start from the span's own tokens with a `strength` share
re-noised.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from ..canvas import Canvas
from ..constraints.noise_steering import NoiseSteering
from ..errors import SpanError
from ..settings import Sampling
from .frame import NOISE, SHARP, Frame


@dataclass(frozen=True)
class NoiseCanvas:
    """A masked-style Canvas split for an encoder-decoder: the context the encoder reads, the
    canvas the decoder refines (slots + held text), and which canvas positions are slots."""

    context: tuple[int, ...]  # encoder input: [bos] + the text before the first span
    ids: tuple[int, ...]  # the canvas: slot placeholders or rewrite drafts, held text between and after
    slots: tuple[range, ...]  # per span, its canvas positions
    source: Canvas  # what it was split from (spans, window)


def split_canvas(canvas: Canvas, bos_id: int | None, canvas_length: int) -> NoiseCanvas:
    """Everything before the first span goes to the encoder; the canvas holds the spans and
    what follows them, its tail (text after the last span) cut to fit `canvas_length`."""
    first = canvas.slots[0].start
    context = canvas.ids[:first]
    if bos_id is not None and (not context or context[0] != bos_id):
        context = (bos_id, *context)
    slots = tuple(range(r.start - first, r.stop - first) for r in canvas.slots)
    needed = slots[-1].stop
    if needed > canvas_length:
        raise SpanError(f"the spans and the text between them need {needed} tokens but the model's canvas holds {canvas_length}")
    return NoiseCanvas(tuple(context), tuple(canvas.ids[first:first + canvas_length]), slots, canvas)


def renoise(denoiser, layout: NoiseCanvas, settings: Sampling = Sampling(), should_stop: Callable[[], bool] = lambda: False,
            end_ids: tuple[int, ...] = ()) -> Iterator[Frame]:
    """Run the loop; yield a Frame per step (sharp = accepted this step); the last has done=True.

    `settings.steps` caps the step budget (default: generation_config.json's max_denoising_steps);
    `settings.seed` seeds every random draw; `settings.samples` rows run as one batch.
    """
    device = denoiser.device
    schedule = denoiser.schedule
    steps = settings.steps or schedule.max_steps
    V = denoiser.vocab_size
    B, C = settings.samples, len(layout.ids)
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    started = time.perf_counter()

    base = torch.tensor(layout.ids, device=device).repeat(B, 1)  # [B, C]
    free = torch.zeros(C, dtype=torch.bool, device=device)
    for r in layout.slots:
        free[r.start:r.stop] = True
    held = ~free
    any_held = bool(held.any())
    free_positions = free.nonzero().squeeze(-1)  # [F]
    context = denoiser.encode(torch.tensor(layout.context, device=device).repeat(B, 1), C)

    # transformers draws the starting noise even when it is handed a canvas: draw it first too.
    noise = torch.randint(0, V, (B, C), device=device, generator=generator)
    start_noise = _start_noise(layout, base, free, generator)  # [B, C] slots that start as noise
    x = torch.where(start_noise, noise, base)
    sharp = ~start_noise
    # Constrained spans: draws steered, accepted tokens settled, the answer filled by allowed tokens
    # (core/constraints/noise_steering.py); None when no span carries a constraint.
    steer = NoiseSteering.for_layout(denoiser, layout, B)
    if steer is not None:
        sharp = steer.prepare(x, sharp)  # ConstraintError before any pass when a span cannot match
    argmax = x.clone()
    confidence = torch.ones(B, C, device=device)
    self_conditioning = None
    history = None  # [stability, B, F] the last argmax canvases (free positions), for the stopping rule
    finished = torch.zeros(B, dtype=torch.bool, device=device)

    def frame(step: int, done: bool = False) -> Frame:
        final = scores = final_conf = None
        shown, shown_sharp = x, sharp
        if done:
            ended = _cut_at_end(argmax, layout.slots, end_ids)
            final = tuple(tuple(tuple(ended[b, r.start:r.stop].tolist()) for r in layout.slots) for b in range(B))
            final_conf = tuple(tuple(tuple(confidence[b, r.start:r.stop].tolist()) for r in layout.slots) for b in range(B))
            logp = confidence[:, free_positions].clamp_min(1e-9).log()
            scores = tuple(logp.mean(1).tolist())
            shown, shown_sharp = ended, torch.ones_like(sharp)
        state = torch.where(shown_sharp[0], SHARP, NOISE).to(torch.uint8)  # [C]
        return Frame(step, steps, time.perf_counter() - started, done, "random-token", shown[0].clone(), confidence[0].clone(),
                     argmax[0].clone(), state, layout.slots, final, scores, final_conf)

    yield frame(0)
    step = 0
    for steps_left in reversed(range(1, steps + 1)):
        if should_stop():
            return
        with torch.no_grad():  # as transformers' generate (torchao's quantized experts refuse inference mode)
            logits = denoiser.canvas_logits(x, self_conditioning, context)  # [B, C, V] float32
            left = torch.tensor(steps_left, device=device, dtype=torch.int32)
            scores_now = logits / schedule.temperature(left, steps)
            if steer is not None:
                scores_now = steer.constrain(scores_now, x, sharp)  # [B, C, V]
            probs = torch.softmax(scores_now, dim=-1, dtype=torch.float32)
            drawn = torch.multinomial(probs.view(-1, V), num_samples=1, generator=generator).view(B, C)
            best = torch.argmax(scores_now, dim=-1)  # [B, C]

            # Entropy-bound acceptance: the k lowest-entropy draws whose summed entropy, less
            # the largest of them, is within the bound (held positions never count).
            entropy = torch.distributions.Categorical(logits=scores_now).entropy()  # [B, C]
            ranked_entropy = entropy.masked_fill(held, math.inf) if any_held else entropy
            ordered, order = torch.sort(ranked_entropy, dim=-1, descending=False)
            chosen = torch.cumsum(ordered, dim=-1) - ordered <= schedule.entropy_bound
            accepted = torch.scatter(torch.zeros_like(chosen), -1, order, chosen)
            if steer is not None:  # the accepted draws together keep every span completable
                drawn = steer.settle(x, sharp, drawn, accepted, scores_now)
            kept = torch.where(accepted, drawn, x)
            fresh = torch.randint(0, V, (B, C), device=device, generator=generator)
            new_x = torch.where(~accepted, fresh, kept)
            if any_held:
                new_x = torch.where(held, base, new_x)

            if finished.any():  # a finished row keeps its state (samples > 1)
                best = torch.where(finished[:, None], argmax, best)
                new_x = torch.where(finished[:, None], x, new_x)
                accepted = torch.where(finished[:, None], sharp, accepted)
                scores_now = torch.where(finished[:, None, None], self_conditioning, scores_now)
            stable, history = _stable(best[:, free_positions], history, schedule.stability)
            free_entropy = torch.distributions.Categorical(logits=scores_now).entropy()[:, free_positions]
            finished |= stable & (free_entropy.mean(-1) < schedule.confidence)

            p_best = probs.max(-1).values
            confidence = torch.where(accepted, probs.gather(-1, new_x[..., None]).squeeze(-1), p_best)
            x, argmax, sharp = new_x, best, accepted | held
            self_conditioning = scores_now.to(denoiser.embedding_dtype)
        step += 1
        yield frame(step)
        if bool(finished.all()):
            break
    if steer is not None:  # the answer: accepted tokens, every other constrained slot its best allowed one
        answer = steer.finish(x, sharp, self_conditioning.float())
        argmax = torch.where(torch.isin(torch.arange(C, device=device), steer.slots)[None], answer, argmax)
    confidence = torch.softmax(self_conditioning.float(), -1).gather(-1, argmax[..., None]).squeeze(-1)
    yield frame(step, done=True)


def _start_noise(layout: NoiseCanvas, base: torch.Tensor, free: torch.Tensor, generator) -> torch.Tensor:
    """[B, C] the slots that start as noise: every infill slot; a `strength` share of each rewrite's."""
    B, C = base.shape
    out = free[None].repeat(B, 1)
    for span, r in zip(layout.source.spans, layout.slots):
        if span.mode != "rewrite" or not len(r):
            continue
        keep = len(r) - math.ceil(span.strength * len(r))  # draft tokens that stay
        for b in range(B):
            kept = torch.randperm(len(r), generator=generator, device=base.device)[:keep] + r.start
            out[b, kept] = False
    return out


def _stable(best: torch.Tensor, history: torch.Tensor | None, stability: int):
    """(stable [B], history): whether the argmax canvas repeated its last `stability` values."""
    if stability == 0:
        return torch.ones(best.shape[0], dtype=torch.bool, device=best.device), history
    if history is None:
        history = torch.full((stability, *best.shape), -1, dtype=best.dtype, device=best.device)
    stable = (history == best[None]).all(dim=-1).all(dim=0)
    history = torch.roll(history, shifts=-1, dims=0)
    history[-1] = best
    return stable, history


def _cut_at_end(ids: torch.Tensor, slots: tuple[range, ...], end_ids: tuple[int, ...]) -> torch.Tensor:
    """Each span's tokens from its first end token on become that end token (deleted later):
    what follows an answer's end is not part of it (transformers pads it the same way)."""
    if not end_ids:
        return ids
    out = ids.clone()
    ends = torch.tensor(end_ids, device=ids.device)
    for r in slots:
        region = out[:, r.start:r.stop]
        hit = torch.isin(region, ends)
        after = hit.cumsum(1) > 0
        first_end = torch.where(hit.any(1), region.gather(1, hit.int().argmax(1, keepdim=True)).squeeze(1), region[:, 0])
        out[:, r.start:r.stop] = torch.where(after, first_end[:, None], region)
    return out
