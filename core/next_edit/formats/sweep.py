"""Sweep's next-edit prompt (sweep-next-edit 0.5B / 1.5B / 7B): `<|file_sep|>` blocks.

Layout from the sweep-next-edit model card and cursortab.nvim's sweep provider and recorded
requests (lines joined with '\\n', the window's line range 1-based and inclusive):

    <|file_sep|>a.py                     the file around the window
    ...
    <|file_sep|>context/retrieval        recently viewed files (when there are any)
    <|file_sep|>other.py
    ...
    <|file_sep|>a.py.diff                one block per recent edit
    original:
    ...removed lines...
    updated:
    ...added lines...
    <|file_sep|>original/a.py:3:9        the window as it was
    <|file_sep|>current/a.py:3:9         the window now, with <|cursor|>
    <|file_sep|>updated/a.py:3:9         prefilled with the window's lines above the cursor's
    ...

The model continues the updated block (stop: `<|file_sep|>`, `<|endoftext|>`); the new window
is the prefill followed by the answer. An unchanged window is "no edit".

Zed's own Sweep prompt (crates/edit_prediction/src/sweep_prompt.rs, `"prompt_format": "sweep"` on
its OpenAI-compatible provider) is the same blocks written differently, and is read as Zed means it:
no whole-file block (the related files come first, as bare `<|file_sep|>path` blocks), block names
without the `:first:last` line range, `original/` the window before the latest edit, `current/`
without a `<|cursor|>` (the cursor is taken where the two windows differ, else at the window's end),
and an empty `updated/` block. Zed's window is whole lines without the last line's newline, and
`write_file_block` adds that newline to the prompt: it is the block's separator, not window text.
Zed compares the answer (cut at `<|file_sep|>` or `</s>`) with its window byte for byte and diffs
the two, so the answer is the whole new window without that newline.
"""
from __future__ import annotations

import re

from .common import FormatError, PromptParts, window_text
from ..history import EditEvent, unified_diff
from ..request import NextEditRequest, Snippet

NAME = "sweep"
SEP = "<|file_sep|>"
CURSOR = "<|cursor|>"
STOP = (SEP, "<|endoftext|>")
WINDOW_LINES_ABOVE = WINDOW_LINES_BELOW = 10  # Zed's sweep_prompt.rs window around the cursor's line
_BLOCK = re.compile(r"^(original|current|updated)/(.*?)(?::(\d+):(\d+))?$")


