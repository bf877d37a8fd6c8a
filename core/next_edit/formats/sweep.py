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
    current = current.removesuffix("\n")
    if current.count(CURSOR) > 1:
        raise FormatError("the current block has more than one <|cursor|>")
    cursor = current.find(CURSOR)
    cursor = len(current) if cursor == -1 else cursor
    region = current.replace(CURSOR, "") + "\n"
    prefill = kinds["updated"][1]
    history, snippets, before, after = [], [], "", ""
    in_retrieval = False
    for head, body in named:
        if _BLOCK.match(head):
            continue
        if head == "context/retrieval":
            in_retrieval = True
            continue
        if head.endswith(".diff") and body.startswith("original:\n") and "\nupdated:\n" in body:
            old, _, new = body[len("original:\n"):].partition("\nupdated:\n")
            history.append(_event(head[:-len(".diff")], old, new.removesuffix("\n")))
            in_retrieval = False
        elif head == path and not in_retrieval and not before and not after:
            whole = body.removesuffix("\n") + "\n"
            at = whole.find(region)
            if at != -1:
                before, after = whole[:at], whole[at + len(region):]
        elif head.startswith("context/"):
            in_retrieval = False
        elif in_retrieval:
            snippets.append(Snippet(head, body))
    return PromptParts(NAME, path, region, cursor, before, after, tuple(history), tuple(snippets), prefill)


def _event(path: str, old: str, new: str) -> EditEvent:
    return EditEvent(path, unified_diff(old + "\n", new + "\n"))


def render_answer(old: str, new: str, cursor: int | None = None, prefill: str | None = None) -> str:
    """The continuation of the updated block: the new window after the prefill, ended by the
    next `<|file_sep|>`. A change above the cursor's line cannot follow a prefill: unchanged."""
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
