"""Constraints as automata: a byte-level DFA per constraint, lifted once to the tokenizer's tokens.

    dfa = constraint_dfa(constraint)                         # bytes -> states (ByteDFA)
    automaton = token_automaton(tokenizer, constraint, end_ids, banned)   # cached per (tokenizer, constraint)

A pattern's DFA comes from interegular (a regex's exact character automaton), turned into bytes
here (regex_dfa says how UTF-8 is handled and why not outlines-core's automaton). Required and forbidden words are an Aho-Corasick automaton over their
bytes, built here (no library offers one that intersects), and the product of the two is taken at
the byte level. Lifting to tokens runs every token's bytes through the DFA from every state at
once (numpy, one array op per byte position); tokens whose columns are equal share a class, so the
table the denoising loop reads is [states, classes], not [states, vocabulary].

The lifted automaton has one more state, END: from an accepting state a pad/eos token goes to
END, and END takes only pad/eos. That is how "pad/end only as a completion at the tail" reads: a
span's text is its content tokens, then nothing but pads.
"""
from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from .errors import ConstraintError
from .spec import Constraint

log = logging.getLogger(__name__)

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


@dataclass(frozen=True, eq=False)
class TokenAutomaton:
    """A constraint over token ids: states 0..Q-1 of the byte DFA plus END (index Q), tokens in classes.

    `table[q, c]` is the state after a token of class `c` from state `q` (DEAD: no word continues).
    Pad/eos tokens form their own class: accepting -> END, END -> END. `succ_content[q, r]`:
    some content token goes from q to r; `succ_any` adds the pad/eos step."""

    table: np.ndarray  # [Q+1, C] int32
    token_class: np.ndarray  # [V] int32: each token id's class
    final: np.ndarray  # [Q+1] bool: accepting states and END
    succ_content: np.ndarray  # [Q+1, Q+1] bool
    succ_any: np.ndarray  # [Q+1, Q+1] bool
    end_class: int  # the class of pad/eos (-1: the model has none)
    dead_class: int  # a class that is DEAD from every state (ids the tokenizer lacks: the model's padded vocabulary)

    @property
    def states(self) -> int:
        return self.table.shape[0]

    @cached_property
    def sparse(self) -> dict[bool, tuple[np.ndarray, np.ndarray]]:
        """The successor relations as CSR (row pointers, successor states), content-only (True) and
        with pad/eos (False): a large automaton's masked slot costs its edges, not states squared."""
        out = {}
        for content, succ in ((True, self.succ_content), (False, self.succ_any)):
            rows, cols = np.nonzero(succ)
            ptr = np.zeros(self.states + 1, dtype=np.int64)
            np.add.at(ptr, rows + 1, 1)
            out[content] = (np.cumsum(ptr), cols.astype(np.int64))
        return out

    def min_tokens(self) -> int | None:
        """The fewest content tokens of an accepted text (None: no text at all is accepted)."""
        frontier = np.zeros(self.states, dtype=bool)
        frontier[0] = True
        seen = frontier.copy()
        for n in range(self.states + 1):
            if (frontier & self.final).any():
                return n
            frontier = self.succ_content[frontier].any(0) & ~seen
            if not frontier.any():
                return None
            seen |= frontier
        return None


