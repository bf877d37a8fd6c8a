"""A scripted, deterministic model for next-edit tests: a Backend whose runs rewrite each span
by a Python function and report per-word confidences, through the engine's own event types
(core.run.Progress / Done), so predict, the server and the language server see what a real
run gives them."""
from __future__ import annotations

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

    def _draft(self, text: str) -> SpanDraft:
        return SpanDraft(text, tuple(Slot(SHARP, w, self.confidence(w)) for w in WORDS.findall(text)))

    def run(self, request, should_stop=lambda: False, every=0.0):
        self.requests.append(request)
        olds = [request.text[s.start:s.end] for s in request.spans]
        news = [self.rewrite(o, s) for o, s in zip(olds, request.spans)]
        for step in range(self.steps):
            if should_stop():
                return
            if every is not None:  # step k shows the first k/steps of each new text over the old
                drafts = tuple(self._draft(n[:len(n) * step // self.steps] + o[len(n) * step // self.steps:]) for o, n in zip(olds, news))
                yield Progress(step, self.steps, 0.001 * step, drafts)
        last = Progress(self.steps, self.steps, 0.01, tuple(self._draft(n) for n in news))
        spans = tuple(SpanResult(s, n, len(WORDS.findall(n)), (n,)) for s, n in zip(request.spans, news))
        whole = request.text
        for s, n in sorted(zip(request.spans, news), key=lambda p: -p[0].start):
            whole = whole[:s.start] + n + whole[s.end:]
        yield Done(EditResult(whole, spans, self.steps, 0.01, (whole,), prompt_tokens=10), last, "scripted", "mask")
