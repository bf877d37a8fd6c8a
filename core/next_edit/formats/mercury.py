"""Inception's Mercury Edit / Copilot's xtab tag format.

Layout as Zed sends it (zed-industries/zed crates/edit_prediction/src/mercury.rs) and as
cursortab.nvim's recorded Mercury requests show it, with a blank line between sections:

    <|recently_viewed_code_snippets|>
    <|recently_viewed_code_snippet|>
    code_snippet_file_path: other.py
    ...snippet...
    <|/recently_viewed_code_snippet|>
    <|/recently_viewed_code_snippets|>

    <|current_file_content|>
    current_file_path: a.py
    ...text before the window...<|code_to_edit|>
    ...window with <|cursor|>...<|/code_to_edit|>
    ...text after...<|/current_file_content|>

    <|edit_diff_history|>
    --- a.py
    +++ a.py
    @@ -1 +1 @@
    ...
    <|/edit_diff_history|>

The answer is the rewritten window, in a ``` fence, or `None` for no prediction.
"""
from __future__ import annotations

import re

from .common import FormatError, PromptParts, parse_events, window_text, with_newline
from ..request import NextEditRequest, Snippet

NAME = "mercury"
NO_PREDICTION = "None"
CURSOR = "<|cursor|>"
FENCE = "```"


def build(request: NextEditRequest, window=None) -> str:
    before, region, after, cursor = window_text(request, window)
    snippets = "".join(f"<|recently_viewed_code_snippet|>\ncode_snippet_file_path: {s.path}\n{with_newline(s.text)}"
                       "<|/recently_viewed_code_snippet|>\n" for s in request.snippets)
    history = "".join(e.unified(prefix=False) + "\n" for e in request.history)
    return (f"<|recently_viewed_code_snippets|>\n{snippets}<|/recently_viewed_code_snippets|>\n\n"
            f"<|current_file_content|>\ncurrent_file_path: {request.path}\n{before}<|code_to_edit|>\n"
            f"{region[:cursor]}{CURSOR}{region[cursor:]}<|/code_to_edit|>\n{after}<|/current_file_content|>\n\n"
            f"<|edit_diff_history|>\n{history}<|/edit_diff_history|>\n")


def _between(text: str, start: str, end: str, what: str) -> str:
    i, j = text.find(start), text.rfind(end)
    if i == -1 or j == -1 or j < i:
        raise FormatError(f"the prompt has no {what} section ({start} ... {end})")
    return text[i + len(start):j]


def parse_prompt(prompt: str) -> PromptParts:
    content = _between(prompt, "<|current_file_content|>\n", "<|/current_file_content|>", "current file")
    path, _, body = content.partition("\n")
    path = path.removeprefix("current_file_path: ")
    before, _, rest = body.partition("<|code_to_edit|>\n")
    region, sep, after = rest.partition("<|/code_to_edit|>\n")
    if not sep:
        region, _, after = rest.partition("<|/code_to_edit|>")
    if region.count(CURSOR) > 1:
        raise FormatError("the code to edit has more than one <|cursor|>")
    cursor = region.find(CURSOR)
    cursor = len(region) if cursor == -1 else cursor
    region = region.replace(CURSOR, "")
    snippets = []
    if "<|recently_viewed_code_snippets|>" in prompt:
        viewed = _between(prompt, "<|recently_viewed_code_snippets|>", "<|/recently_viewed_code_snippets|>", "recently viewed")
        for block in re.findall(r"<\|recently_viewed_code_snippet\|>\n(.*?)<\|/recently_viewed_code_snippet\|>", viewed, re.S):
            head, _, text = block.partition("\n")
            snippets.append(Snippet(head.removeprefix("code_snippet_file_path: "), text))
    history = ()
    if "<|edit_diff_history|>" in prompt:
        history = parse_events(_between(prompt, "<|edit_diff_history|>\n", "<|/edit_diff_history|>", "edit history"))
    return PromptParts(NAME, path, region, cursor, before, after, history, tuple(snippets))


def render_answer(old: str, new: str, cursor: int | None = None) -> str:
    """What Mercury answers: the rewritten window fenced, or `None` when nothing changes."""
    if new == old:
        return NO_PREDICTION
    return f"{FENCE}\n{new}{'' if new.endswith(chr(10)) else chr(10)}{FENCE}"


def parse_answer(answer: str, old: str) -> str:
    """The new window from an answer (`old` for `None`), as Zed reads it: the fence stripped."""
    text = answer.strip() if answer.strip() == NO_PREDICTION else answer
    if text == NO_PREDICTION:
        return old
    text = text.removeprefix(FENCE + "\n").removesuffix("\n" + FENCE).removesuffix(FENCE)
    if old.endswith("\n") and not text.endswith("\n"):
        text += "\n"  # the fence's own line break: the window keeps its last newline
    return text
