"""Next-edit prompt formats: for each, a prompt builder and its parser, an answer renderer and its parser.

    prompt = FORMATS["mercury"].build(request)              # NextEditRequest -> the prompt text
    parts = FORMATS["mercury"].parse_prompt(prompt)          # the prompt -> PromptParts (and back to a request)
    answer = FORMATS["mercury"].render_answer(old, new)      # a new window -> what that model would answer
    new = FORMATS["mercury"].parse_answer(answer, old)       # and back; old when the answer is "no edit"
    detect_format(prompt)                                     # which format a /v1/completions prompt is in

Formats (each module says where its layout is published): mercury (Inception's Mercury Edit and
Copilot's xtab tags), zeta2 (Zed's Zeta 2, SeedCoder fill-in-the-middle with git merge markers),
zeta21 (Zeta 2.1, the same with numbered `<|marker_N|>` blocks), sweep (Sweep's next-edit
`original/` `current/` `updated/` blocks) and native (the instruction sharpen's own chat
families read). Offsets are Python characters; every format cuts only at line starts or at the
cursor, so they agree with the byte offsets of the Rust and Go builders.
"""
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
    return None


def _formats() -> dict:
    from . import mercury, native, sweep, zeta

    return {"mercury": mercury, "zeta2": zeta.Zeta2, "zeta21": zeta.Zeta21, "sweep": sweep, "native": native}


FORMAT_NAMES = ("mercury", "zeta2", "zeta21", "sweep", "native")


def format_of(name: str):
    formats = _formats()
    if name not in formats:
        raise UsageError(f"unknown next-edit format {name!r}; known: {', '.join(FORMAT_NAMES)}")
    return formats[name]
