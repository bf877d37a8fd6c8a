"""Constraints as byte automata: a byte-level DFA per constraint (tokens.py lifts it to a tokenizer's tokens).

    dfa = constraint_dfa(constraint)                         # bytes -> states (ByteDFA)

A pattern's DFA comes from interegular (a regex's exact character automaton), turned into bytes
here (regex_dfa says how UTF-8 is handled and why not outlines-core's automaton). Required and forbidden words are an Aho-Corasick automaton over their
bytes, built here (no library offers one that intersects), and the product of the two is taken at
the byte level.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from .errors import ConstraintError
from .spec import Constraint

DEAD = -1
MAX_STATES = 20_000  # a product past this is a constraint no canvas step could afford to check
MAX_REQUIRED_WORDS = 8  # the words automaton tracks which were seen: 2**k states


@dataclass(frozen=True)
class ByteDFA:
    """A deterministic automaton over bytes: start state 0, DEAD (-1) where no word continues."""

    table: np.ndarray  # [Q, 256] int32 next state, DEAD where none
    accept: np.ndarray  # [Q] bool

    @property
    def states(self) -> int:
        return len(self.accept)

    def matches(self, data: bytes) -> bool:
        q = 0
        for b in data:
            q = int(self.table[q, b])
            if q == DEAD:
                return False
        return bool(self.accept[q])


def regex_dfa(pattern: str) -> ByteDFA:
    """The byte-level DFA of a regular expression (whole-string match, Python syntax).

    interegular parses the pattern into a character automaton with exact language semantics
    (outlines-core's own automaton is built for leftmost-first matching: over single bytes it
    dropped `ab cd` from `[a-z]+( [a-z]+)?` and `xy` from `(x|xy)*`, so it is used only for JSON
    schema -> pattern). Characters become their UTF-8 bytes here: a listed character is a path of
    its bytes; "any other character" is any ASCII byte not listed, or any well-formed multi-byte
    sequence whose lead byte no listed character uses (sound: a text it admits always matches;
    an unlisted character sharing a lead byte with a listed one is not offered)."""
    import interegular
    from interegular.fsm import anything_else

    try:
        fsm = interegular.parse_pattern(pattern).to_fsm()
    except Exception as exc:  # interegular's parse errors and its Unsupported* exceptions
        raise ConstraintError(f"cannot compile the pattern {pattern[:80]!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    symbols = dict(fsm.alphabet._symbol_mapping)  # char (or anything_else) -> class
    other = symbols.pop(anything_else, None)
    listed_leads = {ch.encode("utf-8")[0] for ch in symbols if len(ch.encode("utf-8")) > 1}
    order = {fsm.initial: 0}
    queue = deque([fsm.initial])
    while queue:
        q = queue.popleft()
        for nxt in fsm.map.get(q, {}).values():
            if nxt not in order:
                order[nxt] = len(order)
                queue.append(nxt)
    rows: list[np.ndarray] = [np.full(256, DEAD, dtype=np.int32) for _ in order]
    accept = [q in fsm.finals for q in order]
    nodes: dict[tuple, int] = {}

    def node(key) -> int:  # an intermediate state inside a multi-byte character
        if key not in nodes:
            nodes[key] = len(rows)
            rows.append(np.full(256, DEAD, dtype=np.int32))
            accept.append(False)
        return nodes[key]

    def path(q: int, data: bytes, target: int) -> None:
        at = q
        for k, b in enumerate(data[:-1]):
            key = (q, data[:k + 1])
            if rows[at][b] == DEAD:
                rows[at][b] = node(key)
            at = int(rows[at][b])
        rows[at][data[-1]] = target

    for q, i in order.items():
        moves = fsm.map.get(q, {})
        for ch, cls in symbols.items():
            if cls in moves:
                path(i, ch.encode("utf-8"), order[moves[cls]])
        if other is not None and other in moves:
            target = order[moves[other]]
            for b in range(0x80):
                if chr(b) not in symbols:
                    rows[i][b] = target
            # Any other multi-byte character: a lead byte, then its continuation bytes (0x80-0xBF).
            # Only leads whose every continuation is well-formed UTF-8 (no overlong forms, no
            # surrogates): E0, ED, F0 and F4 are left out, so every admitted text decodes.
            for leads, extra in ((range(0xC2, 0xE0), 1), ([*range(0xE1, 0xED), 0xEE, 0xEF], 2), (range(0xF1, 0xF4), 3)):
                chain = [target]  # chain[k]: k continuation bytes still to come
                for k in range(1, extra + 1):
                    n = node((i, "any", target, k))
                    rows[n][0x80:0xC0] = chain[k - 1]
                    chain.append(n)
                for b in leads:
                    if b not in listed_leads:
                        rows[i][b] = chain[extra]
    return ByteDFA(np.stack(rows), np.array(accept, dtype=bool))


def words_dfa(required: tuple[str, ...], forbidden: tuple[str, ...]) -> ByteDFA:
    """Texts that contain every required word and none of the forbidden ones (substrings, as bytes).

    An Aho-Corasick automaton over all the words, each state paired with the set of required words
    seen so far; a forbidden word's last byte goes to DEAD."""
    if len(required) > MAX_REQUIRED_WORDS:
        raise ConstraintError(f"at most {MAX_REQUIRED_WORDS} required words (got {len(required)})")
    words = [w.encode("utf-8") for w in (*required, *forbidden)]
    if any(not w for w in words):
        raise ConstraintError("a required or forbidden word is empty")
    goto: list[dict[int, int]] = [{}]
    out_required = [0]  # per trie node: bitmask of required words ending here (through failure links)
    out_forbidden = [False]
    for k, word in enumerate(words):
        node = 0
        for b in word:
            if b not in goto[node]:
                goto.append({})
                out_required.append(0)
                out_forbidden.append(False)
                goto[node][b] = len(goto) - 1
            node = goto[node][b]
        if k < len(required):
            out_required[node] |= 1 << k
        else:
            out_forbidden[node] = True
    # Failure links breadth first, and the full transition function (a DFA over the trie).
    delta = np.zeros((len(goto), 256), dtype=np.int32)
    fail = [0] * len(goto)
    queue = deque()
    for b in range(256):
        child = goto[0].get(b)
        if child is not None:
            delta[0, b] = child
            queue.append(child)
    while queue:
        node = queue.popleft()
        out_required[node] |= out_required[fail[node]]
        out_forbidden[node] = out_forbidden[node] or out_forbidden[fail[node]]
        for b in range(256):
            child = goto[node].get(b)
            if child is None:
                delta[node, b] = delta[fail[node], b]
            else:
                fail[child] = int(delta[fail[node], b])
                delta[node, b] = child
                queue.append(child)
    full = (1 << len(required)) - 1
    states = {(0, 0): 0}
    rows, queue = [], deque([(0, 0)])
    while queue:
        node, seen = queue.popleft()
        row = np.full(256, DEAD, dtype=np.int32)
        for b in range(256):
            nxt = int(delta[node, b])
            if out_forbidden[nxt]:
                continue
            key = (nxt, seen | out_required[nxt])
            if key not in states:
                states[key] = len(states)
                queue.append(key)
            row[b] = states[key]
        rows.append(row)
    accept = np.zeros(len(states), dtype=bool)
    for (node, seen), i in states.items():
        accept[i] = seen == full
    return ByteDFA(np.stack(rows), accept)


