"""Which language a file is, and its tree-sitter grammar: the file name through pygments' lexer
table (the commonest extensions answered without it), else the content (shebang, markup, JSON,
pygments' guess, telltale lines); PLAIN where none applies.

Moved out of core/syntax.py: the editor asks this for highlighting and indenting without
parsing anything (app/tui/buffer_file.py, app/tui/indent.py), and syntax.py's parsing and
selections only need `grammar` and `detect_language` from it.
"""
from __future__ import annotations

import importlib
import json
import logging
import re
from functools import lru_cache
from pathlib import PurePath

log = logging.getLogger(__name__)

PLAIN = "text"  # the language name where no grammar applies

# Grammar name -> (module, function returning the language pointer): the grammars textual[syntax] brings.
GRAMMARS = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "go": ("tree_sitter_go", "language"),
    "java": ("tree_sitter_java", "language"),
    "json": ("tree_sitter_json", "language"),
    "toml": ("tree_sitter_toml", "language"),
    "yaml": ("tree_sitter_yaml", "language"),
    "html": ("tree_sitter_html", "language"),
    "css": ("tree_sitter_css", "language"),
    "bash": ("tree_sitter_bash", "language"),
    "sql": ("tree_sitter_sql", "language"),
    "markdown": ("tree_sitter_markdown", "language"),
    "regex": ("tree_sitter_regex", "language"),
    "xml": ("tree_sitter_xml", "language_xml"),
}

# Pygments lexer aliases -> grammar names (pygments names many dialects; we have one grammar each).
_ALIASES = {
    "python": "python", "python3": "python", "py": "python", "py3": "python", "pyi": "python",
    "javascript": "javascript", "js": "javascript", "jsx": "javascript", "react": "javascript",
    "rust": "rust", "rs": "rust", "go": "go", "golang": "go", "java": "java",
    "json": "json", "json-object": "json", "toml": "toml", "yaml": "yaml", "yml": "yaml",
    "html": "html", "css": "css", "bash": "bash", "sh": "bash", "shell": "bash", "zsh": "bash", "ksh": "bash",
    "sql": "sql", "tsql": "sql", "mysql": "sql", "postgresql": "sql", "sqlite3": "sql",
    "markdown": "markdown", "md": "markdown", "xml": "xml", "regex": "regex",
}

# Languages whose "body" is the paragraph: their grammar (Markdown's) has no function or block bodies.
PROSE = frozenset({"markdown", "rst", "text", "plain"})


def detect_language(path: str | None = None, text: str | None = None) -> str:
    """A grammar name from the file name (pygments' lexer table), else from the content; PLAIN if none."""
    if path:
        name = _language_from_name(path)
        if name is not None:
            return name
    if text:
        return _language_from_content(text)
    return PLAIN


# The commonest extensions, answered without pygments: its file-name lookup compiles every
# lexer's patterns on first use, 0.2 s of opening any file. tests/test_syntax.py holds this
# table to pygments' own answers.
COMMON_EXTENSIONS = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".rs": "rust", ".go": "go",
    ".java": "java", ".json": "json", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".html": "html",
    ".css": "css", ".sh": "bash", ".bash": "bash", ".sql": "sql", ".md": "markdown", ".xml": "xml", ".txt": PLAIN,
}


def _language_from_name(path: str) -> str | None:
    from pygments.lexers import get_lexer_for_filename
    from pygments.util import ClassNotFound

    if (common := COMMON_EXTENSIONS.get(PurePath(path).suffix)) is not None:
        return common
    try:
        lexer = get_lexer_for_filename(PurePath(path).name)
    except ClassNotFound:
        return None
    found = next((_ALIASES[a] for a in lexer.aliases if a in _ALIASES), None)
    return found or PLAIN  # a known non-grammar language (C, Makefile, text): plain, not a content guess


_SHEBANG = re.compile(r"^#!\s*\S*?(?:/env\s+)?(?:\S*/)?(python|node|bash|sh|zsh)[0-9.]*\b")


def _language_from_content(text: str) -> str:
    head = text[:4096].lstrip("\ufeff")
    if m := _SHEBANG.match(head):
        return {"node": "javascript", "sh": "bash", "zsh": "bash"}.get(m.group(1), m.group(1))
    stripped = head.lstrip()
    if stripped.startswith("<?xml"):
        return "xml"
    if stripped[:15].lower().startswith(("<!doctype html", "<html")):
        return "html"
    if stripped[:1] in "{[":
        try:
            json.loads(text)
            return "json"
        except ValueError:
            pass
    from pygments.lexers import guess_lexer
    from pygments.util import ClassNotFound

    try:
        found = next((_ALIASES[a] for a in guess_lexer(head).aliases if a in _ALIASES), None)
    except ClassNotFound:
        found = None
    if found:
        return found
    # pygments rarely recognises a snippet without a shebang: count telltale lines instead.
    votes = {name: len(pattern.findall(head)) for name, pattern in _TELLTALES.items()}
    best = max(votes, key=votes.get)
    return best if votes[best] >= 2 else PLAIN


_TELLTALES = {
    "python": re.compile(r"^\s*(?:def \w+\(.*\)(?: -> .+)?:|class \w+.*:|import \w+|from [\w.]+ import |(?:if|for|while|elif) .+:|return\b)", re.M),
    "javascript": re.compile(r"^\s*(?:function\*? \w*\(|(?:const|let|var) \w+ = |export |import .+ from |.*=> \{)", re.M),
    "go": re.compile(r"^(?:package \w+|func (?:\(.+\) )?\w+\(|\s*\w+ := )", re.M),
    "rust": re.compile(r"^\s*(?:(?:pub )?fn \w+|let mut |use \w+::|impl\b|(?:pub )?struct \w+)", re.M),
}


def telltale_language(line: str) -> str | None:
    """The one language a single line gives away ("def main():" is Python, "function f() {"
    JavaScript), or None when it matches none or several. Weaker than detect_language's two
    telltales: for a buffer being typed, whose first line decides how its first Enter indents."""
    found = [name for name, pattern in _TELLTALES.items() if pattern.match(line)]
    return found[0] if len(found) == 1 else None


@lru_cache(maxsize=None)
def grammar(name: str):
    """The tree-sitter Language for a grammar name, or None (no grammar, or its package missing)."""
    if name not in GRAMMARS:
        return None
    from tree_sitter import Language

    module, function = GRAMMARS[name]
    try:
        return Language(getattr(importlib.import_module(module), function)())
    except (ImportError, AttributeError, ValueError) as exc:
        log.warning("tree-sitter grammar %s unavailable: %s", name, exc)
        return None
