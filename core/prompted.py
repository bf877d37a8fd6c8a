"""Edits for models that cannot see the text after a block: the text around a span goes in the prompt.

A block-causal model (SDAR, Fast-dLLM v2) reads only what precedes each block, so the
masked canvas of core/canvas.py, with the text after the span held after the slots, would
be invisible to it. Here each span becomes a prompt of its own, and its slots follow it:

- "chat": one user turn through the checkpoint's chat template: the task (the span's
  instruction, or "fill in" / "rewrite"), then the text around the span with the span marked
  (core/instruct.py's layout); the assistant's answer is the slots. The SDAR and Fast-dLLM v2
  releases are chat models and document only this form.
- "fim": Qwen's fill-in-the-middle tokens, `<|fim_prefix|>before<|fim_suffix|>after<|fim_middle|>`,
  where the tokenizer has them (the Qwen2.5 / Qwen3 vocabularies these releases inherit do).

A rewrite's slots start from the span's own tokens with a `strength` share masked (chosen by
the seed), so the kept draft is held and the model writes the rest; an infill's slots are all
masked. A revise span (Span.revise: a loop that edits its own tokens) starts from all of its
own tokens, none masked and none held, then REVISE_TAIL mask slots the answer may grow into. Several spans run one after another, each from the original text: no span's prompt
depends on another span's result. The text outside the spans is never re-encoded, so it comes
back byte for byte.
"""
from __future__ import annotations

import math

import torch

from .canvas import Canvas, encode_selection, infill_slots
from .models.denoiser import ModelSpec
from .errors import SpanError, UsageError
from .instruct import INFILL_TASK, REWRITE_TASK, clip_around, render_chat, user_message
from .spans import Span
from .tokenizer import Tokenizer

FIM_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
# Mask slots after a revise span's own tokens: room for the answer to grow. An edit a next-edit
# window takes (a longer name, a new argument, a short added line) adds up to about a line of
# code, 8-16 BPE tokens; every slot past that costs the loop a commit (at least one a step where
# the model is unsure), and a longer addition is a new line, which is the next window's to write.
# The model ends the answer with its end token in the first slot it does not need (LLaDA2's
# generate cuts the answer there).
REVISE_TAIL = 16


def prompt_form(spec: ModelSpec, requested: str) -> str:
    """The form a run uses: the user's ("chat" / "fim"), or the release's own for "auto"."""
    return spec.block.prompt if requested == "auto" else requested


def _prompt(form: str, text: str, span: Span, tokenizer: Tokenizer, spec: ModelSpec, budget: int) -> tuple[list[int], int, int]:
    """(prompt ids, characters of context before, after) within `budget` context tokens."""
    before, after = clip_around(text, span, budget, tokenizer)
    if form == "fim":
        ids = [tokenizer.token_id(t) for t in FIM_TOKENS]
        if None in ids:
            raise UsageError("--prompt fim needs the fill-in-the-middle tokens <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>; "
                             "this tokenizer lacks them (use --prompt chat)")
        prefix, suffix, middle = ids
        return [prefix, *tokenizer.encode(before), suffix, *tokenizer.encode(after), middle], len(before), len(after)
    if not spec.chat_template:
        raise UsageError("--prompt chat needs a chat template; this checkpoint has none (use --prompt fim)")
    task = span.instruction or (REWRITE_TASK if span.mode == "rewrite" else INFILL_TASK)
    message = user_message(task, before, text[span.start:span.end], after)
    return tokenizer.encode(render_chat(spec.chat_template, [{"role": "user", "content": message}])), len(before), len(after)


def prompt_canvas(text: str, span: Span, tokenizer: Tokenizer, spec: ModelSpec, form: str, context_tokens: int,
                  max_len: int, seed: int = 0) -> Canvas:
    """One span's prompt followed by its slots (all masked for an infill; a rewrite's own tokens
    with a `strength` share masked; a revise span's own tokens, then REVISE_TAIL masks), the
    context halved until it fits `max_len`."""
    selected = encode_selection(text[span.start:span.end], span, tokenizer, max_len)  # refused unencoded when it cannot fit
    draft = selected if span.mode == "rewrite" else []
    tail = REVISE_TAIL if span.revise else 0
    slots = len(draft) + tail if span.mode == "rewrite" else infill_slots(span, len(selected))
    budget = context_tokens
    while True:
        prompt, before, after = _prompt(form, text, span, tokenizer, spec, budget)
        if len(prompt) + slots <= max_len:
            break
        if budget == 0:
            raise SpanError(f"span {span.name}: its prompt and slots need {len(prompt) + slots} tokens but the model's canvas holds {max_len}")
        budget //= 2
    body = list(draft) + [spec.mask_id] * tail if draft else [spec.mask_id] * slots
    if draft and not span.revise:  # a revise span keeps every token of its draft: the loop edits them
        masked = math.ceil(span.strength * len(draft))  # strength 0 masks nothing: the draft comes back
        order = torch.randperm(len(draft), generator=torch.Generator().manual_seed(seed)).tolist()
        for i in order[:masked]:
            body[i] = spec.mask_id
    ids = (*prompt, *body)
    return Canvas(ids=tuple(ids), slots=(range(len(prompt), len(ids)),), spans=(span,),
                  window=(span.start - before, span.end + after), mask_id=spec.mask_id,
                  cut=before < span.start or after < len(text) - span.end)
