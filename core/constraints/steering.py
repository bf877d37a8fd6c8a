"""Exact steering of a denoising step: a slot may take only tokens that keep its span completable.

    steer = Steering.for_canvas(denoiser, canvas, rows=B)        # None when no span is constrained
    steer.prepare(x)                                              # before the run: ConstraintError if impossible
    logits = steer.constrain(logits, x, positions)                # before a step commits: [B, P, V]
    proposal, p_token = steer.settle(x, positions, proposal, commit, p_token, logits)

A span's slots are a word over the constraint's token automaton (tokens.py), where a masked
slot may still be any token. Slots fill in any order, so for slot i the question is whether some
path runs start -> accept (or END, the pads' state) through every slot: the forward state sets
F_i (reachable from the start over slots 0..i-1) and the backward sets B_i (states from which slots
i..S-1 can still finish) answer it, and slot i may take token t iff some q in F_i steps on t into
B_{i+1}. Both sets are kept per (row, span) and recomputed only from the slots that changed since
the last call (a step changes one block), so a step costs about two passes over its block.

Several slots commit in one step, and two tokens each allowed alone may clash (pattern `ab|ba`,
two masked slots: a and a). `settle` checks the step's commits together (forward over the block
only, against the cached sets on either side); only when they clash are they taken one at a time,
most confident first, each later one replaced by its best allowed token where it no longer fits.
So a committed token never makes a span uncompletable, and a finished span's text (its content
tokens, pads dropped) matches.

Host side (numpy): sets are tiny ([states] bools); only the allowed-token masks go to the device,
gathered there from [slots, classes] through the token -> class map.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import torch

from .automaton import DEAD
from .tokens import TokenAutomaton, token_automaton
from .errors import ConstraintError

log = logging.getLogger(__name__)


DENSE_STATES = 256  # up to this many states a masked slot's step is a dense [Q, Q] read; past it, CSR


def _ranges(ptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The positions ptr[r]..ptr[r+1] of every row r in `rows`, concatenated (CSR gather, no Python loop)."""
    starts = ptr[rows]
    lengths = ptr[rows + 1] - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    return np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(total)


