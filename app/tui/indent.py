"""Auto-indent: what Enter puts at the start of the new line, and how far Backspace goes back.

Pure functions of the line text and the language (no widget): Enter keeps the line's
indentation; one level more after a line that opens a block (Python's `:`, an open bracket or
brace at the end, in any language); one level less after a line that ends a Python block
(`return`, `pass`, `break`, `continue`, `raise`). Without a known language only the
indentation is kept.
"""
from __future__ import annotations

import re

OPENS = ("(", "[", "{")
PYTHON_BLOCK_END = re.compile(r"^\s*(return\b.*|pass|break|continue|raise\b.*)\s*(#.*)?$")
PYTHON_OPENS_BLOCK = re.compile(r":\s*(#.*)?$")


def indentation(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" \t"))]


def newline_indent(line_before_cursor: str, language: str | None, unit: str) -> str:
    """The indentation of the line Enter starts, given the text left of the cursor."""
    own = indentation(line_before_cursor)
    code = line_before_cursor.rstrip()
    if not code.strip():
        return own
    if code.endswith(OPENS) or (language == "python" and PYTHON_OPENS_BLOCK.search(code)):
        return own + unit
    if language == "python" and PYTHON_BLOCK_END.match(code):
        return own[:max(0, len(own) - len(unit))]
    return own


def dedent_to(column: int, width: int) -> int:
    """Backspace in leading spaces: the column one indent level back."""
    return ((column - 1) // width) * width
