"""Drafts from the edit history: the diffusion analogue of an autoregressive system's predicted
outputs. The last edit often says what the next ones are; a draft writes them down before the
model runs, the canvas starts from it, and the model confirms or rejects it (predict.py).

    drafts = draft_hunks(request)      # () in the common case: prediction runs as without drafts
    drafts[0]                          # DraftHunk(start, end, text, kind): request.text[start:end] -> text

Two kinds, from the last edit of the request's file (its diff's removed and added lines,
compared token by token: words, runs of blanks, single punctuation):

- "rename": every change of the edit replaced one whole identifier by another, always the same
  pair (`count` -> `total`). Each other whole-word use of the old name inside the windows is
  drafted as the new one. Where core/syntax.py has a grammar for the file, uses inside strings
  and comments are skipped (code inside an f-string's or template's braces is code), and a name
  renamed inside a function's parameter list is drafted inside that function only. Without a
  grammar every whole-word use in the windows is drafted.
  A name that followed a dot (`self.name`) is drafted only where it follows a dot (the parameter
  `name` is another name); a plain name everywhere (a field is declared plain, used after a dot).
- "repeat": the edit changed one fragment X into Y (X has a non-blank character, Y is not empty
  and does not hold X: wrapping `err` in `wrap(err)` is one place's fix, not every `err`'s).
  Every other place in the windows whose tokens are exactly X's tokens (so never part of a longer
  word) becomes Y; the edited lines themselves are skipped.

Anything else (an insertion, several unrelated changes, an edit of another file) drafts nothing.
A draft is a proposal the model verifies, not a refactoring tool: it does not resolve scopes
or types. Pure Python: no torch.
"""
from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass

from ..syntax import is_function, parse_document
from .history import EditEvent
from .request import NextEditRequest

