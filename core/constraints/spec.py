"""A constraint as a value: what a span's finished text must be, in the user's own terms.

    Constraint(regex=r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
    Constraint(json_schema='{"type": "object", ...}')      # turned into a pattern by outlines-core
    Constraint(grammar='start: expr\\nexpr: ...')          # a Lark subset, see grammar.py
    Constraint(require=("return",), forbid=("eval",))      # substrings that must / must not appear

At most one of regex / json_schema / grammar; words combine with any of them (the automaton is
their product, automaton.py). Pure data, hashable (the automaton cache keys on it), JSON both
ways for a request that crosses a wire.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

from ..errors import UsageError
from .errors import ConstraintError

MAX_PATTERN_CHARS = 64 * 1024  # a schema or grammar a person writes; a larger one is refused, not compiled
MAX_WORDS = 64


@dataclass(frozen=True)
class Constraint:
    regex: str | None = None  # the whole span's text matches it (Python regex syntax as interegular reads it: no look-around, no back-references)
    json_schema: str | None = None  # a JSON schema's text; the span is a JSON value it accepts
    grammar: str | None = None  # a Lark grammar's text (start rule `start`); see grammar.py for the subset
    require: tuple[str, ...] = ()  # each appears in the span's text
    forbid: tuple[str, ...] = ()  # none appears in the span's text

    def __post_init__(self) -> None:
        given = [name for name in ("regex", "json_schema", "grammar") if getattr(self, name) is not None]
        if len(given) > 1:
            raise UsageError(f"one pattern per span: got both {given[0]} and {given[1]}")
        for name in given:
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise UsageError(f"{name} must be a non-empty string")
            if len(value) > MAX_PATTERN_CHARS:
                raise UsageError(f"{name} is too long ({len(value)} characters; at most {MAX_PATTERN_CHARS})")
        for name in ("require", "forbid"):
            words = getattr(self, name)
            if not isinstance(words, tuple) or not all(isinstance(w, str) and w for w in words):
                raise UsageError(f"{name} must be a list of non-empty words")
            if len(words) > MAX_WORDS:
                raise UsageError(f"{name}: at most {MAX_WORDS} words")
        if not given and not self.require and not self.forbid:
            raise UsageError("an empty constraint: give a regex, a JSON schema, a grammar or words")

    def pattern(self) -> str | None:
        """The regular expression the span's text must match, whichever way it was given."""
        return self._pattern

    @cached_property
    def _pattern(self) -> str | None:
        if self.regex is not None:
            return self.regex
        if self.json_schema is not None:
            return schema_regex(self.json_schema)
        if self.grammar is not None:
            from .grammar import grammar_regex

            return grammar_regex(self.grammar)
        return None

    def describe(self) -> str:
        """A short line for a status bar or a message: `regex [0-9]{4}…, require "x"`."""
        parts = []
        for name, label in (("regex", "regex"), ("json_schema", "JSON schema"), ("grammar", "grammar")):
            value = getattr(self, name)
            if value is not None:
                shown = value if len(value) <= 40 else value[:39] + "…"
                parts.append(f"{label} {shown}" if name == "regex" else label)
        if self.require:
            parts.append("require " + ", ".join(json.dumps(w, ensure_ascii=False) for w in self.require))
        if self.forbid:
            parts.append("forbid " + ", ".join(json.dumps(w, ensure_ascii=False) for w in self.forbid))
        return "; ".join(parts)

    def to_json(self) -> dict:
        out: dict = {k: getattr(self, k) for k in ("regex", "json_schema", "grammar") if getattr(self, k) is not None}
        out.update({k: list(getattr(self, k)) for k in ("require", "forbid") if getattr(self, k)})
        return out

    @classmethod
    def from_json(cls, data, where: str = "constraint") -> "Constraint":
        """A constraint a client sent ({regex | json_schema | grammar, require, forbid}); a JSON
        schema may be given as an object. Unknown keys and bad values: UsageError naming them."""
        if not isinstance(data, dict):
            raise UsageError(f"{where} must be an object")
        unknown = sorted(set(data) - {"regex", "json_schema", "grammar", "require", "forbid"})
        if unknown:
            raise UsageError(f"{where}: unknown field {unknown[0]!r}; known: forbid, grammar, json_schema, regex, require")
        schema = data.get("json_schema")
        if isinstance(schema, (dict, bool)):
            schema = json.dumps(schema)
        words = {}
        for name in ("require", "forbid"):
            value = data.get(name, [])
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list):
                raise UsageError(f"{where}.{name} must be a list of words")
            words[name] = tuple(value)
        for name in ("regex", "grammar"):
            if data.get(name) is not None and not isinstance(data[name], str):
                raise UsageError(f"{where}.{name} must be a string")
        try:
            return cls(regex=data.get("regex"), json_schema=schema, grammar=data.get("grammar"), **words)
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None


def schema_regex(schema: str) -> str:
    """A JSON schema's text -> the pattern of the JSON values it accepts (outlines-core's
    build_regex_from_schema, the conversion vLLM and SGLang use; compact whitespace)."""
    from outlines_core.json_schema import build_regex_from_schema

    try:
        json.loads(schema)
    except ValueError as exc:
        raise ConstraintError(f"the JSON schema is not valid JSON ({exc})") from None
    try:
        # The library's default whitespace between tokens (at most one space): every extra space
        # would be a slot a small canvas cannot spare.
        return build_regex_from_schema(schema)
    except Exception as exc:  # the library's own errors (unsupported keyword, bad reference)
        raise ConstraintError(f"cannot turn the JSON schema into a pattern: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None


MAX_FILE_BYTES = MAX_PATTERN_CHARS * 4  # a schema or grammar file: read bounded


def from_settings(editing) -> Constraint | None:
    """The constraint an Editing request's settings ask of every span (--regex, --json-schema FILE,
    --grammar FILE, --require, --forbid); None when none is set. A file that cannot be read is an
    InputError (exit 3), a bad pattern or schema a UsageError (exit 2)."""
    from ..errors import InputError

    def read(path: str, what: str) -> str:
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise InputError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
        if len(data) > MAX_FILE_BYTES:
            raise UsageError(f"the {what} {path} is too large (more than {MAX_FILE_BYTES // 1024} KiB)")
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise InputError(f"the {what} {path} is not UTF-8 (invalid byte at offset {exc.start})") from None

    regex, schema_file, grammar_file = editing.regex, editing.json_schema, editing.grammar
    require, forbid = tuple(editing.require or ()), tuple(editing.forbid or ())
    if regex is None and schema_file is None and grammar_file is None and not require and not forbid:
        return None
    return Constraint(regex=regex, json_schema=read(schema_file, "JSON schema") if schema_file is not None else None,
                      grammar=read(grammar_file, "grammar") if grammar_file is not None else None, require=require, forbid=forbid)

