"""The block-causal kind (SDAR, Stable-DiffCoder, Fast-dLLM v2, LLaDA2): a prompt per span, a decode rule per release.

A block-causal model reads only what precedes each block, so each span becomes a prompt of its
own with its slots after it (core/prompted.py), and the spans run one after another as one
run's frames (`chained`). Which decode runs a canvas is the release's BlockRule (its reference
generate, core/models/families/) and the user's --editing: `decode_rule` picks one of

- block.py PLAIN: block diffusion (SDAR's generate.py, Stable-DiffCoder's generate_block,
  LLaDA2.0's generate);
- subblock.py SUB_BLOCK: Fast-dLLM v2's sub-blocks and token shift (BlockRule.sub_block);
- editing.py EDITING: LLaDA2.1's token-to-token editing (BlockRule.edits, --editing not off),
  the one rule that reads a revise span (Span.revise: its answer starts as its own tokens); the
  others refuse one.

Each rule shares core/loops/scaffold.py's set-up and frames. A setting is honoured where the
release's reference generate has the knob (block length, threshold, steps per block, top-k /
top-p, LLaDA2.1's editing thresholds) and refused in one line elsewhere (docs/models.md).
"""
from __future__ import annotations

import time
from typing import Callable, Iterator, Protocol, runtime_checkable

import torch

from ..canvas import Canvas
from ..errors import UsageError
from ..instruct import uses_chat
from ..models.denoiser import BlockRule, ModelSpec
from ..models.kv_cache import Attend, KVCache
from ..prompted import prompt_canvas, prompt_form
from ..request import EditRequest
from ..settings import Sampling
from ..spans import Span
from ..tokenizer import Tokenizer
from .block import PLAIN
from .editing import EDITING
from .frame import Frame, slot_states
from .kind import Prepared, model_name, refuse_revise, refuse_unread
from .masked import LoopRules
from .scaffold import DecodeRule, effective_rule
from .subblock import SUB_BLOCK

# What every block-causal decode reads: the sampling basics and the block length.
COMMON = frozenset({"seed", "samples", "temperature", "block_size"})


@runtime_checkable
class BlockDenoiserLike(Protocol):
    """What the block-causal loops read from a model: chunked passes under an attention policy
    (block-causal prefill, read-only open block, committing pass)."""

    spec: ModelSpec  # spec.block: block size, commit threshold, prompt form
    tokenizer: Tokenizer

    @property
    def device(self) -> torch.device: ...

    @property
    def max_len(self) -> int: ...

    @property
    def banned_ids(self) -> torch.Tensor: ...

    def logits(self, x: torch.Tensor, want: torch.Tensor | None = None, run: torch.Tensor | None = None,
               cache: KVCache | None = None, attend: Attend = ...) -> torch.Tensor: ...

    def new_cache(self, batch: int, length: int) -> KVCache: ...


def decode_rule(block: BlockRule, settings: Sampling) -> DecodeRule:
    """The decode a release runs (a rule field of its BlockRule picks it)."""
    if block.edits and settings.editing != "off":
        return EDITING
    if block.sub_block:
        return SUB_BLOCK
    return PLAIN


class BlockCausalKind:
    name = "block-causal"
    model = BlockDenoiserLike
    noise = "mask"

    def reads(self, denoiser, sampling: Sampling) -> frozenset[str]:
        block = denoiser.spec.block
        return COMMON | decode_rule(block, sampling).reads(block) | ({"editing"} if block.edits else set())

    def settings(self, denoiser, request: EditRequest) -> Sampling:
        name, s = model_name(denoiser), request.sampling
        if request.editing.candidates > 1:
            raise UsageError("--candidates needs a masked-diffusion model; this one writes block by block (use --samples for alternatives)")
        if s.block_size == 0:
            raise UsageError(f"--block-size 0 (one block) is for masked models; {name} decodes blocks of N >= 1 tokens")
        rule = decode_rule(denoiser.spec.block, s)
        refuse_unread(s, self.reads(denoiser, s), name, f"its decode is {rule.what}")
        if rule is not EDITING:  # only the editing decode replaces a token it holds
            refuse_revise(request, name, f"its decode is {rule.what}")
        return s

    def prepare(self, denoiser, request: EditRequest, spans: list[Span], settings: Sampling, plan) -> Prepared:
        spec = denoiser.spec
        if plan is not None:
            raise UsageError("--candidates needs a masked-diffusion model; this one writes block by block (use --samples for alternatives)")
        form = prompt_form(spec, request.editing.prompt)
        if form == "fim" and uses_chat(spans):
            raise UsageError("an instruction needs --prompt chat; fill-in-the-middle tokens have no place for it")
        canvases = tuple(prompt_canvas(request.text, s, denoiser.tokenizer, spec, form, request.editing.context_tokens,
                                       denoiser.max_len, settings.seed) for s in spans)
        return Prepared(denoiser, canvases, settings)

    def frames(self, prepared: Prepared, should_stop: Callable[[], bool], rules: LoopRules) -> Iterator[Frame]:
        rule = decode_rule(prepared.denoiser.spec.block, prepared.settings)
        return chained(prepared.denoiser, prepared.canvases, prepared.settings, should_stop, rule=rule)

    def used(self, prepared: Prepared, done: Frame) -> dict:
        block, settings = prepared.denoiser.spec.block, prepared.settings
        rule, effective = decode_rule(block, settings), effective_rule(block, settings)
        used = {"decode": rule.name, "block_size": effective.size, **rule.used(effective, settings)}
        if rule is PLAIN:  # per span: a release may clamp them to the answer's length (LLaDA2.0)
            used["steps_per_block"] = [rule.steps_per_block(effective, settings, len(c.slots[0])) for c in prepared.canvases]
        return used

    def slot_room(self, denoiser) -> int:
        return denoiser.max_len // 2


