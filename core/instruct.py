"""Instructions on instruct checkpoints: the canvas is a chat, the answer is the mask slots.

A span with an instruction becomes one user turn (the instruction, then the text around the
span with the span marked) rendered by the checkpoint's own chat template, followed by the
assistant's turn: mask slots only. The model writes the replacement and ends its turn with
end-of-turn / pad tokens, which the engine deletes like any pad/eos. Spans without an
instruction never come here: plain masked infill stays plain.
"""
from __future__ import annotations

import sys
import time
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from .canvas import Canvas, encode_selection, infill_slots
from .errors import ModelError, SpanError, UsageError
from .spans import Span
from .tokenizer import Tokenizer

if TYPE_CHECKING:  # a type only: a chat turn for a server (app/remote.py) loads no model code (torch)
    from .models.denoiser import ModelSpec

OPEN, CLOSE = "<selection>", "</selection>"
TASK = (
    "Apply the instruction to the part of the text marked {open}...{close} and reply with only "
    "the new text for that part, without the markers and without explanations."
)
# The task when the user gave no instruction (the instruction text, when given, replaces it).
INFILL_TASK = "Write the missing text at the marked place."
REWRITE_TASK = "Rewrite the marked part: keep what it does, improve how it reads."


def uses_chat(spans: list[Span]) -> bool:
    """Whether this edit goes through the chat template (any span carries an instruction)."""
    return any(s.instruction for s in spans)


# A chat template is code from the checkpoint: its rendering is bounded in time and in output, and
# any failure of it (a division by zero, a recursive macro) is the checkpoint's, one line.
RENDER_SECONDS = 2.0  # real templates render in milliseconds
RENDER_CHARS = 4 * 2**20  # far above any prompt a canvas holds


class _TemplateTooCostly(Exception):
    pass


def render_chat(template: str, messages: list[dict], add_generation_prompt: bool = True) -> str:
    """Render a Hugging Face chat template the way transformers does (sandboxed jinja2), bounded:
    at most RENDER_SECONDS (a line-trace clock on the template's own code, so nested loops that
    print nothing still stop) and RENDER_CHARS of output or of any string or list it builds by
    `*` or `+`."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "+", "**"])

        def call_binop(self, context, operator, left, right):
            if operator == "**" and isinstance(right, int) and abs(right) > 64:
                raise _TemplateTooCostly(f"a power of {right}")
            if operator == "*" and isinstance(left, int) and isinstance(right, (str, list, tuple)):
                left, right = right, left
            if operator == "*" and isinstance(left, (str, list, tuple)) and isinstance(right, int) and len(left) * right > RENDER_CHARS:
                raise _TemplateTooCostly(f"a value of {len(left) * right:,} items")
            if operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)) \
                    and len(left) + len(right) > RENDER_CHARS:
                raise _TemplateTooCostly(f"a value of {len(left) + len(right):,} items")
            return super().call_binop(context, operator, left, right)

    env = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt))
    deadline = time.monotonic() + RENDER_SECONDS

    def on_line(frame, event, arg):
        if time.monotonic() > deadline:
            raise _TemplateTooCostly(f"more than {RENDER_SECONDS:g} s")
        return on_line

    def on_call(frame, event, arg):  # trace only the template's own code: jinja compiles it to "<template>"
        return on_line if frame.f_code.co_filename == "<template>" else None

    previous = sys.gettrace()
    try:
        compiled = env.from_string(template)
        out, size = [], 0
        sys.settrace(on_call)
        try:
            for piece in compiled.generate(messages=messages, add_generation_prompt=add_generation_prompt):
                size += len(piece)
                if size > RENDER_CHARS:
                    raise _TemplateTooCostly(f"more than {RENDER_CHARS:,} characters of output")
                out.append(piece)
        finally:
            sys.settrace(previous)
        return "".join(out)
    except _TemplateTooCostly as exc:
        raise ModelError(f"the checkpoint's chat template is too costly to render ({exc}); refusing it") from None
    except jinja2.exceptions.TemplateError as exc:
        raise ModelError(f"the checkpoint's chat template failed: {exc}") from None
    except RecursionError:
        raise ModelError("the checkpoint's chat template failed: it recurses without end") from None
    except Exception as exc:  # the template is the checkpoint's code: whatever it raises is its failure
        raise ModelError(f"the checkpoint's chat template failed: {type(exc).__name__}: {exc}") from None


def instruction_refusal(spec: ModelSpec) -> str:
    """Why `spec` takes no instruction, in one line."""
    if spec.chat_template:
        return (f"an instruction needs an instruct checkpoint; {spec.name or spec.family} was not tuned to follow instructions "
                "(its chat template only writes a conversation down)")
    return "an instruction needs an instruct checkpoint with a chat template; this model has none"


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
        if tokenizer.fewest_tokens(line) > budget - used:
            break  # cannot fit: never encode it (a 50 MB line would take gigabytes to find that out)
        used += len(tokenizer.encode(line))
        if used > budget:
            break
        kept.append(line)
    return "".join(reversed(kept) if keep_end else kept)


def clip_around(text: str, span: Span, budget: int, tokenizer: Tokenizer) -> tuple[str, str]:
    """The text before and after `span` within `budget` tokens in whole lines: half each, and a
    side that needs less than its half leaves the rest to the other (an edit at the end of a file
    reads the whole budget before it)."""
    head, tail = text[: span.start], text[span.end:]
    after = clip_lines(tail, budget - budget // 2, tokenizer, keep_end=False)  # the text after first, as build_canvas
    whole = len(after) == len(tail)
    before = clip_lines(head, budget - len(tokenizer.encode(after)) if whole else budget // 2, tokenizer, keep_end=True)
    if not whole and len(before) == len(head):
        after = clip_lines(tail, budget - len(tokenizer.encode(before)), tokenizer, keep_end=False)
    return before, after


def build_instruct_canvas(
    text: str, spans: list[Span], tokenizer: Tokenizer, spec: ModelSpec, context_tokens: int, max_len: int
) -> Canvas:
    """Chat prompt + mask slots for the one span with an instruction (spans validated, sorted)."""
    if not spec.takes_instructions:
        raise UsageError(instruction_refusal(spec))
    if len(spans) != 1:
        raise UsageError("an instruction applies to one span at a time; edit the other spans in a separate run")
    span = spans[0]
    region = text[span.start:span.end]
    slots = infill_slots(span, len(encode_selection(region, span, tokenizer, max_len)))
    budget = context_tokens
    while True:
        before, after = clip_around(text, span, budget, tokenizer)
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
                  window=window, mask_id=spec.mask_id, cut=len(before) < span.start or len(after) < len(text) - span.end)
