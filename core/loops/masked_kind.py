"""The masked kind (LLaDA, Dream, the embedded model): the request as one canvas, core/loops/masked.py's loop.

The canvas is the text with mask slots in place of the spans (core/canvas.py), a chat turn
when a span carries an instruction (core/instruct.py), or, with candidate lengths
(core/candidates.py), one starting row per length in the same batch. Every sampling setting is
the masked loop's own except the block-causal ones (--editing, --editing-threshold).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator

from ..candidates import ExactRows, candidate_rows, plan_canvas_spans, selected_tokens
from ..canvas import build_canvas
from ..instruct import uses_chat
from ..models.denoiser import DenoiserLike
from ..models.families import has_guidance
from ..request import EditRequest
from ..settings import MASKED_THRESHOLD, Sampling, default_block_size
from ..spans import Span
from .frame import Frame
from .kind import Prepared, model_name, plain_canvas, refuse_prompt_form, refuse_revise, refuse_unread
from .masked import LoopRules, _parameters, denoise

# What the masked loop reads (core/settings.py Sampling): everything but the block-causal knobs.
READS = frozenset({"steps", "policy", "schedule", "threshold", "block_size", "cache", "refresh", "kernels",
                   "temperature", "top_k", "top_p", "seed", "samples"})


class MaskedKind:
    name = "masked"
    model = DenoiserLike
    noise = "mask"

    def reads(self, denoiser, sampling: Sampling) -> frozenset[str]:
        # classifier-free guidance where the family's reference has it (LLaDA: core/loops/guidance.py Guided)
        return READS | ({"cfg_scale"} if has_guidance(denoiser.spec.family) else frozenset())

    def settings(self, denoiser, request: EditRequest) -> Sampling:
        name = model_name(denoiser)
        refuse_unread(request.sampling, self.reads(denoiser, request.sampling), name, "a masked-diffusion model; it does not edit its own tokens")
        refuse_prompt_form(request, name)
        refuse_revise(request, name, "a masked-diffusion model: it infills masks")
        sampling = request.sampling
        return sampling if sampling.threshold is not None else replace(sampling, threshold=MASKED_THRESHOLD)

    def prepare(self, denoiser, request: EditRequest, spans: list[Span], settings: Sampling, plan) -> Prepared:
        spec, tok = denoiser.spec, denoiser.tokenizer
        pad = spec.pad_id if spec.pad_id is not None else spec.eos_id
        if uses_chat(spans) or plan is None or pad is None:
            return Prepared(denoiser, plain_canvas(denoiser, request, spans), settings)
        # Candidate lengths: one canvas sized for the longest, a starting row per length.
        wide, row_lengths = plan_canvas_spans(spans, selected_tokens(request.text, spans, tok, denoiser.max_len), plan)
        canvas = build_canvas(request.text, wide, tok, spec.mask_id, request.editing.context_tokens, denoiser.max_len)
        canvas = candidate_rows(canvas, row_lengths, pad)
        model = ExactRows(denoiser, canvas, settings.samples) if plan.exact else denoiser
        return Prepared(model, canvas, settings, row_lengths)

    def frames(self, prepared: Prepared, should_stop: Callable[[], bool], rules: LoopRules) -> Iterator[Frame]:
        return denoise(prepared.denoiser, prepared.canvas, prepared.settings, should_stop, rules)

    def used(self, prepared: Prepared, done: Frame) -> dict:
        s = prepared.settings
        size = s.block_size if s.block_size is not None else default_block_size(prepared.denoiser.device.type, _parameters(prepared.denoiser))
        return {"steps": done.total_steps, "block_size": size or max(len(r) for r in done._slots),
                "threshold": s.threshold if s.schedule == "threshold" else None}

    def slot_room(self, denoiser) -> int:
        return denoiser.max_len // 2
