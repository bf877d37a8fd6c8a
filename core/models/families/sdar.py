"""SDAR 1.7B / 4B / 8B (JetAstra): block diffusion on a Qwen3 backbone, `model_type: sdar`.

The releases (SDAR-1.7B-Chat, -4B-Chat, -8B-Chat) are Qwen3 checkpoints continued as block
diffusion models: Qwen3's weight names (no q/k/v biases, an RMSNorm over each head's queries
and keys), `head_dim` stated in config.json, and attention that is bidirectional inside a
block of 4 tokens and causal across blocks. The mask is `<|MASK|>` (151669), named by
tokenizer_config.json `mask_token`; the chat template is Qwen3's, ending an answer with <|im_end|>.

What the releases ship: the hub's config.json has neither `block_size` nor `mask_token_id`
(JetAstra/SDAR keeps it as `training/model/SDAR-8B-Chat/config copy.json`; the `config.json`
beside it, with both keys, is the training copy). So the block size comes, in this order, from
config.json `block_size` when a file has it, from the release's name (the block-size variants
are named `SDAR-4B-Chat-b16`, ... `-b64`, README: "block sizes of 8, 16, 32, 64"), else 4: the
default model's block size and generate.py's `--block_length` default.
Its reference loop (JetAstra/SDAR generate.py) commits per block with low-confidence-dynamic
remasking at threshold 0.85. The MoE release (SDAR-30B-A3B, `model_type: sdar_moe`) is not
this family.
"""
from __future__ import annotations

import re

from ..denoiser import BlockRule
from ..model import ModelConfig
from . import hf
from .dream import MAX_CANVAS, QWEN2_SKIP
from .family import Family

_LAYER = "model.layers.{i}."
QWEN3_WEIGHT_MAP = {
    "model.embed_tokens.weight": "embed.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",  # absent with tie_word_embeddings (SDAR-1.7B)
    _LAYER + "input_layernorm.weight": "layers.{i}.attn_norm.weight",
    _LAYER + "self_attn.q_proj.weight": "layers.{i}.attn.wq.weight",
    _LAYER + "self_attn.k_proj.weight": "layers.{i}.attn.wk.weight",
    _LAYER + "self_attn.v_proj.weight": "layers.{i}.attn.wv.weight",
    _LAYER + "self_attn.o_proj.weight": "layers.{i}.attn.wo.weight",
    _LAYER + "self_attn.q_norm.weight": "layers.{i}.attn.q_norm.weight",
    _LAYER + "self_attn.k_norm.weight": "layers.{i}.attn.k_norm.weight",
    _LAYER + "post_attention_layernorm.weight": "layers.{i}.ffn_norm.weight",
    _LAYER + "mlp.gate_proj.weight": "layers.{i}.ffn.w1.weight",
    _LAYER + "mlp.up_proj.weight": "layers.{i}.ffn.w3.weight",
    _LAYER + "mlp.down_proj.weight": "layers.{i}.ffn.w2.weight",
}

# generate.py's default for its default remasking (low_confidence_dynamic).
SDAR_THRESHOLD = 0.85
# The default releases' block size: generate.py's --block_length default, the README's settings.
DEFAULT_BLOCK = 4
# The block-size variants' names end in -b8 / -b16 / -b32 / -b64 (SDAR-1.7B-Chat-b32, ...).
VARIANT_NAME = re.compile(r"-b(\d+)$", re.IGNORECASE)


def qwen3_config(c: dict) -> ModelConfig:
    """Qwen3-style config.json -> ModelConfig (SDAR): q/k norm, head_dim as stated, no biases."""
    for key in ("num_key_value_heads", "head_dim"):
        if key not in c:
            raise ValueError(f"it lacks {key!r}, which changes the computation; refusing to guess")
    hf.refuse_unsupported(c, keys=("attention_bias",))  # Qwen3 has no attention biases
    return ModelConfig(
        vocab_size=c["vocab_size"],
        dim=c["hidden_size"],
        n_layers=c["num_hidden_layers"],
        n_heads=c["num_attention_heads"],
        n_kv_heads=c["num_key_value_heads"],
        head_dim=c["head_dim"],
        qk_norm=True,
        ffn_hidden=c["intermediate_size"],
        rope_theta=float(c.get("rope_theta", 1000000.0)),
        norm_eps=float(c.get("rms_norm_eps", 1e-6)),
        max_seq_len=min(c.get("max_position_embeddings", MAX_CANVAS), MAX_CANVAS),
        tie_embeddings=bool(c.get("tie_word_embeddings", False)),
    )


def release_block_size(c: dict) -> int:
    """config.json's block_size, else the one the release's name states, else DEFAULT_BLOCK."""
    if "block_size" in c:
        size = c["block_size"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"block_size={size!r} must be a whole number of at least 1")
        return size
    named = VARIANT_NAME.search(str(c.get(hf.RELEASE_NAME_KEY) or ""))
    if named and int(named.group(1)) >= 1:
        return int(named.group(1))
    return DEFAULT_BLOCK


def block_rule(c: dict) -> BlockRule:
    # --block-size replaces the size afterwards (dataclasses.replace on spec.block): nothing else here depends on it.
    return BlockRule(size=release_block_size(c), threshold=SDAR_THRESHOLD, prompt="chat")  # the releases are chat models


def _special_ids(config: dict, tokenizer) -> dict:
    return hf.special_ids(config, tokenizer, mask_names=("<|MASK|>",), turn_end_names=("<|im_end|>",))


def _to_config(c: dict) -> ModelConfig:
    block_rule(c)  # a bad block size is a config error, before anything is built
    return qwen3_config(c)


SDAR = Family(
    name="sdar",
    model_types=("sdar",),
    to_config=_to_config,
    weight_map=QWEN3_WEIGHT_MAP,
    special_ids=_special_ids,
    skip_keys=QWEN2_SKIP,
    loop="block-causal",
    block_rule=block_rule,
)
