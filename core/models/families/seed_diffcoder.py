"""Stable-DiffCoder 8B (ByteDance-Seed, Base and Instruct): Seed-Coder's Llama, continued as block diffusion.

Its config.json says `model_type: llama`, like any autoregressive Llama, so the family is
recognised by what only it ships: `architectures` StableDiffcoderForCausalLM, or an `auto_map`
into its modeling file (modeling_stable_diffcoder.py since the transformers-5 update,
modeling_seed_diffcoder.py before). The weights are transformers' Llama names (no biases),
the vocabulary 155,136 (Seed-Coder's). Its generate (`generate_block` in that file) is block
diffusion with blocks of 4: a block-causal mask, the prompt's full blocks prefilled into a KV
cache, each block denoised against it, LLaDA's low-confidence remasking (Gumbel-max at the
temperature, a fixed share of the block's masks per step, no threshold in the README's call),
no logit shift, and the mask id 5 unless the tokenizer names one.
"""
from __future__ import annotations

from ..denoiser import BlockRule
from ..model import ModelConfig
from . import hf
from .dream import MAX_CANVAS, QWEN2_SKIP
from .family import Family

_LAYER = "model.layers.{i}."
LLAMA_WEIGHT_MAP = {
    "model.embed_tokens.weight": "embed.weight",
    "model.norm.weight": "norm.weight",
    "lm_head.weight": "output.weight",  # absent with tie_word_embeddings
    _LAYER + "input_layernorm.weight": "layers.{i}.attn_norm.weight",
    _LAYER + "self_attn.q_proj.weight": "layers.{i}.attn.wq.weight",
    _LAYER + "self_attn.k_proj.weight": "layers.{i}.attn.wk.weight",
    _LAYER + "self_attn.v_proj.weight": "layers.{i}.attn.wv.weight",
    _LAYER + "self_attn.o_proj.weight": "layers.{i}.attn.wo.weight",
    _LAYER + "post_attention_layernorm.weight": "layers.{i}.ffn_norm.weight",
    _LAYER + "mlp.gate_proj.weight": "layers.{i}.ffn.w1.weight",
    _LAYER + "mlp.up_proj.weight": "layers.{i}.ffn.w3.weight",
    _LAYER + "mlp.down_proj.weight": "layers.{i}.ffn.w2.weight",
}
ARCHITECTURES = ("StableDiffcoderForCausalLM",)
MODELING_FILES = ("modeling_stable_diffcoder", "modeling_seed_diffcoder")
BLOCK = 4  # generate_block's block_length in the release's README and its default
MASK_ID = 5  # generate_block's default mask_id (<[MASK▁TOKEN]> in Seed-Coder's vocabulary)


def is_stable_diffcoder(config: dict) -> bool:
    """By `architectures` or `auto_map`, never by model_type alone (every Llama says "llama")."""
    if any(a in ARCHITECTURES for a in config.get("architectures") or ()):
        return True
    targets = (config.get("auto_map") or {}).values() if isinstance(config.get("auto_map"), dict) else ()
    return any(isinstance(t, str) and t.split(".")[0] in MODELING_FILES for t in targets)


def llama_config(c: dict) -> ModelConfig:
    if "num_key_value_heads" not in c:
        raise ValueError("it lacks 'num_key_value_heads', which changes the computation; refusing to guess")
    hf.refuse_unsupported(c, keys=("attention_bias", "mlp_bias"))
    dim, n_heads = c["hidden_size"], c["num_attention_heads"]
    return ModelConfig(
        vocab_size=c["vocab_size"],
        dim=dim,
        n_layers=c["num_hidden_layers"],
        n_heads=n_heads,
        n_kv_heads=c["num_key_value_heads"],
        head_dim=c.get("head_dim") or dim // n_heads,
        ffn_hidden=c["intermediate_size"],
        rope_theta=float(c.get("rope_theta", 10000.0)),
        norm_eps=float(c.get("rms_norm_eps") or 1e-6),
        max_seq_len=min(c.get("max_position_embeddings", MAX_CANVAS), MAX_CANVAS),
        tie_embeddings=bool(c.get("tie_word_embeddings", False)),
    )


def _special_ids(config: dict, tokenizer) -> dict:
    ids = hf.special_ids(config, tokenizer, mask_names=("<[MASK▁TOKEN]>",), turn_end_names=("<[end▁of▁sentence]>",))
    if ids["mask_id"] is None:
        ids["mask_id"] = MASK_ID
    return ids


def block_rule(config: dict) -> BlockRule:
    # The Instruct release is a chat model; the Base one has no template: edits reach it as
    # plain text before the slots (core/prompted.py's "chat" needs a template: the run says so).
    # generate_block returns the answer up to its first eos.
    return BlockRule(size=BLOCK, threshold=None, prompt="chat", sampler="gumbel", schedule="masks", pad_last=False, cut_at_end=True)


STABLE_DIFFCODER = Family(
    name="stable-diffcoder",
    model_types=("llama",),
    to_config=llama_config,
    weight_map=LLAMA_WEIGHT_MAP,
    special_ids=_special_ids,
    skip_keys=QWEN2_SKIP,
    loop="block-causal",
    block_rule=block_rule,
    matches=is_stable_diffcoder,
)