@dataclass
class _SpanSets:
    """One (row, span)'s forward and backward sets, valid for `ids` on [0, f_valid] and [b_valid, S]."""

    automaton: TokenAutomaton
    no_end: np.ndarray  # [S] bool: slots that may not take pad/eos (an infill's first slot, an exact candidate row's length)
    mask_id: int
    S: int
    ids: np.ndarray | None = None
    F: list = field(default_factory=list)
    B: list = field(default_factory=list)
    f_valid: int = 0
    b_valid: int = 0

    def update(self, ids: np.ndarray) -> None:
        """Take the span's current ids; sets depending on changed slots are dropped."""
        if self.ids is None:
            self.ids = ids.copy()
            a = self.automaton
            self.F = [None] * (self.S + 1)
            self.B = [None] * (self.S + 1)
            start = np.zeros(a.states, dtype=bool)
            start[0] = True
            self.F[0], self.f_valid = start, 0
            self.B[self.S], self.b_valid = a.final.copy(), self.S
            return
        changed = np.flatnonzero(ids != self.ids)
        if len(changed):
            self.ids = ids.copy()
            self.f_valid = min(self.f_valid, int(changed[0]))  # F[i] reads slots < i
            self.b_valid = max(self.b_valid, int(changed[-1]) + 1)  # B[i] reads slots >= i

    def _step_forward(self, F: np.ndarray, i: int, token: int) -> np.ndarray:
        a = self.automaton
        if token == self.mask_id:
            content = bool(self.no_end[i])
            if a.states > DENSE_STATES:
                ptr, succ = a.sparse[content]
                out = np.zeros(a.states, dtype=bool)
                out[succ[_ranges(ptr, np.flatnonzero(F))]] = True
                return out
            return (a.succ_content if content else a.succ_any)[F].any(0)
        c = self._class(token, i)
        nxt = a.table[F, c]
        out = np.zeros(a.states, dtype=bool)
        out[nxt[nxt != DEAD]] = True
        return out

    def _step_backward(self, B: np.ndarray, i: int, token: int) -> np.ndarray:
        a = self.automaton
        if token == self.mask_id:
            content = bool(self.no_end[i])
            if a.states > DENSE_STATES:
                ptr, succ = a.sparse[content]
                if not len(succ):
                    return np.zeros(a.states, dtype=bool)
                counts = np.add.reduceat(B[succ].astype(np.int32), np.minimum(ptr[:-1], len(succ) - 1))
                return (counts > 0) & (ptr[1:] > ptr[:-1])  # reduceat reads one entry for an empty row
            return (a.succ_content if content else a.succ_any)[:, B].any(1)
        c = self._class(token, i)
        return np.append(B, False)[a.table[:, c]]  # DEAD (-1) reads the appended False

    def _class(self, token: int, i: int) -> int:
        a = self.automaton
        c = int(a.token_class[token]) if token < len(a.token_class) else a.dead_class
        return a.dead_class if (c == a.end_class and self.no_end[i]) else c

    def forward(self, i: int) -> np.ndarray:
        while self.f_valid < i:
            k = self.f_valid
            self.F[k + 1] = self._step_forward(self.F[k], k, int(self.ids[k]))
            self.f_valid = k + 1
        return self.F[i]

    def backward(self, i: int) -> np.ndarray:
        while self.b_valid > i:
            k = self.b_valid - 1
            self.B[k] = self._step_backward(self.B[k + 1], k, int(self.ids[k]))
            self.b_valid = k
        return self.B[i]

    def completable(self) -> bool:
        return bool(self.backward(0)[0])

    def allowed_classes(self, i: int, ids: np.ndarray | None = None, lo: int | None = None, hi: int | None = None) -> np.ndarray:
        """[C] bool: the token classes slot i may take so the span stays completable. With `ids`
        (a trial canvas differing from the cached one only on [lo, hi)), the sets are carried
        across that range from the cached ones on either side."""
        a = self.automaton
        if ids is None:
            F, B = self.forward(i), self.backward(i + 1)
        else:
            F = self.forward(lo)
            for k in range(lo, i):
                F = self._step_forward(F, k, int(ids[k]))
            B = self.backward(hi)
            for k in range(hi - 1, i, -1):
                B = self._step_backward(B, k, int(ids[k]))
        allowed = np.append(B, False)[a.table[F]].any(0)  # [C]
        if self.no_end[i] and a.end_class >= 0:
            allowed[a.end_class] = False
        return allowed

    def fits(self, ids: np.ndarray, lo: int, hi: int) -> bool:
        """Whether `ids`, equal to the cached ids outside [lo, hi), is still completable."""
        F = self.forward(lo)
        for k in range(lo, hi):
            F = self._step_forward(F, k, int(ids[k]))
            if not F.any():
                return False
        return bool((F & self.backward(hi)).any())


@dataclass(frozen=True)
class _Entry:
    span: int  # index into the canvas's spans
    slots: range  # canvas positions
    name: str
    constraint: object
    rewrite: bool


