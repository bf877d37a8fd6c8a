"""Auto-indent: what Enter puts at the start of the new line, and how far Backspace goes back;
and a file's own indentation (tabs or spaces, and how many), which they step by.

Pure functions of the line's text, the language and what each character is (code, string or
comment). The editor answers that last question from the syntax tree it already keeps for
highlighting (EditorArea.character_kinds), so a colon or a bracket inside a string or a comment
never indents, and a trailing comment never hides the colon before it. The grammar packages
sharpen loads ship highlight queries but no indent queries (tree-sitter-sql aside), so the
rules are written here, the way editors without indent queries write them:

- Enter keeps the line's indentation;
- one level more after a line whose last code character opens a bracket (any language but
  prose) or, in Python, is the colon that opens a block;
- one level less after a line that ends a Python block (`return`, `pass`, `break`,
  `continue`, `raise`);
- Enter between a bracket and its partner (`{|}`) puts the partner on its own line;
- a closing bracket typed as the first character of a line moves it back one level.

Without a syntax tree, a Python `#` starts a comment and everything else is code.
"""
from __future__ import annotations

import re
from typing import Callable

from ...core.languages import PROSE

OPENS = ("(", "[", "{")
PAIRS = {"(": ")", "[": "]", "{": "}"}
CLOSES = tuple(PAIRS.values())
PYTHON_BLOCK_END = re.compile(r"(return\b.*|pass|break|continue|raise\b.*)$")

KindAt = Callable[[int], str]  # column of the line -> "code" | "string" | "comment"


def indentation(line: str) -> str:
    return line[:len(line) - len(line.lstrip(" \t"))]


def plain_kinds(line: str, language: str | None) -> KindAt:
    """What each character is, without a syntax tree: a Python line's `#` outside quotes starts
    a comment; everything else is code."""
    comment_from = len(line)
    if language == "python":
        quote = None
        for column, char in enumerate(line):
            if quote is None and char == "#":
                comment_from = column
                break
            if char in "'\"":
                quote = None if quote == char else (char if quote is None else quote)
    return lambda column: "comment" if column >= comment_from else "code"


def last_code_column(line: str, kind_at: KindAt) -> int | None:
    """The column of the last character that is neither blank nor in a comment."""
    for column in range(len(line) - 1, -1, -1):
        if not line[column].isspace() and kind_at(column) != "comment":
            return column
    return None


def opens_block(line: str, language: str | None, kind_at: KindAt) -> str | None:
    """The character that makes the next line one level deeper (an open bracket, Python's block
    colon), or None."""
    if language in PROSE:
        return None
    column = last_code_column(line, kind_at)
    if column is None or kind_at(column) != "code":
        return None
    char = line[column]
    if char in OPENS or (language == "python" and char == ":"):
        return char
    return None


def newline_indent(line_before_cursor: str, language: str | None, unit: str, kind_at: KindAt | None = None) -> str:
    """The indentation of the line Enter starts, given the text left of the cursor."""
    kind_at = kind_at or plain_kinds(line_before_cursor, language)
    own = indentation(line_before_cursor)
    if not line_before_cursor.strip():
        return own
    if opens_block(line_before_cursor, language, kind_at):
        return own + unit
    first, last = len(own), last_code_column(line_before_cursor, kind_at)
    if last is None:  # a comment alone on its line
        return own
    code = line_before_cursor[first:last + 1] if kind_at(first) == "code" else ""
    if language == "python" and PYTHON_BLOCK_END.match(code):
        return own[:max(0, len(own) - len(unit))]
    return own


def splits_pair(line_before_cursor: str, line_after_cursor: str, language: str | None, kind_at: KindAt | None = None) -> bool:
    """Enter between an open bracket and its partner: the partner goes on a line of its own."""
    kind_at = kind_at or plain_kinds(line_before_cursor, language)
    opener = opens_block(line_before_cursor, language, kind_at)
    return opener in PAIRS and line_after_cursor.lstrip(" \t").startswith(PAIRS[opener])


def closing_dedent(line_before_cursor: str, char: str, width: int, language: str | None) -> int | None:
    """A closing bracket typed where only indentation precedes it: the column it moves back to."""
    if char not in CLOSES or language is None or language in PROSE:
        return None
    if line_before_cursor and not line_before_cursor.strip(" ") and len(line_before_cursor) >= width:
        return dedent_to(len(line_before_cursor), width)
    return None


def dedent_to(column: int, width: int) -> int:
    """Backspace in leading spaces: the column one indent level back."""
    return ((column - 1) // width) * width


def indent_type_of(text: str) -> str:
    """Tabs when more lines are indented with a tab than with spaces (Makefiles, Go)."""
    lines = text.splitlines()
    tabs = sum(line.startswith("\t") for line in lines)
    return "tabs" if tabs > sum(line.startswith(" ") for line in lines) else "spaces"


def indent_width_of(text: str, default: int = 4) -> int:
    """The indent unit of a space-indented text: the commonest step by which a line's indentation
    grows over the line before it (2 in most JavaScript, 4 in Python); `default` when none."""
    steps: dict[int, int] = {}
    previous = 0
    for line in text.splitlines()[:5000]:  # enough lines to decide, bounded on huge files
        if not line.strip() or line.startswith("\t"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent > previous:
            steps[indent - previous] = steps.get(indent - previous, 0) + 1
        previous = indent
    found = [step for step in steps if 2 <= step <= 8]
    return max(found, key=lambda step: (steps[step], -step)) if found else default