def product(a: ByteDFA, b: ByteDFA) -> ByteDFA:
    """Texts both automata accept (reachable pairs only)."""
    states = {(0, 0): 0}
    rows, queue = [], deque([(0, 0)])
    while queue:
        p, q = queue.popleft()
        na, nb = a.table[p], b.table[q]  # [256] each
        row = np.full(256, DEAD, dtype=np.int32)
        for byte in np.flatnonzero((na != DEAD) & (nb != DEAD)):
            key = (int(na[byte]), int(nb[byte]))
            if key not in states:
                states[key] = len(states)
                if len(states) > MAX_STATES:
                    raise ConstraintError(f"the constraint's automaton grows past {MAX_STATES} states; simplify the pattern or the words")
                queue.append(key)
            row[byte] = states[key]
        rows.append(row)
    accept = np.array([bool(a.accept[p] and b.accept[q]) for p, q in states], dtype=bool)
    return ByteDFA(np.stack(rows), accept)


def trimmed(dfa: ByteDFA) -> ByteDFA:
    """The DFA with every state that cannot reach acceptance sent to DEAD (fewer states to lift)."""
    Q = dfa.states
    live = dfa.accept.copy()
    while True:  # co-reachability, to a fixed point
        nxt = np.where(dfa.table != DEAD, dfa.table, 0)
        grown = live | ((dfa.table != DEAD) & live[nxt]).any(1)
        if (grown == live).all():
            break
        live = grown
    if not live[0]:
        return ByteDFA(np.full((1, 256), DEAD, dtype=np.int32), np.zeros(1, dtype=bool))
    keep = np.flatnonzero(live)
    renumber = np.full(Q + 1, DEAD, dtype=np.int32)  # index Q: DEAD stays DEAD
    renumber[keep] = np.arange(len(keep), dtype=np.int32)
    table = renumber[np.where(dfa.table == DEAD, Q, dfa.table)][keep]
    return ByteDFA(table, dfa.accept[keep])


def _check_size(dfa: ByteDFA) -> ByteDFA:
    if dfa.states > MAX_STATES:
        raise ConstraintError(f"the constraint's automaton has {dfa.states:,} states (at most {MAX_STATES:,}); simplify the pattern "
                              "(fewer nested brackets, shorter bounded repeats)")
    return dfa


def constraint_dfa(constraint: Constraint) -> ByteDFA:
    """The byte DFA of everything `constraint` asks: its pattern (regex, schema or grammar) and its words."""
    parts = []
    pattern = constraint.pattern()
    if pattern is not None:
        parts.append(_check_size(regex_dfa(pattern)))
    if constraint.require or constraint.forbid:
        parts.append(words_dfa(constraint.require, constraint.forbid))
    if not parts:
        raise ConstraintError("an empty constraint")
    dfa = parts[0]
    for other in parts[1:]:
        dfa = product(dfa, other)
    return trimmed(dfa)
