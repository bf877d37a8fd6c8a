"""Fast-dLLM v2 1.5B / 7B (NVlabs, Efficient-Large-Model/Fast_dLLM_v2_*): Qwen2.5 continued as block diffusion.

`model_type: Fast_dLLM_Qwen`, Qwen2.5's weight names (q/k/v biases) and dimensions, attention
bidirectional inside blocks of `bd_size` (32) and causal across them. The head stays
autoregressive: the logits at position p predict token p+1 (the token shift, as Dream's), so a
block's first token comes from the pass before it. Its `batch_sample` decodes each block in
sub-blocks of 8 and commits every masked token above the threshold (its default, 0.95) and the
most probable one in any case (core/loops/subblock.py). The mask is id 151665 (its generation
code's default) unless config.json or the tokenizer names one; answers end with <|im_end|>.
"""
from __future__ import annotations

from ..denoiser import BlockRule
from . import hf
from .dream import QWEN2_SKIP, QWEN2_WEIGHT_MAP, qwen2_config
from .family import Family

MASK_ID = 151665  # batch_sample's mask_id default (FAST_DLLM_MASK_ID)
SUB_BLOCK = 8  # small_block_size in the release's generation code and evaluation scripts
THRESHOLD = 0.95  # batch_sample's default


def block_rule(c: dict) -> BlockRule:
    size = c.get("bd_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1 or size % SUB_BLOCK:
        raise ValueError(f"bd_size={size!r} must be a whole multiple of {SUB_BLOCK}")
    return BlockRule(size=size, threshold=THRESHOLD, prompt="chat", sub_block=SUB_BLOCK)


def _to_config(c: dict):
    block_rule(c)
    return qwen2_config(c)


def _special_ids(config: dict, tokenizer) -> dict:
    ids = hf.special_ids(config, tokenizer, mask_names=("|<MASK>|", "<|mask|>"), turn_end_names=("<|im_end|>",))
    if ids["mask_id"] is None and MASK_ID < tokenizer.vocab_size:
        ids["mask_id"] = MASK_ID
    return ids


FAST_DLLM_V2 = Family(
    name="fast-dllm-v2",
    model_types=("Fast_dLLM_Qwen",),
    to_config=_to_config,
    weight_map=QWEN2_WEIGHT_MAP,
    shift_logits=True,
    special_ids=_special_ids,
    skip_keys=QWEN2_SKIP,
    loop="block-causal",
    block_rule=block_rule,
)
