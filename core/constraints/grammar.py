"""A Lark grammar turned into a pattern: the sound approximation of a context-free constraint.

    grammar_regex('start: expr\\nexpr: NUMBER | "(" expr "+" expr ")"\\n%import common.NUMBER')

The grammar is parsed by Lark itself (rules, terminals, %import, %ignore); its language is then
cut to the sentences whose derivations nest rules at most `depth` deep, which is a regular
language, compiled like any pattern (automaton.py). Every text it admits is a sentence of the
grammar (sound: whatever the steering lets through parses), but a sentence nested deeper than the
bound is not reachable: the exact CFG completability test of "Constrained Decoding of Diffusion
LLMs with Context-Free Grammars" (arXiv 2508.10111) is not implemented. A span of tens of tokens
rarely nests deeper than a few levels; the depth is lowered until the pattern stays small.

The subset: rules with alternatives, sequences, `?`, `*`, `+`, `[...]`, string and regex
terminals (Python regex syntax: no look-around, no back-references), the
start rule `start`. %ignore'd terminals (whitespace) may stand between any two symbols.
"""
from __future__ import annotations

from .errors import ConstraintError

MAX_DEPTH = 4  # rule nesting; repetition costs none: about 2 levels of brackets in a bracketed grammar (3 kinds: ~4k states)
MAX_PATTERN = 200_000  # characters of the expanded pattern; deeper bounds past this are not tried


def grammar_regex(grammar: str, start: str = "start") -> str:
    """The pattern of the grammar's sentences nested at most MAX_DEPTH rules deep (less when that is too large)."""
    from lark.load_grammar import load_grammar

    # Only the grammar's rules and terminals are read (Lark's own loader: %import, templates,
    # `?` / `*` / `+` expanded into plain rules), not a parser: no lexer refuses an empty terminal.
    try:
        loaded, _ = load_grammar(grammar, "<grammar>", [], True)
        terminal_defs, rule_defs, ignore_names = loaded.compile([start], set())
    except Exception as exc:  # LarkError and the loader's own
        raise ConstraintError(f"cannot read the grammar: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    rules: dict[str, list[list]] = {}
    for rule in rule_defs:
        rules.setdefault(rule.origin.name, []).append(rule.expansion)
    terminals = {t.name: t.pattern.to_regexp() for t in terminal_defs}
    ignore = [terminals[name] for name in ignore_names if name in terminals]
    gap = f"(?:{'|'.join(ignore)})*" if ignore else ""
    for depth in range(MAX_DEPTH, 0, -1):
        memo: dict[tuple[str, int], str | None] = {}
        try:
            pattern = _expand(start, depth, rules, terminals, gap, memo)
        except _TooLarge:
            continue
        if pattern is not None and len(pattern) <= MAX_PATTERN:
            return f"{gap}{pattern}{gap}" if gap else pattern
    raise ConstraintError(f"the grammar has no sentence nested at most {MAX_DEPTH} rules deep that fits a pattern of "
                          f"{MAX_PATTERN:,} characters (is `{start}` reachable and finite?)")


class _TooLarge(Exception):
    pass


def _expand(symbol: str, depth: int, rules, terminals, gap: str, memo) -> str | None:
    """The pattern of `symbol`'s sentences within `depth` rule levels; None: it has none."""
    if symbol in terminals:
        return f"(?:{terminals[symbol]})"
    if depth <= 0:
        return None
    key = (symbol, depth)
    if key in memo:
        return memo[key]
    def sequence(symbols, cost: int = 1) -> str | None:
        parts = []
        for sym in symbols:
            part = _expand(sym.name, depth - cost if not sym.is_term else depth, rules, terminals, gap, memo)
            if part is None:
                return None
            parts.append(part)
        return gap.join(parts)  # an empty sequence is the empty string

    def either(patterns) -> str | None:
        patterns = [p for p in patterns if p is not None]
        return f"(?:{'|'.join(patterns)})" if patterns else None

    expansions = rules.get(symbol, [])
    own = lambda e: sum(s.name == symbol for s in e)  # noqa: E731
    # Repetition (what Lark makes of `x*` and `x+`: A -> A x | x) is a star, not nesting: it
    # costs no depth, so only brackets and other true recursion are bounded.
    left = [e[1:] for e in expansions if e and e[0].name == symbol and own(e) == 1]
    right = [e[:-1] for e in expansions if e and e[-1].name == symbol and own(e) == 1]
    base = [e for e in expansions if own(e) == 0]
    if left and base and len(left) + len(base) == len(expansions):
        head, tail = either(sequence(e, 0) for e in base), either(sequence(e, 0) for e in left)
        result = head if head is None or tail is None else f"{head}(?:{gap}{tail})*"
    elif right and base and len(right) + len(base) == len(expansions):
        head, tail = either(sequence(e, 0) for e in right), either(sequence(e, 0) for e in base)
        result = tail if tail is None or head is None else f"(?:{head}{gap})*{tail}"
    else:
        result = either(sequence(e) for e in expansions)
    if result is not None and len(result) > MAX_PATTERN:
        raise _TooLarge
    memo[key] = result
    return result