_TOKENS = re.compile(r"\w+|\s+|[^\w\s]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_HUNK_HEADER = re.compile(r"@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")
# Node types (across core/languages.py's tree-sitter grammars) whose text is not code ...
_NOT_CODE = ("comment", "string", "char_literal", "character_literal", "heredoc", "raw_string", "template_string")
# ... and the ones inside those whose text is code again (f-string / template / interpolation braces).
_CODE_AGAIN = ("interpolation", "template_substitution", "substitution", "expansion")
MAX_DRAFTS = 32  # a draft past this many places is a guess about a whole file, not a next edit


@dataclass(frozen=True)
class DraftHunk:
    """request.text[start:end] becomes `text`, proposed from the history (not yet verified)."""

    start: int
    end: int
    text: str
    kind: str  # "rename" or "repeat"


@dataclass(frozen=True)
class LastEdit:
    removed: str  # the diff's removed lines, joined (each with its newline)
    added: str  # its added lines
    at: int | None  # where `added` starts in the request's text (None: not found there)


def last_edit(request: NextEditRequest) -> LastEdit | None:
    """The last edit of the request's file, as its removed and added lines."""
    event = next((e for e in reversed(request.history) if e.path == request.path), None)
    return None if event is None else _edit_of(event, request.text)


def _edit_of(event: EditEvent, text: str) -> LastEdit:
    removed, added, first_added_line, line = [], [], None, None
    for row in event.diff.splitlines(keepends=True):
        header = _HUNK_HEADER.match(row)
        if header:
            line = int(header.group(1)) - 1  # 0-based line of the new side
            continue
        if row.startswith("-"):
            removed.append(row[1:])
        elif row.startswith("+"):
            added.append(row[1:])
            first_added_line = line if first_added_line is None else first_added_line
            line = None if line is None else line + 1
        elif row.startswith(" ") and line is not None:
            line += 1
    new = "".join(added)
    at = None
    if first_added_line is not None and new:
        starts = [0] + [m.end() for m in re.finditer("\n", text)]
        if first_added_line < len(starts) and text.startswith(new.rstrip("\n"), starts[first_added_line]):
            at = starts[first_added_line]
        elif text.count(new.rstrip("\n")) == 1:  # the header's line moved (a later edit above): found by its text
            at = text.find(new.rstrip("\n"))
    return LastEdit("".join(removed), new, at)


def draft_hunks(request: NextEditRequest) -> tuple[DraftHunk, ...]:
    """The drafted hunks for the request's windows, sorted; () when the history suggests none."""
    edit = last_edit(request)
    if edit is None or not edit.removed or not edit.added:
        return ()
    a, b = _TOKENS.findall(edit.removed), _TOKENS.findall(edit.added)
    changes = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if not changes:
        return ()
    pairs = {(a[i1], b[j1]) for tag, i1, i2, j1, j2 in changes if tag == "replace" and i2 - i1 == 1 and j2 - j1 == 1}
    renamed = len(pairs) == 1 and all(tag == "replace" and i2 - i1 == 1 and j2 - j1 == 1 for tag, i1, i2, j1, j2 in changes)
    if renamed:
        old, new = next(iter(pairs))
        if _IDENTIFIER.match(old) and _IDENTIFIER.match(new):
            where = _changed_at(edit, b, changes)
            attribute = any(i1 > 0 and a[i1 - 1] == "." for _, i1, _, _, _ in changes)
            return _renames(request, old, new, where, attribute)
        return ()
    first, last = changes[0], changes[-1]
    x, y = a[first[1]:last[2]], b[first[3]:last[4]]
    if not "".join(x).strip() or not y or _contains(y, x):
        return ()
    return _repeats(request, x, "".join(y), edit)  # (a wrap, Y holding X, is skipped above: `err` -> `wrap(err)` is one place's fix)


def _contains(tokens: list[str], part: list[str]) -> bool:
    return any(tokens[i:i + len(part)] == part for i in range(len(tokens) - len(part) + 1))


def _changed_at(edit: LastEdit, added_tokens: list[str], changes) -> int | None:
    """Where in the request's text the edit's first changed token now stands."""
    if edit.at is None:
        return None
    return edit.at + sum(len(t) for t in added_tokens[:changes[0][3]])


def _renames(request: NextEditRequest, old: str, new: str, where: int | None, attribute: bool) -> tuple[DraftHunk, ...]:
    """`attribute`: the renamed name followed a dot (`self.name`): only uses after a dot are
    drafted (the parameter `name` is another name); a plain name's rename drafts every use (a
    struct field is declared plain and used after a dot)."""
    text = request.text
    doc = _parsed(request)
    scope = _parameter_scope(doc, where) if doc is not None and where is not None else None
    out = []
    for match in re.finditer(rf"(?<![A-Za-z0-9_]){re.escape(old)}(?![A-Za-z0-9_])", text):
        start, end = match.span()
        if not _in_windows(request, start, end) or (attribute and not text[:start].rstrip().endswith(".")):
            continue
        if scope is not None and not scope[0] <= start < scope[1]:
            continue
        if doc is not None and not _is_code(doc, start, end):
            continue
        out.append(DraftHunk(start, end, new, "rename"))
    return tuple(out[:MAX_DRAFTS])


def _repeats(request: NextEditRequest, x: list[str], y: str, edit: LastEdit) -> tuple[DraftHunk, ...]:
    """Every run of tokens equal to `x` in the windows, outside the edited lines, becomes `y`."""
    text = request.text
    edited = (edit.at, edit.at + len(edit.added)) if edit.at is not None else None
    out = []
    for window in request.windows:
        tokens = _TOKENS.findall(text[window.start:window.end])
        offsets = [window.start]
        for t in tokens:
            offsets.append(offsets[-1] + len(t))
        i = 0
        while i + len(x) <= len(tokens):
            if tokens[i:i + len(x)] == x:
                start, end = offsets[i], offsets[i + len(x)]
                if edited is None or not (start < edited[1] and edited[0] < end):
                    out.append(DraftHunk(start, end, y, "repeat"))
                i += len(x)
            else:
                i += 1
    return tuple(out[:MAX_DRAFTS])


def _in_windows(request: NextEditRequest, start: int, end: int) -> bool:
    return any(w.start <= start and end <= w.end for w in request.windows)


def _parsed(request: NextEditRequest):
    """The file's syntax tree where core/syntax.py has a grammar for it; None otherwise."""
    try:
        doc = parse_document(request.text, path=request.path)
    except (ImportError, ValueError, OSError):  # a grammar package missing or unreadable: no tree, every use drafted
        return None
    return doc if doc.tree is not None else None


def _node_at(doc, start: int, end: int):
    return doc.tree.root_node.descendant_for_byte_range(doc.offsets.to_byte(start), doc.offsets.to_byte(end))


def _is_code(doc, start: int, end: int) -> bool:
    """Whether text[start:end] is code: not inside a string or comment (an interpolation's braces are code)."""
    node = _node_at(doc, start, end)
    while node is not None:
        kind = node.type
        if any(k in kind for k in _CODE_AGAIN):
            return True
        if any(k in kind for k in _NOT_CODE):
            return False
        node = node.parent
    return True


def _parameter_scope(doc, where: int) -> tuple[int, int] | None:
    """The enclosing function's range when `where` lies in its parameter list (a parameter's
    rename stays inside its function); None otherwise (a function's own name, a variable)."""
    node = _node_at(doc, where, where + 1)
    while node is not None and not is_function(node):
        node = node.parent
    if node is None:
        return None
    parameters = node.child_by_field_name("parameters")
    if parameters is None:
        return None
    lo, hi = doc.node_range(parameters)
    return doc.node_range(node) if lo <= where < hi else None


# ---- the drafted canvas: where each window's text is the draft's, and how its run is read back ----

@dataclass(frozen=True)
class Piece:
    """Part of a window in the drafted text: [start, end) there; `draft` the index of the draft
    it holds (None: the window's own text between drafts)."""

    start: int
    end: int
    draft: int | None


def drafted_text(text: str, drafts: tuple[DraftHunk, ...]) -> str:
    """`text` with every draft applied (drafts sorted, non-overlapping)."""
    out, at = [], 0
    for d in drafts:
        out += [text[at:d.start], d.text]
        at = d.end
    return "".join(out) + text[at:]


def to_drafted(drafts: tuple[DraftHunk, ...], offset: int) -> int:
    """An offset of the original text (not inside a draft) in the drafted text."""
    return offset + sum(len(d.text) - (d.end - d.start) for d in drafts if d.end <= offset)


def with_blanks(text: str, start: int, floor: int) -> int:
    """`start` moved back over the spaces and tabs before it (not past `floor`): a drafted
    piece carries the blank its word is glued to, as a BPE token (" total") carries it."""
    while start > floor and text[start - 1] in " \t":
        start -= 1
    return start


def pieces(text: str, window, drafts: tuple[DraftHunk, ...]) -> list[Piece]:
    """The window (of the original text) cut into pieces of the drafted text: each draft inside
    it (with its leading blanks) one piece, the text between them the others."""
    out: list[Piece] = []
    at = window.start  # in the original text
    for i, d in enumerate(drafts):
        if not (window.start <= d.start and d.end <= window.end):
            continue
        lead = with_blanks(text, d.start, at)
        if lead > at:
            out.append(Piece(to_drafted(drafts, at), to_drafted(drafts, lead), None))
        start = to_drafted(drafts, lead)
        out.append(Piece(start, start + (d.start - lead) + len(d.text), i))
        at = d.end
    if window.end > at:
        out.append(Piece(to_drafted(drafts, at), to_drafted(drafts, window.end), None))
    return out


def token_probability(slots) -> float:
    """The model's probability of a piece's tokens, per token: the geometric mean of its slots'
    confidences, blank slots left out (the draft and the original share them). 0.0 with none."""
    rated = [s.confidence for s in slots if s.text.strip()]
    if not rated:
        return 0.0
    return math.exp(sum(math.log(max(p, 1e-9)) for p in rated) / len(rated))
