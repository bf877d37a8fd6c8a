"""What every next-edit format shares: the parsed prompt, the format error, the window's
text, the unified-diff events, and which format a prompt is in."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import UsageError
from ..history import EditEvent
from ..request import NextEditRequest, Snippet, Window


@dataclass(frozen=True)
class PromptParts:
    """What a next-edit prompt says, read back from its text."""

    format: str
    path: str
    window: str  # the editable region (its cursor marker removed)
    cursor: int  # the cursor's offset in `window`
    before: str = ""  # the file's text before the window that the prompt holds
    after: str = ""  # and after it
    history: tuple[EditEvent, ...] = ()
    snippets: tuple[Snippet, ...] = ()
    prefill: str = ""  # Sweep: the start of the updated window the prompt already wrote
    layout: str = ""  # which client's variant of the format ("zed": Zed's Sweep blocks)

    def request(self, **settings) -> NextEditRequest:
        """The request this prompt asks: the text it holds, one window."""
        start = len(self.before)
        return NextEditRequest(self.path, self.before + self.window + self.after, start + self.cursor,
                               (Window(start, start + len(self.window)),), self.history, self.snippets, **settings)


class FormatError(UsageError):
    """A prompt or an answer that does not read as its format (a server answers 400)."""


def window_text(request: NextEditRequest, window: Window | None = None) -> tuple[str, str, str, int]:
    """(before, window, after, cursor in window) of `request`'s window (its cursor's by default);
    a cursor outside the window sits at the window's nearer edge."""
    w = window or request.cursor_window
    text = request.text
    cursor = min(max(request.cursor, w.start), w.end) - w.start
    return text[:w.start], text[w.start:w.end], text[w.end:], cursor


def with_newline(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


_HEADER = re.compile(r"^(// User accepted prediction:\n)?--- (?:a/)?(?P<old>[^\n]*)\n\+\+\+ (?:b/)?(?P<new>[^\n]*)\n", re.M)


def parse_events(text: str) -> tuple[EditEvent, ...]:
    """Unified diffs with `--- a/path` / `+++ b/path` headers (or bare paths) back into events."""
    matches = list(_HEADER.finditer(text))
    out = []
    for i, m in enumerate(matches):
        body = text[m.end(): matches[i + 1].start() if i + 1 < len(matches) else len(text)]
        body = body.rstrip("\n") + "\n" if body.strip() else ""
        old, new = m.group("old"), m.group("new")
        out.append(EditEvent(new, body, None if old == new else old, predicted=bool(m.group(1))))
    return tuple(out)


def detect_format(prompt: str) -> str | None:
    """The next-edit format a pre-formatted /v1/completions prompt is in (None: none of them)."""
    if "<|file_sep|>current/" in prompt and "<|file_sep|>updated/" in prompt:
        return "sweep"
    if "<[fim-middle]>" in prompt and "<[fim-prefix]>" in prompt:
        if "<<<<<<< CURRENT\n" in prompt:
            return "zeta2"
        if re.search(r"<\|marker_\d+\|>", prompt):
            return "zeta21"
    if "<|code_to_edit|>" in prompt and "<|/code_to_edit|>" in prompt:
        return "mercury"
    if prompt.startswith("### Instruction:") and "<|editable_region_start|>" in prompt and "<|editable_region_end|>" in prompt:
        return "zeta1"
    return None
