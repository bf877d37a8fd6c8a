"""A scripted, deterministic model for next-edit tests: a Backend whose runs rewrite each span
by a Python function and report per-word confidences, through the engine's own event types
(core.run.Progress / Done), so predict, the server and the language server see what a real
run gives them. As the engine's masked loop does, a rewrite span of strength 0 is held (given
back as it is) and a run with nothing but held spans has no step after its first frame; and in
that first frame (the canvas as given, rated by the model's first pass) a word the script would
replace is one the model is unsure of: rated 1 - its confidence."""
from __future__ import annotations

import difflib
import re
from typing import Callable

from sharpen.core.engine import EditResult, SpanResult
from sharpen.core.run import SHARP, Done, ModelInfo, Progress, Slot, SpanDraft

WORDS = re.compile(r"\w+|\s+|[^\w\s]")


def renamer(old: str, new: str) -> Callable[[str, object], str]:
    """A script: every whole-word `old` in a span becomes `new`."""
    return lambda text, span: re.sub(rf"\b{re.escape(old)}\b", new, text)


class ScriptedBackend:
    def __init__(self, rewrite: Callable[[str, object], str], instruct: bool = False, steps: int = 4,
                 confidence: Callable[[str], float] = lambda word: 0.9) -> None:
        self.rewrite, self.steps, self.confidence = rewrite, steps, confidence
        self.info = ModelInfo("scripted", "scripted", "cpu", "mask", None, 4096, instruct=instruct)
        self.requests: list = []  # every EditRequest run, in order

    def load(self) -> ModelInfo:
        return self.info

    def describe(self) -> ModelInfo:
        return self.info

    def _draft(self, text: str, preferred: str | None = None) -> SpanDraft:
        """`preferred`: what the script would write instead of `text` (its words not kept there are unsure)."""
        words = WORDS.findall(text)
        kept = set(range(len(words)))
        if preferred is not None:
            for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, words, WORDS.findall(preferred), autojunk=False).get_opcodes():
                if tag != "equal":
                    kept -= set(range(i1, i2))
        return SpanDraft(text, tuple(Slot(SHARP, w, self.confidence(w) if i in kept else 1 - self.confidence(w)) for i, w in enumerate(words)))

    def run(self, request, should_stop=lambda: False, every=0.0):
        self.requests.append(request)
        olds = [request.text[s.start:s.end] for s in request.spans]
        wanted = [self.rewrite(o, s) for o, s in zip(olds, request.spans)]
        held = [s.mode == "rewrite" and s.strength == 0.0 and not s.revise for s in request.spans]
        news = [o if h else w for o, w, h in zip(olds, wanted, held)]
        steps = 0 if all(held) else self.steps  # nothing to write: the first frame, then the result
        for step in range(max(1, steps)):
            if should_stop():
                return
            if every is not None:  # step k shows the first k/steps of each new text over the old
                drafts = tuple(self._draft(o, w) if step == 0 else self._draft(n[:len(n) * step // steps] + o[len(n) * step // steps:])
                               for o, n, w in zip(olds, news, wanted))
                yield Progress(step, steps, 0.001 * step, drafts)
        last = Progress(steps, steps, 0.01, tuple(self._draft(n) for n in news))
        spans = tuple(SpanResult(s, n, len(WORDS.findall(n)), (n,)) for s, n in zip(request.spans, news))
        whole = request.text
        for s, n in sorted(zip(request.spans, news), key=lambda p: -p[0].start):
            whole = whole[:s.start] + n + whole[s.end:]
        yield Done(EditResult(whole, spans, steps, 0.01, (whole,), prompt_tokens=10), last, "scripted", "mask")