def lift(dfa: ByteDFA, token_bytes: list[bytes | None], end_ids: tuple[int, ...], chunk: int = 8192) -> TokenAutomaton:
    """The token-level automaton: each token's bytes run through `dfa` from every state at once.

    `token_bytes[i]` is token i's bytes, None for a token no slot may take under a constraint (the
    loop's banned ids, specials); `end_ids` are the pad/eos ids (their own class)."""
    Q, V = dfa.states, len(token_bytes)
    ext = np.vstack([dfa.table, np.full((1, 256), DEAD, dtype=np.int32)])  # row -1: DEAD stays DEAD
    classes: dict[bytes, int] = {}
    columns: list[np.ndarray] = []
    token_class = np.zeros(V, dtype=np.int32)
    dead_column = np.full(Q, DEAD, dtype=np.int32)
    classes[dead_column.tobytes()] = 0
    columns.append(dead_column)
    lengths = np.array([len(b) if b else 0 for b in token_bytes], dtype=np.int64)
    # Tokens of one length at a time: every byte position is one gather over [states, tokens], no masks.
    for width in np.unique(lengths[lengths > 0]).tolist():
        group = np.flatnonzero(lengths == width)
        for begin in range(0, len(group), chunk):
            ids = group[begin:begin + chunk]
            data = np.frombuffer(b"".join(token_bytes[i] for i in ids), dtype=np.uint8).reshape(len(ids), width)
            states = np.repeat(np.arange(Q, dtype=np.int32)[:, None], len(ids), axis=1)  # [Q, n]
            for k in range(width):
                states = ext[states, data[:, k]]
            by_token = np.ascontiguousarray(states.T)  # [n, Q]: one column of the table per token
            for row, i in enumerate(ids):
                key = by_token[row].tobytes()
                c = classes.get(key)
                if c is None:
                    c = classes[key] = len(columns)
                    columns.append(by_token[row].copy())
                token_class[i] = c
    END = Q
    end_class = -1
    if end_ids:
        end_column = np.where(dfa.accept, END, DEAD).astype(np.int32)
        end_class = len(columns)
        columns.append(end_column)
        token_class[[i for i in end_ids if i < V]] = end_class
    table = np.full((Q + 1, len(columns)), DEAD, dtype=np.int32)
    table[:Q] = np.stack(columns, axis=1)
    if end_class >= 0:
        table[END, end_class] = END
    final = np.append(dfa.accept, True)
    succ_any = np.zeros((Q + 1, Q + 1), dtype=bool)
    succ_content = np.zeros((Q + 1, Q + 1), dtype=bool)
    for c in range(table.shape[1]):
        q = np.flatnonzero(table[:, c] != DEAD)
        succ_any[q, table[q, c]] = True
        if c != end_class:
            succ_content[q, table[q, c]] = True
    return TokenAutomaton(table, token_class, final, succ_content, succ_any, end_class, 0)


def _bytes_to_unicode() -> dict[str, int]:
    """GPT-2's byte-level alphabet (the printable stand-in of each byte), inverted: char -> byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, n = printable[:], 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def token_bytes(tokenizer, unusable: frozenset[int] = frozenset()) -> list[bytes | None]:
    """Each token id's bytes as the tokenizer's decoder writes them; None for special tokens and `unusable`.

    Byte-level BPE (GPT-2, Qwen2, the embedded model): every vocabulary string maps back to bytes
    through the byte alphabet. SentencePiece-style (Metaspace, <0xNN> byte fallback): '▁' is a
    space. Anything else: the token decoded alone, when that is whole UTF-8."""
    import json

    hf = tokenizer.hf
    decoder = (json.loads(hf.to_str()).get("decoder") or {})
    kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders", []) or []}
    specials = {i for i, t in hf.get_added_tokens_decoder().items() if t.special}
    out: list[bytes | None] = [None] * tokenizer.vocab_size
    byte_of = _bytes_to_unicode() if "ByteLevel" in kinds else None
    for token, i in hf.get_vocab(with_added_tokens=True).items():
        if i in specials or i in unusable or i >= len(out):
            continue
        if byte_of is not None and all(ch in byte_of for ch in token):
            out[i] = bytes(byte_of[ch] for ch in token)
        elif len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            out[i] = bytes([int(token[3:5], 16)])
        elif "Metaspace" in kinds or "ByteFallback" in kinds:
            out[i] = token.replace("▁", " ").encode("utf-8")
        else:
            text = tokenizer.decode([i])
            out[i] = None if "\ufffd" in text else text.encode("utf-8")
    return out


@lru_cache(maxsize=32)
def _cached(tokenizer_key: int, tokenizer, constraint: Constraint, end_ids: tuple[int, ...], banned: frozenset[int]) -> TokenAutomaton:
    dfa = constraint_dfa(constraint)
    automaton = lift(dfa, _token_bytes_cached(tokenizer_key, tokenizer, banned), end_ids)
    log.debug("constraint %s: %d byte states, %d token states, %d token classes", constraint.describe(), dfa.states,
              automaton.states, automaton.table.shape[1])
    return automaton


@lru_cache(maxsize=8)
def _token_bytes_cached(tokenizer_key: int, tokenizer, banned: frozenset[int]) -> list[bytes | None]:
    return token_bytes(tokenizer, banned)


def token_automaton(tokenizer, constraint: Constraint, end_ids: tuple[int, ...] = (), banned: frozenset[int] = frozenset()) -> TokenAutomaton:
    """The constraint's automaton over `tokenizer`'s ids, built once per (tokenizer, constraint, ids)
    and cached: a second run with the same pattern costs nothing."""
    return _cached(id(tokenizer), tokenizer, constraint, tuple(end_ids), frozenset(banned))
