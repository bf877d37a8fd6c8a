"""Instructions on instruct checkpoints: the canvas is a chat, the answer is the mask slots.

A span with an instruction becomes one user turn (the instruction, then the text around the
span with the span marked) rendered by the checkpoint's own chat template, followed by the
assistant's turn: mask slots only. The model writes the replacement and ends its turn with
end-of-turn / pad tokens, which the engine deletes like any pad/eos. Spans without an
instruction never come here: plain masked infill stays plain.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from .canvas import Canvas, infill_slots
from .denoiser import ModelSpec
from .errors import ModelError, SpanError, UsageError
from .spans import Span
from .tokenizer import Tokenizer

OPEN, CLOSE = "<selection>", "</selection>"
TASK = (
    "Apply the instruction to the part of the text marked {open}...{close} and reply with only "
    "the new text for that part, without the markers and without explanations."
)


def uses_chat(spans: list[Span]) -> bool:
    """Whether this edit goes through the chat template (any span carries an instruction)."""
    return any(s.instruction for s in spans)


def render_chat(template: str, messages: list[dict], add_generation_prompt: bool = True) -> str:
    """Render a Hugging Face chat template the way transformers does (sandboxed jinja2)."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt))
    try:
        return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt)
    except jinja2.exceptions.TemplateError as exc:
        raise ModelError(f"the checkpoint's chat template failed: {exc}") from None


def user_message(instruction: str, before: str, region: str, after: str) -> str:
    """The user turn: what to do, then the text with the span marked in place."""
    return f"{instruction.strip()}\n\n{TASK.format(open=OPEN, close=CLOSE)}\n\n{before}{OPEN}{region}{CLOSE}{after}"


def clip_lines(text: str, budget: int, tokenizer: Tokenizer, keep_end: bool) -> str:
    """The longest run of whole lines at the end (keep_end) or start of `text` within `budget` tokens.

    The line touching the span is cut where the span starts, so it is kept first.
    """
    if budget <= 0 or not text:
        return ""
    lines = text.splitlines(keepends=True)
    kept: list[str] = []
    used = 0
    for line in reversed(lines) if keep_end else lines:
        used += len(tokenizer.encode(line))
        if used > budget:
            break
        kept.append(line)
    return "".join(reversed(kept) if keep_end else kept)


def build_instruct_canvas(
    text: str, spans: list[Span], tokenizer: Tokenizer, spec: ModelSpec, context_tokens: int, max_len: int
) -> Canvas:
    """Chat prompt + mask slots for the one span with an instruction (spans validated, sorted)."""
    if not spec.chat_template:
        raise UsageError("an instruction needs an instruct checkpoint with a chat template; this model has none")
    if len(spans) != 1:
        raise UsageError("an instruction applies to one span at a time; edit the other spans in a separate run")
    span = spans[0]
    region = text[span.start:span.end]
    slots = infill_slots(span, len(tokenizer.encode(region)))
    budget = context_tokens
    while True:
        before = clip_lines(text[: span.start], budget // 2, tokenizer, keep_end=True)
        after = clip_lines(text[span.end:], budget - budget // 2, tokenizer, keep_end=False)
        message = user_message(span.instruction or "", before, region, after)
        prompt = tokenizer.encode(render_chat(spec.chat_template, [{"role": "user", "content": message}]))
        if len(prompt) + slots <= max_len:
            break
        if budget == 0:
            raise SpanError(f"span {span.name}: the instruction and the span need {len(prompt) + slots} tokens "
                            f"but the model's canvas holds {max_len}")
        budget //= 2
    ids = tuple(prompt) + (spec.mask_id,) * slots
    window = (span.start - len(before), span.end + len(after))
    # The slots start fully masked, so the sampler treats the span as an infill.
    return Canvas(ids=ids, slots=(range(len(prompt), len(ids)),), spans=(replace(span, mode="infill"),),
                  window=window, mask_id=spec.mask_id)
