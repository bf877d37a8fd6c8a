"""An edit request as a value: the text, the spans, and the settings the run uses.

    request = EditRequest(text, (Span(10, 10, max_tokens=24),), Sampling(steps=8))
    for event in runner.run(request): ...          # core/run.py

Every front end builds one of these and hands it to a runner (in process) or sends its JSON to
a server (`to_json` / `from_json`, the body of `sharpen serve`'s /v1/edits), so the editor,
the headless runner, the server and the language server ask the engine the same question in
the same words. Pure data: no torch. `from_json` is the server's door, so every field is
checked and bounded here and a bad one is a UsageError naming it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .constraints import Constraint
from .errors import SpanError, UsageError
from .settings import Editing, Sampling, SettingError
from .spans import MODES, Span, validate_spans

MAX_SPANS = 64  # parallel edits in one canvas: more would leave no room for context in any model
MAX_TEXT_CHARS = 4 * 2**20  # what one request may carry; a server refuses more before tokenizing


@dataclass(frozen=True)
class EditRequest:
    text: str  # the whole buffer ('\n' line breaks or the file's own; offsets are characters of it)
    spans: tuple[Span, ...]  # sorted and validated on construction
    sampling: Sampling = field(default_factory=Sampling)
    editing: Editing = field(default_factory=Editing)
    path: str | None = None  # the buffer's file name: candidate ranking parses by its language

    def __post_init__(self) -> None:
        if len(self.spans) > MAX_SPANS:
            raise SpanError(f"too many spans ({len(self.spans)}; at most {MAX_SPANS})")
        object.__setattr__(self, "spans", tuple(validate_spans(self.text, list(self.spans))))

    def to_json(self) -> dict:
        """The request as JSON data (what a client posts to /v1/edits)."""
        return {
            "text": self.text,
            "spans": [_span_json(s) for s in self.spans],
            "sampling": asdict(self.sampling),
            "editing": asdict(self.editing),
            **({"path": self.path} if self.path else {}),
        }

    @classmethod
    def from_json(cls, data: Any, defaults_sampling: Sampling = Sampling(), defaults_editing: Editing = Editing()) -> "EditRequest":
        """The request a client sent; unknown keys and bad values are refused in one line.

        Settings not given take `defaults_*` (the server's own configuration)."""
        if not isinstance(data, dict):
            raise UsageError("the body must be a JSON object")
        _only(data, {"text", "spans", "sampling", "editing", "path"}, "request")
        text = data.get("text")
        if not isinstance(text, str):
            raise UsageError("text must be a string")
        if len(text) > MAX_TEXT_CHARS:
            raise UsageError(f"text is too long ({len(text)} characters; at most {MAX_TEXT_CHARS})")
        raw_spans = data.get("spans")
        if not isinstance(raw_spans, list) or not raw_spans:
            raise UsageError("spans must be a non-empty list")
        if len(raw_spans) > MAX_SPANS:
            raise UsageError(f"too many spans ({len(raw_spans)}; at most {MAX_SPANS})")
        # A span without its own strength takes the configured one (defaults_editing), not Editing()'s.
        spans = tuple(_span_of(s, i, defaults_editing.strength) for i, s in enumerate(raw_spans))
        sampling = _settings(defaults_sampling, data.get("sampling", {}), "sampling")
        editing = _settings(defaults_editing, data.get("editing", {}), "editing")
        path = data.get("path")
        if path is not None and not isinstance(path, str):
            raise UsageError("path must be a string")
        return cls(text, spans, sampling, editing, path)


def _span_json(span: Span) -> dict:
    out = {"start": span.start, "end": span.end, "mode": span.mode}
    if span.max_tokens is not None:
        out["max_tokens"] = span.max_tokens
    if span.mode == "rewrite":
        out["strength"] = span.strength
    if span.instruction:
        out["instruction"] = span.instruction
    if span.constraint is not None:
        out["constraint"] = span.constraint.to_json()
    if span.revise:
        out["revise"] = True
    return out


def _span_of(data: Any, index: int, strength: float = Editing().strength) -> Span:
    where = f"spans[{index}]"
    if not isinstance(data, dict):
        raise UsageError(f"{where} must be an object")
    _only(data, {"start", "end", "mode", "max_tokens", "strength", "instruction", "constraint", "revise"}, where)
    start, end = data.get("start"), data.get("end", data.get("start"))
    for name, value in (("start", start), ("end", end)):
        if not _whole(value):
            raise UsageError(f"{where}.{name} must be a whole number")
    mode = data.get("mode", "infill")
    if mode not in MODES:
        raise UsageError(f"{where}.mode must be one of: {', '.join(MODES)}")
    max_tokens = data.get("max_tokens")
    if max_tokens is not None and not _whole(max_tokens):
        raise UsageError(f"{where}.max_tokens must be a whole number")
    strength = data.get("strength", strength)
    if isinstance(strength, bool) or not isinstance(strength, (int, float)):
        raise UsageError(f"{where}.strength must be a number")
    instruction = data.get("instruction")
    if instruction is not None and not isinstance(instruction, str):
        raise UsageError(f"{where}.instruction must be a string")
    constraint = Constraint.from_json(data["constraint"], f"{where}.constraint") if data.get("constraint") is not None else None
    revise = data.get("revise", False)
    if not isinstance(revise, bool):
        raise UsageError(f"{where}.revise must be true or false")
    return Span(start, end, mode, max_tokens, float(strength), instruction or None, label=where, constraint=constraint, revise=revise)


def _settings(defaults, values: Any, name: str):
    if not isinstance(values, dict):
        raise UsageError(f"{name} must be an object")
    _only(values, {f.name for f in fields(defaults)}, name)
    try:
        return defaults.updated(values)
    except SettingError as exc:
        raise UsageError(f"{name}.{exc.name} {exc.rule}") from None
    except TypeError as exc:
        raise UsageError(f"{name}: {exc}") from None


def _only(data: dict, known: set[str], where: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise UsageError(f"{where}: unknown field {unknown[0]!r}; known: {', '.join(sorted(known))}")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
