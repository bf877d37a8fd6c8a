"""Open-dCoder (fredzzp/open-dcoder-0.5B): Qwen2.5-Coder-0.5B trained as a masked diffusion LM.

Its config.json is a plain transformers Qwen2 config (`model_type: qwen2`); what makes it a
denoiser is its tokenizer's mask token (its sampler adds `[MASK]` when missing) and
bidirectional attention. The training shifted the logits like Dream. An autoregressive
Qwen2 checkpoint has the same config but no mask token: it is refused, not run.
"""
from __future__ import annotations

from ...errors import ModelError
from . import hf
from .family import Family
from .dream import QWEN2_SKIP, QWEN2_WEIGHT_MAP, qwen2_config


def _special_ids(config: dict, tokenizer) -> dict:
    ids = hf.special_ids(config, tokenizer, mask_names=("[MASK]", "<|mask|>", "<mask>"), turn_end_names=("<|im_end|>",))
    if ids["mask_id"] is None:
        raise ModelError(
            "config.json says model_type 'qwen2' (the Open-dCoder layout) but neither it nor the tokenizer "
            "names a mask token: an autoregressive Qwen2 checkpoint cannot denoise"
        )
    return ids


OPEN_DCODER = Family(
    name="open-dcoder",
    model_types=("qwen2",),
    to_config=qwen2_config,
    weight_map=QWEN2_WEIGHT_MAP,
    shift_logits=True,
    special_ids=_special_ids,
    skip_keys=QWEN2_SKIP,
    tempered_scores=True,  # Open-dLLM's loop follows Dream's sample_tokens
)
