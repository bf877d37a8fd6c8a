"""Zed's first Zeta prompt (the `zeta` model, Qwen2.5-Coder-7B tuned; `"prompt_format": "zeta"` on
Zed's OpenAI-compatible provider).

Layout from zed-industries/zed crates/zeta_prompt (module zeta1: format_zeta1_prompt,
format_zeta1_excerpt, clean_zeta1_model_output):

    ### Instruction:
    You are a code completion assistant and your task is ... the cursor location.

    ### User Edits:

    User edited a.py:                          (each edit; "\\n\\n" between them; a renamed
    ```diff                                      file first says "User renamed OLD to NEW")
    @@ ... @@
    ```

    ### User Excerpt:

    ```a.py
    <|start_of_file|>                           (when the excerpt starts the file)
    ...text before the editable region...<|editable_region_start|>
    ...region with <|user_cursor_is_here|>...
    <|editable_region_end|>...text after...
    ```

    ### Response:

The model writes the excerpt again with the region rewritten; Zed stops at `<|editable_region_end|>`
and takes what follows `<|editable_region_start|>\\n` (less the newline before the end marker when
it is there) as the new region. The answer here is that part alone: the start marker, the new
region, the end marker. No edit is the region unchanged (Zed finds no edit in it).
"""
from __future__ import annotations

import re

from .common import FormatError, PromptParts
from ..history import EditEvent
from ..request import NextEditRequest, Window

NAME = "zeta1"
INSTRUCTION = ("### Instruction:\nYou are a code completion assistant and your task is to analyze user edits and then rewrite an "
               "excerpt that the user provides, suggesting the appropriate edits within the excerpt, taking into account the "
               "cursor location.\n\n### User Edits:\n\n")
EXCERPT, RESPONSE = "\n\n### User Excerpt:\n\n", "\n\n### Response:\n"
CURSOR, START_OF_FILE = "<|user_cursor_is_here|>", "<|start_of_file|>"
REGION_START, REGION_END = "<|editable_region_start|>", "<|editable_region_end|>"
STOP = (REGION_END,)
_EDIT = re.compile(r"User edited (?P<path>[^\n]*):\n```diff\n(?P<diff>.*?)\n```(?=\n\n|$)", re.S)


def build(request: NextEditRequest, window: Window | None = None) -> str:
    """The prompt for `request`'s window, the whole text as the excerpt."""
    w = window or request.cursor_window
    text, cursor = request.text, min(max(request.cursor, w.start), w.end)
    events = "\n\n".join(_event(e) for e in request.history if e.diff or e.old_path)
    # The excerpt is the whole text, so it starts the file: Zed then writes <|start_of_file|>.
    excerpt = (f"```{request.path}\n{START_OF_FILE}\n{text[:w.start]}{REGION_START}\n{text[w.start:cursor]}{CURSOR}"
               f"{text[cursor:w.end]}\n{REGION_END}{text[w.end:]}\n```")
    return INSTRUCTION + events + EXCERPT + excerpt + RESPONSE


def _event(event: EditEvent) -> str:
    renamed = f"User renamed {event.old_path} to {event.path}\n\n" if event.old_path and event.old_path != event.path else ""
    return renamed + (f"User edited {event.path}:\n```diff\n{event.diff}\n```" if event.diff else "")


def parse_prompt(prompt: str) -> PromptParts:
    if not prompt.startswith("### Instruction:") or EXCERPT not in prompt or not prompt.endswith(RESPONSE):
        raise FormatError("not a Zeta 1 prompt: it must read ### Instruction: ... ### User Excerpt: ... ### Response:")
    edits, _, excerpt = prompt[len(INSTRUCTION):-len(RESPONSE)].rpartition(EXCERPT)
    head, _, body = excerpt.partition("\n")
    if not head.startswith("```") or not body.endswith("\n```"):
        raise FormatError("the Zeta 1 excerpt must be a ``` block that names its file")
    body = body[:-len("\n```")].removeprefix(START_OF_FILE + "\n")
    before, found, rest = body.partition(REGION_START + "\n")
    region, found_end, after = rest.partition("\n" + REGION_END)
    if not found or not found_end:
        raise FormatError("the Zeta 1 excerpt has no <|editable_region_start|> ... <|editable_region_end|> region")
    if region.count(CURSOR) > 1:
        raise FormatError("the editable region has more than one <|user_cursor_is_here|>")
    at = region.find(CURSOR)
    history = tuple(EditEvent(m.group("path"), with_end(m.group("diff"))) for m in _EDIT.finditer(edits))
    return PromptParts(NAME, head[3:], region.replace(CURSOR, ""), len(region) if at == -1 else at, before, after, history)


def with_end(diff: str) -> str:
    return diff if diff.endswith("\n") else diff + "\n"


def render_answer(old: str, new: str, cursor: int | None = None) -> str:
    return f"{REGION_START}\n{new}\n{REGION_END}"


def parse_answer(answer: str, old: str) -> str:
    """clean_zeta1_model_output: after the start marker (and its newline) up to the end marker (less
    the newline before it), the cursor marker dropped; the whole answer when a marker is missing."""
    text = answer.replace(CURSOR, "")
    start = text.find(REGION_START)
    start = 0 if start == -1 else start + len(REGION_START) + (text[start + len(REGION_START):].startswith("\n"))
    end = text.find(REGION_END)
    end = len(text) if end == -1 else end - (end > 0 and text[end - 1] == "\n")
    return text[start:max(start, end)]
