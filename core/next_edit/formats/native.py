"""sharpen's own next-edit form: the instruction its chat families read beside the marked window.

An instruct or chat checkpoint (SDAR-Chat, Stable-DiffCoder-Instruct, LLaDA2.x, Dream-Coder-
Instruct, DiffusionGemma) gets the window as an instruction span (core/instruct.py marks it
<selection>...</selection> in the text around it); this module writes the instruction:

    Recent edits:
    --- a/a.py
    +++ b/a.py
    @@ -1 +1 @@
    ...
    Recently viewed other.py:
    ...snippet...
    The cursor is at line 3, column 5.
    Predict the edit the user makes next inside the marked part ...

and reads it back. The answer is the window's new text, as is: the same text is "no edit".
"""
from __future__ import annotations

import re

from .common import FormatError, PromptParts, parse_events, window_text, with_newline
from ..request import NextEditRequest, Snippet

NAME = "native"
TASK = ("Predict the edit the user makes next inside the marked part, following the recent edits (the same rename, "
        "the same new argument, the same fix, the pattern they started). Rewrite the marked part with that edit; "
        "if nothing there needs to change, give it back unchanged.")
_VIEWED = re.compile(r"^Recently viewed (?P<path>[^\n]*):\n", re.M)
_CURSOR = re.compile(r"^The cursor is at line (\d+), column (\d+)\.\n", re.M)


def build(request: NextEditRequest, window=None) -> str:
    before, region, after, cursor = window_text(request, window)
    history = "".join(with_newline(e.unified()) for e in request.history)
    viewed = "".join(f"Recently viewed {s.path}:\n{with_newline(s.text)}" for s in request.snippets)
    head = before + region[:cursor]
    line, column = head.count("\n") + 1, len(head) - head.rfind("\n")
    return (f"File: {request.path}\n" + (f"Recent edits:\n{history}" if history else "") + viewed
            + f"The cursor is at line {line}, column {column}.\n{TASK}")


def parse_prompt(prompt: str, text: str = "", window=None) -> PromptParts:
    """The instruction's path, history and snippets; the window comes from the text it marks."""
    if not prompt.startswith("File: ") or not prompt.endswith(TASK):
        raise FormatError("not sharpen's next-edit instruction")
    path, _, body = prompt[len("File: "):].partition("\n")
    body = body[:-len(TASK)]
    cursor_line = _CURSOR.search(body)
    if cursor_line is None:
        raise FormatError("the instruction does not say where the cursor is")
    body = body[:cursor_line.start()]
    viewed = list(_VIEWED.finditer(body))
    history_text = body[:viewed[0].start()] if viewed else body
    snippets = tuple(Snippet(m.group("path"), body[m.end():viewed[i + 1].start() if i + 1 < len(viewed) else len(body)])
                     for i, m in enumerate(viewed))
    history = parse_events(history_text.removeprefix("Recent edits:\n"))
    line, column = int(cursor_line.group(1)), int(cursor_line.group(2))
    start, end = window if window else (0, len(text))
    offset = sum(len(x) for x in text.splitlines(keepends=True)[:line - 1]) + column - 1
    return PromptParts(NAME, path, text[start:end], max(0, min(offset - start, end - start)), text[:start], text[end:],
                       history, snippets)


def render_answer(old: str, new: str, cursor: int | None = None) -> str:
    return new


def parse_answer(answer: str, old: str) -> str:
    if old.endswith("\n") and answer and not answer.endswith("\n"):
        answer += "\n"
    return answer
