"""Next-edit prompt formats: for each, a prompt builder and its parser, an answer renderer and its parser.

    prompt = FORMATS["mercury"].build(request)              # NextEditRequest -> the prompt text
    parts = FORMATS["mercury"].parse_prompt(prompt)          # the prompt -> PromptParts (and back to a request)
    answer = FORMATS["mercury"].render_answer(old, new)      # a new window -> what that model would answer
    new = FORMATS["mercury"].parse_answer(answer, old)       # and back; old when the answer is "no edit"
    detect_format(prompt)                                     # which format a /v1/completions prompt is in

Formats (each module says where its layout is published): mercury (Inception's Mercury Edit and
Copilot's xtab tags), zeta1 (Zed's first Zeta: `### Instruction` and an editable region), zeta2 (Zed's Zeta 2, SeedCoder fill-in-the-middle with git merge markers),
zeta21 (Zeta 2.1, the same with numbered `<|marker_N|>` blocks), sweep (Sweep's next-edit
`original/` `current/` `updated/` blocks) and native (the instruction sharpen's own chat
families read). Offsets are Python characters; every format cuts only at line starts or at the
cursor, so they agree with the byte offsets of the Rust and Go builders.
"""
from __future__ import annotations

from ...errors import UsageError
from . import mercury, native, sweep, zeta, zeta1
from .common import FormatError, PromptParts, detect_format, parse_events, window_text, with_newline

FORMATS = {"mercury": mercury, "zeta1": zeta1, "zeta2": zeta.Zeta2, "zeta21": zeta.Zeta21, "sweep": sweep, "native": native}
FORMAT_NAMES = tuple(FORMATS)
__all__ = ["FORMATS", "FORMAT_NAMES", "FormatError", "PromptParts", "detect_format", "format_of", "parse_events", "window_text",
           "with_newline"]


def format_of(name: str):
    if name not in FORMATS:
        raise UsageError(f"unknown next-edit format {name!r}; known: {', '.join(FORMAT_NAMES)}")
    return FORMATS[name]