def _lines(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text


def prefill_of(region: str, cursor: int) -> str:
    """The window's whole lines above the cursor's line: what the updated block starts with."""
    return region[:region.rfind("\n", 0, cursor) + 1]


def build(request: NextEditRequest, window=None) -> str:
    before, region, after, cursor = window_text(request, window)
    first = before.count("\n") + 1
    last = first + max(0, _lines(region).count("\n"))
    where = f"{request.path}:{first}:{last}"
    out = [f"{SEP}{request.path}\n{_lines(before + region + after)}\n"]
    if request.snippets:
        out.append(f"{SEP}context/retrieval\n" + "".join(f"{SEP}{s.path}\n{_lines(s.text)}\n" for s in request.snippets))
    for event in request.history:
        old, new = event.sides()
        out.append(f"{SEP}{event.path}.diff\noriginal:\n{_lines(old)}\nupdated:\n{_lines(new)}\n")
    shown = _lines(region)
    at = min(cursor, len(shown))
    out.append(f"{SEP}original/{where}\n{shown}\n{SEP}current/{where}\n{shown[:at]}{CURSOR}{shown[at:]}\n")
    out.append(f"{SEP}updated/{where}\n{prefill_of(region, cursor)}")
    return "".join(out)


def parse_prompt(prompt: str) -> PromptParts:
    blocks = prompt.split(SEP)[1:]
    named = []
    for block in blocks:
        head, _, body = block.partition("\n")
        named.append((head, body))
    kinds = {}
    for head, body in named:
        m = _BLOCK.match(head)
        if m:
            kinds[m.group(1)] = (m, body)
    if not {"current", "updated"} <= set(kinds):
        raise FormatError("not a Sweep prompt: it needs current/ and updated/ blocks")
    m, current = kinds["current"]
    path = m.group(2)
    zed = m.group(3) is None  # Zed's layout: no line range in the block names (module docstring)
    current = current.removesuffix("\n")
    if current.count(CURSOR) > 1:
        raise FormatError("the current block has more than one <|cursor|>")
    cursor = current.find(CURSOR)
    region = current.replace(CURSOR, "") + "\n"
    cursor = len(region) - 1 if cursor == -1 else cursor  # no marker: the window's last line's end
    if zed:
        region, cursor = _zed_window(region, kinds["original"][1] if "original" in kinds else region)
    prefill = kinds["updated"][1]
    history, snippets, before, after = [], [], "", ""
    for head, body in named:
        if _BLOCK.match(head) or head.startswith("context/"):
            continue
        if head.endswith(".diff") and body.startswith("original:\n") and "\nupdated:\n" in body:
            old, _, new = body[len("original:\n"):].partition("\nupdated:\n")
            history.append(_event(head[:-len(".diff")], old, new.removesuffix("\n")))
            continue
        if head == path and not zed and not before and not after:  # cursortab's whole-file block
            whole = body.removesuffix("\n") + "\n"
            at = whole.find(region)
            if at != -1:
                before, after = whole[:at], whole[at + len(region):]
                continue
        snippets.append(Snippet(head, body))  # a recently viewed file (cursortab's context/retrieval, Zed's related files)
    return PromptParts(NAME, path, region, cursor, before, after, tuple(history), tuple(snippets), prefill, "zed" if zed else "")


def _zed_window(block: str, original: str) -> tuple[str, int]:
    """(window, cursor) of Zed's `current/` block (which ends with a newline). The cursor is where
    the latest edit ended (the end of what differs from `original/`), else on the window's 11th line
    (sweep_prompt.rs takes 10 lines above and below the cursor's). The block's last newline is the
    window's own only when the window reached the end of a file that ends with one: then fewer
    than 9 whole lines follow the cursor's (the file's empty last line is the 10th)."""
    lines = block[:-1].split("\n")
    if original != block:
        suffix = 0
        while suffix < min(len(original), len(block)) and original[-1 - suffix] == block[-1 - suffix]:
            suffix += 1
        cursor = len(block) - suffix
    else:
        row = min(WINDOW_LINES_ABOVE, len(lines) - 1)
        cursor = sum(len(line) + 1 for line in lines[:row]) + len(lines[row])
    below = len(lines) - 1 - block[:cursor].count("\n")
    window = block if below < WINDOW_LINES_BELOW - 1 else block[:-1]
    return window, min(cursor, len(window))


def _event(path: str, old: str, new: str) -> EditEvent:
    return EditEvent(path, unified_diff(old + "\n", new + "\n"))


def render_answer(old: str, new: str, cursor: int | None = None, prefill: str | None = None, layout: str = "") -> str:
    """The continuation of the updated block: the new window after the prefill, ended by the
    next `<|file_sep|>`. A change above the cursor's line cannot follow a prefill: unchanged.
    To Zed's layout, no edit is the empty answer (sweep_prompt.rs: no prediction)."""
    if layout == "zed" and new == old:
        return SEP
    prefill = prefill_of(old, cursor or 0) if prefill is None else prefill
    text = new if new.startswith(prefill) else old
    return text[len(prefill):] + SEP


def parse_answer(answer: str, old: str, prefill: str = "") -> str:
    for stop in STOP:
        answer = answer.split(stop)[0]
    text = prefill + answer
    if old.endswith("\n") and not text.endswith("\n"):
        text += "\n"
    return text
