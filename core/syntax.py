"""Syntax trees for selections and for judging candidates: tree-sitter where a grammar exists,
lines and paragraphs where none does.

    doc = parse_document(text, path="app.py")
    start, end = expand(doc, start, end)          # the enclosing syntax node
    start, end = shrink(doc, start, end, cursor)  # an inner node
    start, end = body_range(doc, cursor)          # "Fill body": the function/block body at the cursor
    error_count(doc)                              # ERROR + MISSING nodes (candidate scoring)

All offsets here are character offsets into `text`, like the engine's; tree-sitter counts
UTF-8 bytes, and `Offsets` converts between the two exactly. Which language a file is, and its
grammar, come from core/languages.py. No UI imports.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from .languages import GRAMMARS, PLAIN, PROSE, detect_language, grammar

# Node types by role, across core/languages.py's grammars (the names tree-sitter grammars share).
FUNCTION_TYPES = frozenset({
    "function_definition", "function_declaration", "function_expression", "function_item", "function",
    "generator_function_declaration", "generator_function", "method_definition", "method_declaration",
    "constructor_declaration", "arrow_function", "lambda", "func_literal", "closure_expression",
})
BLOCK_TYPES = frozenset({
    "block", "statement_block", "compound_statement", "class_body", "declaration_list", "field_declaration_list",
    "enum_body", "interface_body", "constructor_body", "switch_body", "do_group", "object", "array",
    "document", "module", "program", "source_file", "stylesheet", "section",
})
_STATEMENT_SUFFIXES = ("_statement", "_definition", "_declaration", "_item", "_directive", "rule_set", "pair", "command")


# ---- character <-> byte offsets ----------------------------------------------------------------

class Offsets:
    """Exact conversion between character offsets (str indices) and UTF-8 byte offsets.

    ASCII text maps one to one; otherwise line starts are kept in both units and only the
    part of one line before the offset is encoded or decoded.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.data = text.encode("utf-8", "surrogatepass")
        self.ascii = len(self.data) == len(text)
        if not self.ascii:
            self.char_starts = [0] + [m.end() for m in re.finditer("\n", text)]
            self.byte_starts = [0] + [m.end() for m in re.finditer(b"\n", self.data)]

    def to_byte(self, char: int) -> int:
        if self.ascii:
            return char
        line = bisect.bisect_right(self.char_starts, char) - 1
        start = self.char_starts[line]
        return self.byte_starts[line] + len(self.text[start:char].encode("utf-8", "surrogatepass"))

    def to_char(self, byte: int) -> int:
        """A byte offset inside a multi-byte character maps to that character's start."""
        if self.ascii:
            return byte
        line = bisect.bisect_right(self.byte_starts, byte) - 1
        start = self.byte_starts[line]
        return self.char_starts[line] + len(self.data[start:byte].decode("utf-8", "ignore"))


# ---- documents ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class SyntaxDoc:
    text: str
    language: str  # a GRAMMARS name, or PLAIN
    tree: object | None = field(repr=False)  # tree_sitter.Tree; None for plain text
    offsets: Offsets = field(repr=False)

    def node_range(self, node) -> tuple[int, int]:
        return self.offsets.to_char(node.start_byte), self.offsets.to_char(node.end_byte)


def parse_document(text: str, language: str | None = None, path: str | None = None) -> SyntaxDoc:
    """Parse `text`; the language is given, or detected from `path` and the content."""
    language = language or detect_language(path, text)
    offsets = Offsets(text)
    lang = grammar(language)
    if lang is None:
        return SyntaxDoc(text, PLAIN if language not in GRAMMARS else language, None, offsets)
    from tree_sitter import Parser

    return SyntaxDoc(text, language, Parser(lang).parse(offsets.data), offsets)


