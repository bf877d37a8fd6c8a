"""SPEC strings -> Spans: `L:C-L:C`, `L-L`, `L`, comma lists, or JSON edit lists.

Lines and columns are 1-based; columns count characters; the end is exclusive. A line's
columns run from 1 to its length + 1 (the position before its line break). `L-L` covers
the content of whole lines, keeping the last line's break as context.

Lines end at LF; the CR of a CRLF belongs to the break, so no L:C can split a CRLF pair.
Columns count code points (Python characters), so no span can split a UTF-8 sequence; a
span may split a grapheme cluster (e.g. a base letter and its combining accent).
"""
from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass

from ..core.constraints import Constraint
from ..core.errors import SpanError, UsageError
from ..core.spans import MODES, Span
from .syntax_specs import syntax_range

# ASCII digits only: \d would also accept e.g. Arabic-Indic digits.
_POINT = r"([0-9]+):([0-9]+)"
_RANGE = re.compile(rf"^{_POINT}-{_POINT}$")
_LINES = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")
_MAX_DIGITS = 12
# An edit's own constraint (Constraint.from_json): json_schema may be the schema object itself.
CONSTRAINT_KEYS = ("regex", "json_schema", "grammar", "require", "forbid")  # longer numbers are never a real position (and int() refuses > 4300 digits)


@dataclass(frozen=True)
class LineIndex:
    """Character offsets of line starts, and line lengths without their break."""

    starts: tuple[int, ...]
    lengths: tuple[int, ...]

    @classmethod
    def of(cls, text: str) -> "LineIndex":
        # Lines end at \n only (as git, wc and editors count them); a \r before it belongs
        # to the break, not the content. After a final newline an empty last line exists.
        starts, lengths, pos = [], [], 0
        for line in text.split("\n"):
            starts.append(pos)
            has_break = pos + len(line) < len(text)
            lengths.append(len(line) - 1 if has_break and line.endswith("\r") else len(line))
            pos += len(line) + 1
        return cls(tuple(starts), tuple(lengths))

    def offset(self, line: int, column: int, label: str) -> int:
        if not 1 <= line <= len(self.starts):
            raise SpanError(f"span {label}: line {line} is outside the file (1-{len(self.starts)})")
        if not 1 <= column <= self.lengths[line - 1] + 1:
            raise SpanError(f"span {label}: column {column} is outside line {line} (1-{self.lengths[line - 1] + 1})")
        return self.starts[line - 1] + column - 1

    def line_span(self, first: int, last: int, label: str) -> tuple[int, int]:
        start = self.offset(first, 1, label)
        end = self.offset(last, self.lengths[last - 1] + 1 if 1 <= last <= len(self.starts) else 1, label)
        return start, end


def parse_range(text_range: str, index: LineIndex, label: str | None = None) -> tuple[int, int]:
    item = text_range.strip()
    label = label or item
    match = _RANGE.match(item) or _LINES.match(item)
    if match and any(g is not None and len(g) > _MAX_DIGITS for g in match.groups()):
        raise SpanError(f"span {label}: line or column number too large")
    if match := _RANGE.match(item):
        l1, c1, l2, c2 = (int(g) for g in match.groups())
        start, end = index.offset(l1, c1, label), index.offset(l2, c2, label)
    elif match := _LINES.match(item):
        first = int(match.group(1))
        last = int(match.group(2) or first)
        if last < first:
            raise SpanError(f"span {label}: end line is before start line")
        start, end = index.line_span(first, last, label)
    else:
        raise SpanError(f"bad span {item!r}: expected L:C-L:C, L-L, L, body@L, node@L:C, expr@L, stmt@L, block@L or func@L "
                        "(a list: A,B; JSON edits: @FILE or -)")
    if end < start:
        raise SpanError(f"span {label}: end is before start")
    return start, end


def parse_spec(spec: str, text: str, mode: str = "infill", path: str | None = None, **span_options) -> list[Span]:
    """A comma list of ranges, all with the same mode and options."""
    if not spec.strip():
        raise SpanError("empty SPEC")
    index = LineIndex.of(text)
    spans = []
    for item in spec.split(","):
        # Syntax-node forms (body@12, node@12:5, ...): app/syntax_specs.py; `path` names the grammar.
        found = syntax_range(item, text, index, path)
        start, end = found if found is not None else parse_range(item, index)
        spans.append(Span(start, end, mode=mode, label=item.strip(), **span_options))
    return spans


def parse_edit_list(source: str, text: str, name: str = "edits", path: str | None = None, default_strength: float = 0.5) -> list[Span]:
    """JSON: a list of {range, mode?, instruction?, max_tokens?, strength?, regex? | json_schema? | grammar?,
    require?, forbid?} (the last five: this span's constraint, core/constraints/); a range may be a
    syntax form (body@12, node@12:5, ...) as in a plain SPEC; `path` names the grammar; an edit
    without its own strength takes `default_strength` (the configured Editing.strength)."""
    try:
        items = json.loads(source)
    except ValueError as exc:
        raise UsageError(f"{name}: not valid JSON ({exc})") from None
    except RecursionError:  # e.g. thousands of nested brackets
        raise UsageError(f"{name}: not valid JSON (nested too deeply)") from None
    if not isinstance(items, list) or not items:
        raise UsageError(f"{name}: expected a non-empty JSON list of edits")
    index = LineIndex.of(text)
    spans = []
    allowed = {"range", "mode", "instruction", "max_tokens", "strength", *CONSTRAINT_KEYS}
    for n, item in enumerate(items, 1):
        if not isinstance(item, dict) or not isinstance(item.get("range"), str):
            raise UsageError(f"{name}: edit {n} needs a \"range\" string like \"3:5-3:20\"")
        unknown = set(item) - allowed
        if unknown:
            raise UsageError(f"{name}: edit {n} has unknown keys: {', '.join(sorted(unknown))}")
        mode = item.get("mode", "infill")
        if mode not in MODES:
            raise UsageError(f"{name}: edit {n} has unknown mode {mode!r} (use infill or rewrite)")
        max_tokens, strength, instruction = item.get("max_tokens"), item.get("strength", default_strength), item.get("instruction")
        if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)):
            raise UsageError(f"{name}: edit {n}: max_tokens must be an integer")
        if not isinstance(strength, (int, float)) or isinstance(strength, bool):
            raise UsageError(f"{name}: edit {n}: strength must be a number")
        if not 0 <= strength <= 1:  # before float(): a 400-digit integer would overflow it
            raise UsageError(f"{name}: edit {n}: strength must be in [0, 1]")
        if instruction is not None and not isinstance(instruction, str):
            raise UsageError(f"{name}: edit {n}: instruction must be a string")
        found = syntax_range(item["range"], text, index, path)
        start, end = found if found is not None else parse_range(item["range"], index)
        label = item["range"].strip()
        given = {k: item[k] for k in CONSTRAINT_KEYS if k in item}  # this span's own constraint (core/constraints)
        constraint = Constraint.from_json(given, f"{name}: edit {n}") if given else None
        spans.append(Span(start, end, mode=mode, max_tokens=max_tokens, strength=float(strength), instruction=instruction, label=label,
                          constraint=constraint))
    return spans


def format_range(index: LineIndex, start: int, end: int) -> str:
    """Offsets back to `L:C-L:C` (for --json and messages)."""

    def point(offset: int) -> str:
        line = bisect.bisect_right(index.starts, offset) - 1
        return f"{line + 1}:{offset - index.starts[line] + 1}"

    return f"{point(start)}-{point(end)}"
