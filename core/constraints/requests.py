"""The constraint fields completion servers accept -> a Constraint (for app/serve to call).

    constraint = request_constraint(body)     # None when the request asks for none

Read, in this order, from a completion request's JSON body:
- OpenAI `response_format`: {"type": "json_object"} (any JSON object), {"type": "json_schema",
  "json_schema": {"schema": {...}}}, {"type": "text"} (none);
- vLLM / SGLang: `regex`, `json_schema` (object or text), `ebnf` / `grammar` (a Lark grammar here;
  GBNF is not read), and vLLM's `guided_regex` / `guided_json` / `guided_grammar` spellings.
Two of them at once is a UsageError (a server's 400), as is a malformed one.
"""
from __future__ import annotations

import json

from ..errors import UsageError
from .spec import Constraint

# Any JSON object (OpenAI's json_object mode): nesting bounded by the pattern, as every schema is.
JSON_OBJECT_SCHEMA = '{"type": "object"}'


def request_constraint(body: dict) -> Constraint | None:
    found: list[tuple[str, Constraint]] = []
    fmt = body.get("response_format")
    if fmt is not None:
        if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
            raise UsageError("response_format must be an object with a type")
        kind = fmt["type"]
        if kind == "json_object":
            found.append(("response_format", Constraint(json_schema=JSON_OBJECT_SCHEMA)))
        elif kind == "json_schema":
            spec = fmt.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, (dict, bool)):
                raise UsageError("response_format.json_schema.schema must be a JSON schema object")
            found.append(("response_format", Constraint(json_schema=json.dumps(schema))))
        elif kind != "text":
            raise UsageError(f"response_format.type {kind!r} is not supported (json_object, json_schema or text)")
    for names, make in ((("regex", "guided_regex"), lambda v: Constraint(regex=v)),
                        (("json_schema", "guided_json"), lambda v: Constraint(json_schema=v if isinstance(v, str) else json.dumps(v))),
                        (("ebnf", "grammar", "guided_grammar"), lambda v: Constraint(grammar=v))):
        for name in names:
            value = body.get(name)
            if value is None:
                continue
            if name in ("json_schema", "guided_json"):
                if not isinstance(value, (str, dict)):
                    raise UsageError(f"{name} must be a JSON schema (an object or its text)")
            elif not isinstance(value, str):
                raise UsageError(f"{name} must be a string")
            found.append((name, make(value)))
    if len(found) > 1:
        raise UsageError(f"one constraint per request: got {found[0][0]} and {found[1][0]}")
    return found[0][1] if found else None
