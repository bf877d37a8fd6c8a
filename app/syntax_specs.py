"""SPEC forms for syntax nodes: `body@12`, `node@12:5`, `stmt@12`, ...

    body@L[:C]    the body of the function or block at line L ("Fill body"; core.syntax.body_range)
    node@L[:C]    the smallest named syntax node at L:C
    expr@L[:C]    the smallest expression around L:C
    stmt@L[:C]    the smallest statement around L:C
    block@L[:C]   the smallest block around L:C
    func@L[:C]    the smallest function around L:C

Without a column, the position is the first character of line L, from its first non-blank one
on, that has such a node (`expr@6` on `return "FizzBuzz"` is the string). The language
comes from the file name (pygments), else from the content; without a grammar, `body@L`
is the paragraph at L and the others the line at L. Imports no torch and no textual.
"""
from __future__ import annotations

import re

from ..core.errors import SpanError

FORMS = {"body": None, "node": "node", "expr": "expression", "stmt": "statement", "block": "block", "func": "function"}
_SYNTAX = re.compile(r"^(" + "|".join(FORMS) + r")@([0-9]{1,12})(?::([0-9]{1,12}))?$")


def syntax_range(item: str, text: str, index, path: str | None = None) -> tuple[int, int] | None:
    """(start, end) for a syntax form, or None when `item` is not one (then it is a plain range).

    `index` is app.specs.LineIndex of `text` (positions are checked the same way as L:C).
    """
    match = _SYNTAX.match(item.strip())
    if match is None:
        return None
    from ..core import syntax

    form, line, column = match.group(1), int(match.group(2)), match.group(3)
    label = item.strip()
    if column is None:
        start = index.offset(line, 1, label)
        content = text[start:start + index.lengths[line - 1]]
        first = start + len(content) - len(content.lstrip())
        cursors = [first] + [start + i for i in range(first - start + 1, len(content)) if not content[i].isspace()]
    else:
        cursors = [index.offset(line, int(column), label)]
    doc = syntax.parse_document(text, path=None if path in (None, "-") else str(path))
    found = None
    for cursor in cursors:  # a line's first word may have no such node ("return" is no expression)
        found = syntax.body_range(doc, cursor) if form == "body" else syntax.enclosing(doc, cursor, cursor, FORMS[form])
        if found is not None:
            break
    if found is None:
        raise SpanError(f"span {label}: no {form} at line {line} ({doc.language})")
    return found


def colour_diff(diff: str, stream) -> str:
    """The unified diff coloured by pygments when `stream` is a terminal (and NO_COLOR is unset)."""
    import os

    if not diff or not stream.isatty() or os.environ.get("NO_COLOR"):
        return diff
    from pygments import highlight
    from pygments.formatters import TerminalFormatter
    from pygments.lexers import DiffLexer

    return highlight(diff, DiffLexer(), TerminalFormatter())
