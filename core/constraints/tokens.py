"""A constraint's byte DFA (automaton.py) lifted to a tokenizer's tokens, cached per (tokenizer, constraint).

    automaton = token_automaton(tokenizer, constraint, end_ids, banned)

Lifting runs every token's bytes through the DFA from every state at once (numpy, one array op
per byte position); tokens whose columns are equal share a class, so the table the denoising
loop reads is [states, classes], not [states, vocabulary].

The lifted automaton has one more state, END: from an accepting state a pad/eos token goes to
END, and END takes only pad/eos. That is how "pad/end only as a completion at the tail" reads: a
span's text is its content tokens, then nothing but pads.

Moved out of automaton.py: the byte automata know nothing of tokenizers, and a constraint is
checked (headless, the editor) by building its byte DFA alone, before any model loads.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from .automaton import DEAD, ByteDFA, constraint_dfa
from .spec import Constraint

log = logging.getLogger(__name__)


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