def error_count(doc: SyntaxDoc) -> int:
    """ERROR and MISSING nodes in the tree (0 for plain text); only subtrees with errors are visited."""
    if doc.tree is None or not doc.tree.root_node.has_error:
        return 0
    count, stack = 0, [doc.tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            count += 1
        stack.extend(c for c in node.children if c.has_error or c.is_missing)
    return count


# ---- node roles --------------------------------------------------------------------------------

def is_function(node) -> bool:
    return node.type in FUNCTION_TYPES


def is_block(node) -> bool:
    return node.type in BLOCK_TYPES or node.type.endswith(("_block", "_body"))


def is_statement(node) -> bool:
    parent = node.parent
    return node.is_named and (node.type.endswith(_STATEMENT_SUFFIXES) or (parent is not None and is_block(parent)))


# Pieces of a literal that grammars name (Python's string_start / string_content / string_end,
# JavaScript's string_fragment, escape sequences): parts of an expression, never one by themselves.
_LITERAL_PARTS = ("_start", "_end", "_content", "_fragment", "escape_sequence")


def is_expression(node) -> bool:
    return (node.is_named and not is_statement(node) and not is_block(node) and node.type != "comment"
            and not node.type.endswith(_LITERAL_PARTS))


ROLES = {"function": is_function, "block": is_block, "statement": is_statement, "expression": is_expression, "node": lambda n: n.is_named}


# ---- selections --------------------------------------------------------------------------------

def _covering(doc: SyntaxDoc, start: int, end: int):
    """The smallest named node whose range contains [start, end)."""
    sb, eb = doc.offsets.to_byte(start), doc.offsets.to_byte(end)
    node = doc.tree.root_node.named_descendant_for_byte_range(sb, eb)
    while node.parent is not None and not (node.start_byte <= sb and eb <= node.end_byte):
        node = node.parent
    return node


def expand(doc: SyntaxDoc, start: int, end: int) -> tuple[int, int]:
    """The smallest syntax node (or line, paragraph) strictly larger than the selection."""
    if doc.tree is None:
        return _plain_expand(doc.text, start, end)
    node = _covering(doc, start, end)
    while node is not None:
        s, e = doc.node_range(node)
        if (s, e) != (start, end) and s <= start and end <= e:
            return s, e
        node = node.parent
    return 0, len(doc.text)


def shrink(doc: SyntaxDoc, start: int, end: int, cursor: int | None = None) -> tuple[int, int]:
    """An inner node: the named child of the selected node holding `cursor` (default: the start).

    Unchanged when nothing smaller exists. An editor should keep a stack of the selections
    `expand` came from and pop it first; this is for selections made by hand.
    """
    cursor = start if cursor is None else cursor
    if doc.tree is None:
        return _plain_shrink(doc.text, start, end, cursor)
    node = _covering(doc, start, end)
    while node is not None:
        inside = [c for c in node.named_children if start <= doc.node_range(c)[0] and doc.node_range(c)[1] <= end]
        inside = [c for c in inside if doc.node_range(c) != (start, end)]
        if inside:
            holding = [c for c in inside if doc.node_range(c)[0] <= cursor <= doc.node_range(c)[1]]
            return doc.node_range((holding or inside)[0])
        # The selection is exactly one node with a single same-range child: look one level deeper.
        same = [c for c in node.named_children if doc.node_range(c) == (start, end)]
        node = same[0] if same else None
    return start, end


def enclosing(doc: SyntaxDoc, start: int, end: int, role: str) -> tuple[int, int] | None:
    """The smallest node of a role ("function", "block", "statement", "expression", "node") around the range."""
    if role not in ROLES:
        raise ValueError(f"unknown node role {role!r}; known: {', '.join(ROLES)}")
    if doc.tree is None:
        return _plain_expand(doc.text, start, end)  # no grammar: the line
    node = _covering(doc, start, end)
    while node is not None and node.parent is not None:  # the root (module) is never a useful answer
        if ROLES[role](node):
            return doc.node_range(node)
        node = node.parent
    return None


# ---- "Fill body" -------------------------------------------------------------------------------

def body_range(doc: SyntaxDoc, cursor: int) -> tuple[int, int] | None:
    """The body of the function or block at the cursor, as the span "Fill body" masks.

    Which one: the definition or block whose header holds the cursor (on the `def` or `for`
    line, its indentation included); else the innermost function around the cursor; else the innermost block with a
    body. Python keeps a docstring as context: the span is the statements after it, whole
    lines from the first one's indentation to the end of the last (its line break stays).
    Brace languages mask the lines inside the braces. Plain text: the paragraph.
    """
    if doc.tree is None or doc.language in PROSE:
        return _paragraph(doc.text, cursor)  # prose (Markdown, reST, plain text): the paragraph
    line_start, line_end = _line(doc.text, cursor)
    code = doc.text[line_start:line_end].lstrip()
    if code and not doc.text[line_start:cursor].strip():  # in a line's indentation (column 1: where Go to line puts
        cursor = line_end - len(code)                     # it): the line's own code, a method's def, not the class around it
    owners = [n for n in _ancestors(_covering(doc, cursor, cursor)) if _body_of(n) is not None]
    header = [n for n in owners if doc.offsets.to_char(_body_of(n).start_byte) > cursor]
    chosen = (header or [n for n in owners if is_function(n)] or owners or [None])[0]
    if chosen is None:
        return None
    return _inner_range(doc, _body_of(chosen))


def _ancestors(node):
    while node is not None:
        yield node
        node = node.parent


def _body_of(node):
    if node.type == "decorated_definition":  # Python: the decorator line belongs to the def below it
        node = node.child_by_field_name("definition")
    return node.child_by_field_name("body") if node is not None else None


def _inner_range(doc: SyntaxDoc, body) -> tuple[int, int]:
    text = doc.text
    start, end = doc.node_range(body)
    children = body.named_children
    if children and children[0].type == "expression_statement" and children[0].named_child_count == 1 \
            and children[0].named_children[0].type == "string" and doc.language == "python":
        docstring_end = doc.node_range(children[0])[1]
        rest = children[1:]
        if not rest:  # only a docstring: insert on the line after it
            newline = text.find("\n", docstring_end)
            point = newline + 1 if newline != -1 else docstring_end
            return point, point
        start = doc.node_range(rest[0])[0]
    if text[start:start + 1] == "{" and text[end - 1:end] == "}" and end - start >= 2:
        start, end = start + 1, end - 1  # braces stay: only what is inside them is masked
        inner = text[start:end]
        if "\n" not in inner:  # `{ return 1; }`: the code between the spaces
            lead = len(inner) - len(inner.lstrip())
            return (start + lead, max(start + lead, end - (len(inner) - len(inner.rstrip()))))
        after_open = text[start:].split("\n", 1)
        if after_open[0].strip() == "" and len(after_open) == 2:
            start = start + len(after_open[0]) + 1  # from the line after `{`
        close_line = text.rfind("\n", start, end)
        if close_line != -1 and text[close_line + 1:end].strip() == "":
            end = max(start, close_line)  # to the end of the line before `}`
        return start, end
    line_start = text.rfind("\n", 0, start) + 1
    if text[line_start:start].strip() == "":
        start = line_start  # whole lines: the indentation is part of the span
    return start, end


# ---- plain text: lines and paragraphs ----------------------------------------------------------

def _line(text: str, offset: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return start, len(text) if end == -1 else end


def _paragraph(text: str, offset: int) -> tuple[int, int]:
    """Lines around `offset` up to the nearest blank lines (line breaks at its ends stay outside)."""
    start, end = _line(text, offset)
    while start > 0:
        s, e = _line(text, start - 1)
        if not text[s:e].strip():
            break
        start = s
    while end < len(text):
        s, e = _line(text, end + 1)
        if not text[s:e].strip():
            break
        end = e
    return start, end


def _plain_expand(text: str, start: int, end: int) -> tuple[int, int]:
    for candidate in (_line(text, start), _paragraph(text, start), (0, len(text))):
        if candidate[0] <= start and end <= candidate[1] and candidate != (start, end):
            return candidate
    return 0, len(text)


def _plain_shrink(text: str, start: int, end: int, cursor: int) -> tuple[int, int]:
    for candidate in (_paragraph(text, cursor), _line(text, cursor)):
        if start <= candidate[0] and candidate[1] <= end and candidate != (start, end):
            return candidate
    return start, end