class Steering:
    """The constrained spans of one canvas, for every row of the batch (see the module's notes)."""

    def __init__(self, entries: list[_Entry], automata: list[TokenAutomaton], rows: int, mask_id: int, end_ids: tuple[int, ...],
                 opening_banned: bool, content: np.ndarray | None = None) -> None:
        """`content` [rows, T] bool: canvas positions that may not take pad/eos (besides an infill's
        first slot when `opening_banned`)."""
        self.entries, self.automata, self.rows, self.mask_id = entries, automata, rows, mask_id
        self.end_ids = end_ids

        def no_end(b: int, e: _Entry) -> np.ndarray:
            out = np.zeros(len(e.slots), dtype=bool) if content is None else content[b, e.slots.start:e.slots.stop].copy()
            if opening_banned and not e.rewrite and end_ids and len(out):
                out[0] = True
            return out

        self.sets = [[_SpanSets(a, no_end(b, e), mask_id, len(e.slots)) for e, a in zip(entries, automata)] for b in range(rows)]
        self.opening_banned = opening_banned
        self.exact_view: torch.Tensor | None = None  # the denoiser view's [B, T] content mask, when rows are exact lengths
        self.positions = np.array([p for e in entries for p in e.slots], dtype=np.int64)  # every constrained slot
        self._where = {p: (k, p - e.slots.start) for k, e in enumerate(entries) for p in e.slots}
        self._classes: dict[tuple[int, int, str], torch.Tensor] = {}  # (automaton, V, device) -> token_class [V]

    @classmethod
    def for_canvas(cls, denoiser, canvas, rows: int, opening_banned: bool = True) -> "Steering | None":
        """Steering for the spans of `canvas` that carry a constraint (Span.constraint); None when none does.
        `opening_banned`: the loop never puts pad/eos in an infill's first slot (the masked loop)."""
        constrained = [(k, span, r) for k, (span, r) in enumerate(zip(canvas.spans, canvas.slots)) if getattr(span, "constraint", None) is not None]
        if not constrained:
            return None
        spec = denoiser.spec
        banned = getattr(denoiser, "banned_ids", None)
        banned = frozenset(banned.tolist()) if banned is not None else frozenset()
        end_ids = tuple(spec.end_ids)
        entries = [_Entry(k, r, span.name, span.constraint, span.mode == "rewrite") for k, span, r in constrained]
        automata = [token_automaton(denoiser.tokenizer, e.constraint, end_ids, banned - set(end_ids)) for e in entries]
        # Exact-length candidate rows (core/candidates.py ExactRows) ban pad/eos inside each row's length.
        view = getattr(denoiser, "content", None)
        content = view.cpu().numpy() if isinstance(view, torch.Tensor) else None
        steer = cls(entries, automata, rows, spec.mask_id, end_ids, opening_banned, content)
        steer.exact_view = view if content is not None else None
        return steer

    # -- reading the canvas -------------------------------------------------------------------

    def _read(self, x: torch.Tensor) -> np.ndarray:
        """Every constrained slot of every row, one host copy: [B, N]."""
        return x[:, torch.as_tensor(self.positions, device=x.device)].cpu().numpy()

    def _sync(self, x: torch.Tensor) -> None:
        values = self._read(x)
        offset = 0
        for e, k in zip(self.entries, range(len(self.entries))):
            n = len(e.slots)
            for b in range(self.rows):
                self.sets[b][k].update(values[b, offset:offset + n])
            offset += n

    # -- before the run -----------------------------------------------------------------------

    def prepare(self, x: torch.Tensor) -> None:
        """Make every constrained span of `x` completable before the run (in place), or refuse.

        A span is given room back first: pads (a candidate's shorter length, the length pass's
        trim) become masks again; a rewrite's kept draft that the constraint rules out is masked
        whole. What still cannot match is one ConstraintError naming the span."""
        self._sync(x)
        end = torch.tensor(self.end_ids, dtype=torch.long, device=x.device)
        for b in range(self.rows):
            for k, e in enumerate(self.entries):
                sets = self.sets[b][k]
                if sets.completable():
                    continue
                region = x[b, e.slots.start:e.slots.stop]
                if end.numel():
                    x[b, e.slots.start:e.slots.stop] = torch.where(torch.isin(region, end), self.mask_id, region)
                    sets.update(x[b, e.slots.start:e.slots.stop].cpu().numpy())
                if not sets.completable() and sets.no_end[1:].any():
                    # An exact-length candidate row no match fits: it becomes "at most its length"
                    # (the view that bans pad inside it is told too, or its -inf would leave no token).
                    sets.no_end[1:] = False
                    sets.no_end[0] = self.opening_banned and not e.rewrite and bool(self.end_ids)
                    sets.ids = None
                    sets.update(x[b, e.slots.start:e.slots.stop].cpu().numpy())
                    if self.exact_view is not None:
                        self.exact_view[b, e.slots.start + 1:e.slots.stop] = False
                if not sets.completable() and e.rewrite:
                    x[b, e.slots.start:e.slots.stop] = self.mask_id
                    sets.update(x[b, e.slots.start:e.slots.stop].cpu().numpy())
                if not sets.completable():
                    raise ConstraintError(self._impossible(k, b))

    def _impossible(self, k: int, b: int) -> str:
        e, a = self.entries[k], self.automata[k]
        fewest = a.min_tokens()
        why = ("no text at all matches it (with this tokenizer)" if fewest is None
               else f"its shortest match takes {fewest} tokens and the span has {len(e.slots)} slots" if fewest > len(e.slots)
               else f"no text of at most {len(e.slots)} tokens fits it around the span's kept tokens")
        hint = "" if fewest is None else " (give the span more tokens: max_tokens, or a longer selection)"
        return f"span {e.name}: the constraint ({e.constraint.describe()}) cannot be met: {why}{hint}"

    def completable(self, x: torch.Tensor) -> list[list[bool]]:
        """[row][constrained span] whether the canvas can still finish matching (tests, benchmarks)."""
        self._sync(x)
        return [[s.completable() for s in row] for row in self.sets]

    # -- every step ---------------------------------------------------------------------------

    def _token_classes(self, k: int, V: int, device) -> torch.Tensor:
        key = (k, V, str(device))
        if key not in self._classes:
            a = self.automata[k]
            tc = np.full(V, a.dead_class, dtype=np.int64)
            n = min(V, len(a.token_class))
            tc[:n] = a.token_class[:n]
            self._classes[key] = torch.as_tensor(tc, device=device)
        return self._classes[key]

    def constrain(self, logits: torch.Tensor, x: torch.Tensor, positions, every_slot: bool = False) -> torch.Tensor:
        """`logits` [B, P, V] of canvas `positions` (P of them) with every token a masked constrained
        slot may not take at -inf. Committed slots and unconstrained ones are left as they are;
        `every_slot`: a committed slot too, read as free (what it may hold with the others kept:
        a slot's own token never enters its allowed set; the random-token loop re-draws them)."""
        positions = positions.tolist() if isinstance(positions, torch.Tensor) else list(positions)
        hits = [(j, self._where[p]) for j, p in enumerate(positions) if p in self._where]
        if not hits:
            return logits
        self._sync(x)
        B, P, V = logits.shape
        by_automaton: dict[int, tuple[list, list, list]] = {}
        for b in range(B):
            for j, (k, i) in hits:
                sets = self.sets[b][k]
                if int(sets.ids[i]) != self.mask_id and not every_slot:
                    continue
                rows, cols, allowed = by_automaton.setdefault(k, ([], [], []))
                rows.append(b)
                cols.append(j)
                allowed.append(sets.allowed_classes(i))
        if not by_automaton:
            return logits
        keep = torch.ones(B, P, V, dtype=torch.bool, device=logits.device)
        for k, (rows, cols, allowed) in by_automaton.items():
            classes = torch.as_tensor(np.stack(allowed), device=logits.device)  # [n, C]
            keep[rows, cols] = classes[:, self._token_classes(k, V, logits.device)]  # [n, V]
        return logits.masked_fill(~keep, float("-inf"))

    def settle(self, x: torch.Tensor, positions, proposal: torch.Tensor, commit: torch.Tensor, p_token: torch.Tensor,
               logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's proposals [B, P], changed only where committing them all together would leave
        a span uncompletable: then they are taken most confident first, and a later one that no
        longer fits becomes its best allowed token (by `logits`, the constrained ones), its
        probability with it. `x` is the canvas before the commits."""
        positions = positions.tolist() if isinstance(positions, torch.Tensor) else list(positions)
        hits = [(j, self._where[p]) for j, p in enumerate(positions) if p in self._where]
        if not hits:
            return proposal, p_token
        self._sync(x)
        commit_h, proposal_h, p_h = commit.cpu().numpy(), proposal.cpu().numpy(), p_token.float().cpu().numpy()
        fixes: list[tuple[int, int, int]] = []
        for b in range(commit_h.shape[0]):
            for k in range(len(self.entries)):
                mine = [(j, i) for j, (kk, i) in hits if kk == k and commit_h[b, j]]
                if not mine:
                    continue
                sets = self.sets[b][k]
                trial = sets.ids.copy()
                for j, i in mine:
                    trial[i] = proposal_h[b, j]
                lo, hi = min(i for _, i in mine), max(i for _, i in mine) + 1
                if sets.fits(trial, lo, hi):
                    continue
                trial = sets.ids.copy()  # one at a time, most confident first
                for j, i in sorted(mine, key=lambda ji: -p_h[b, ji[0]]):
                    allowed = sets.allowed_classes(i, trial, lo, hi)
                    token = int(proposal_h[b, j])
                    if not allowed[sets._class(token, i)]:
                        token = self._best_allowed(logits[b, j], allowed, k)
                        fixes.append((b, j, token))
                    trial[i] = token
        if not fixes:
            return proposal, p_token
        proposal, p_token = proposal.clone(), p_token.clone()
        for b, j, token in fixes:
            proposal[b, j] = token
            p_token[b, j] = logits[b, j].float().softmax(-1)[token].to(p_token.dtype)
        log.debug("steering: %d commits replaced where the step's tokens clashed", len(fixes))
        return proposal, p_token

    def _best_allowed(self, row_logits: torch.Tensor, allowed_classes: np.ndarray, k: int) -> int:
        classes = self._token_classes(k, row_logits.shape[-1], row_logits.device)
        ok = torch.as_tensor(allowed_classes, device=row_logits.device)[classes]  # [V]
        scored = row_logits.masked_fill(~ok, float("-inf"))
        if not bool(torch.isfinite(scored).any()):  # the model gives every allowed token -inf: take the first
            return int(ok.nonzero()[0])
        return int(scored.argmax())