def chained(denoiser, canvases: tuple[Canvas, ...], settings: Sampling = Sampling(), should_stop: Callable[[], bool] = lambda: False,
            ban: bool = True, rule: DecodeRule = PLAIN) -> Iterator[Frame]:
    """Several spans one after another, each its own prompt canvas (core/prompted.py), as one
    run's frames: earlier spans show their result, the running one its blocks, later ones their
    starting slots (masks, a rewrite's kept draft, a revise span's own tokens)."""
    mask_id = denoiser.spec.mask_id
    lengths = [len(c.slots[0]) for c in canvases]
    starts = [sum(lengths[:j]) for j in range(len(lengths))]
    slots = tuple(range(s, s + n) for s, n in zip(starts, lengths))
    # [N] every span's slots, side by side, as each canvas starts them
    shown = torch.tensor([t for c in canvases for t in c.ids[c.slots[0].start:c.slots[0].stop]], dtype=torch.long)
    confidence, guesses = torch.zeros(sum(lengths)), shown.clone()
    state, replaced = slot_states(shown, mask_id), torch.zeros_like(shown)  # the running span's edited slots pass through
    counts: list[tuple[int, int]] = []
    effective = effective_rule(denoiser.spec.block, settings)
    size = effective.size
    total = sum((-(-len(c.ids) // size) - c.slots[0].start // size) * rule.steps_per_block(effective, settings, len(c.slots[0]))
                for c in canvases)
    finals, final_conf, scores = [], [], []
    base, started = 0, time.perf_counter()

    def frame(step: int, done: bool = False) -> Frame:
        final = conf = score = None
        if done:
            final = tuple(tuple(span[b] for span in finals) for b in range(settings.samples))
            conf = tuple(tuple(span[b] for span in final_conf) for b in range(settings.samples))
            score = tuple(sum(s[b] for s in scores) / len(scores) for b in range(settings.samples))
        return Frame(step, total, time.perf_counter() - started, done, "block-causal", shown.clone(), confidence.clone(),
                     guesses.clone(), state.clone(), slots, final, score, conf, _replaced=replaced.clone(),
                     edit_counts=tuple(counts) if done and len(counts) == len(canvases) else None)

    yield frame(0)
    for canvas, start, n in zip(canvases, starts, lengths):
        r = canvas.slots[0]
        last = None
        for last in rule.run(denoiser, canvas, settings, should_stop, ban):
            shown[start:start + n] = last._ids[r.start:r.stop].cpu()
            state[start:start + n] = last._state[r.start:r.stop].cpu()
            replaced[start:start + n] = last._replaced[r.start:r.stop].cpu() if last._replaced is not None else 0
            confidence[start:start + n] = last._confidence[r.start:r.stop].cpu()
            guesses[start:start + n] = last._guesses[r.start:r.stop].cpu()
            if last.step and not last.done:
                yield frame(base + last.step)
        if last is None or not last.done:  # cancelled
            return
        base += last.step
        finals.append([sample[0] for sample in last.final_ids])
        final_conf.append([sample[0] for sample in last.final_confidence])
        scores.append(last.sample_scores)
        if last.edit_counts is not None:
            counts.append(last.edit_counts[0])
    yield frame(base, done=True)
