"""Tiny random mixture-of-experts checkpoints in their releases' on-disk layouts.

LLaDA2.0 / LLaDA2.1 (inclusionAI/LLaDA2.0-mini, -flash, LLaDA2.1-mini; Ling 2.0 "BailingMoeV2"):
config.json with the release's own keys (inclusionAI/dFactory configs/model_configs/llada2_mini,
whose model_type a conversion script rewrites from "llada2_moe"), sharded safetensors + index
under the release's tensor names (fused `query_key_value`, `query_layernorm` / `key_layernorm`,
`word_embeddings`, `lm_head`; the first `first_k_dense_replace` layers a dense `mlp`, the rest
`mlp.gate` (weight + `expert_bias`), one tensor per expert `mlp.experts.{j}.{gate,up,down}_proj`,
and `mlp.shared_experts`), tokenizer.json whose special tokens are Ling's (`<|endoftext|>` eos,
`<|mask|>` mask, `<|role_end|>` end of turn; appended after a tiny BPE, so ids are small),
tokenizer_config.json, special_tokens_map.json and generation_config.json. The release also
ships its remote code (modeling_llada2_moe.py, configuration_llada2_moe.py); sharpen never runs
it, so those files are written as one-line stand-ins. Only the sizes are tiny.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from family_checkpoints import _write_json, padded, random_state, write_sharded, write_tokenizer
from release_checkpoints import facts, shrink

LING_SPECIAL = ("<|startoftext|>", "<|endoftext|>", "<role>", "</role>", "<|role_end|>", "<|mask|>")
# Ling 2.0's chat format, shortened to what matters: role tags, a turn end, the assistant opening.
LING_TEMPLATE = (
    "{%- for message in messages %}{{- '<role>' + (message['role'] | upper | replace('USER', 'HUMAN')) + '</role>'"
    " + message['content'] + '<|role_end|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<role>ASSISTANT</role>' }}{%- endif %}"
)

# The releases' special ids (LLaDA2.x tokenizer.json; <|endoftext|> is config.json's pad_token_id)
# and vocabulary: write_llada2(release_ids=True) puts the special tokens there, the BPE below them.
LING_RELEASE_IDS = {"<|startoftext|>": 156891, "<|endoftext|>": 156892, "<role>": 156893, "</role>": 156894,
                    "<|mask|>": 156895, "<|role_end|>": 156896}
LING_VOCAB = 157184

# The tiny shape: layer 0 dense, layers 1-2 MoE; 8 experts in 4 groups, 2 groups allowed, top 2.
TINY = dict(d=64, layers=3, heads=4, kv=2, head_dim=16, dense_hidden=96, expert_hidden=32, experts=8, top_k=2,
            n_group=4, topk_group=2, shared=1, first_dense=1)


def llada2_config(ids: dict[str, int], vocab: int, *, version: str = "2.0", **shape) -> dict:
    """config.json as LLaDA2.0-mini ships it (tests/releases/LLaDA2.0-mini), at the tiny shape: only
    sizes change, and pad_token_id (156892, <|endoftext|>) moves with its token."""
    s = {**TINY, **shape}
    sizes = {"num_hidden_layers": s["layers"], "hidden_size": s["d"], "intermediate_size": s["dense_hidden"],
             "first_k_dense_replace": s["first_dense"], "max_position_embeddings": 512, "moe_intermediate_size": s["expert_hidden"],
             "num_experts_per_tok": s["top_k"], "num_attention_heads": s["heads"], "num_experts": s["experts"],
             "num_key_value_heads": s["kv"], "head_dim": s["head_dim"], "num_shared_experts": s["shared"], "vocab_size": vocab,
             "rotary_dim": s["head_dim"] // 2, "n_group": s["n_group"], "topk_group": s["topk_group"]}
    config = shrink(facts("LLaDA2.0-mini")["config.json"], sizes, {LING_RELEASE_IDS["<|endoftext|>"]: ids["<|endoftext|>"]})
    if version == "2.1":  # LLaDA2.1-mini states the q/k norm its configuration class defaults to (no file of 2.1 found: docs/models.md)
        config["use_qk_norm"] = True
    return config


def llada2_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor of the release, name -> shape, in the release's names."""
    d, hd = config["hidden_size"], config["head_dim"]
    h, kv, e, f = config["num_attention_heads"], config["num_key_value_heads"], config["num_experts"], config["moe_intermediate_size"]
    shapes: dict[str, tuple[int, ...]] = {"model.word_embeddings.weight": (config["vocab_size"], d)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (d,),
            p + "attention.query_key_value.weight": ((h + 2 * kv) * hd, d),
            p + "attention.query_layernorm.weight": (hd,),
            p + "attention.key_layernorm.weight": (hd,),
            p + "attention.dense.weight": (d, h * hd),
            p + "post_attention_layernorm.weight": (d,),
        })
        if i < config["first_k_dense_replace"]:
            n = config["intermediate_size"]
            shapes.update({p + "mlp.gate_proj.weight": (n, d), p + "mlp.up_proj.weight": (n, d), p + "mlp.down_proj.weight": (d, n)})
            continue
        shapes.update({p + "mlp.gate.weight": (e, d), p + "mlp.gate.expert_bias": (e,)})
        for j in range(e):
            q = p + f"mlp.experts.{j}."
            shapes.update({q + "gate_proj.weight": (f, d), q + "up_proj.weight": (f, d), q + "down_proj.weight": (d, f)})
        s = f * config["num_shared_experts"]
        shapes.update({p + "mlp.shared_experts.gate_proj.weight": (s, d), p + "mlp.shared_experts.up_proj.weight": (s, d),
                       p + "mlp.shared_experts.down_proj.weight": (d, s)})
    shapes["model.norm.weight"] = (d,)
    shapes["lm_head.weight"] = (config["vocab_size"], d)
    return shapes


def llada2_state(config: dict, seed: int, head_scale: float = 1.0) -> dict[str, torch.Tensor]:
    """Random weights; the expert bias is large enough (~0.3 against sigmoid scores in (0, 1))
    that selection with it differs from selection without it, so a test sees the bias used.
    `head_scale` sharpens the output head: a random model is otherwise never confident enough
    to pass LLaDA2.1's editing threshold, and a decode test would see no edits."""
    state = random_state(llada2_shapes(config), seed)
    gen = torch.Generator().manual_seed(seed + 1)
    for name in state:
        if name.endswith("expert_bias"):
            state[name] = 0.3 * torch.randn(state[name].shape, generator=gen)
        elif name.endswith("mlp.gate.weight"):  # router logits of a few units: routing decided, not coin flips
            state[name] = 2.0 * torch.randn(state[name].shape, generator=gen) / state[name].shape[1] ** 0.5
    state["lm_head.weight"] *= head_scale
    return state


def write_llada2(out: Path, *, version: str = "2.0", seed: int = 31, shards: int = 3, dtype: torch.dtype = torch.float32,
                 head_scale: float = 1.0, release_ids: bool = False, config_overrides: dict | None = None, **shape) -> Path:
    """A LLaDA2.x checkpoint directory in the release's layout, at the tiny shape; with
    `release_ids`, the release's special ids (mask 156895, eos 156892) and vocabulary (157,184 rows)."""
    out.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer(out, LING_SPECIAL)
    if release_ids:
        tok = json.loads((out / "tokenizer.json").read_text())
        for token in tok["added_tokens"]:  # in the vocabulary too, as the release's: tokenizers keeps their ids then
            token["id"] = tok["model"]["vocab"][token["content"]] = LING_RELEASE_IDS[token["content"]]
        (out / "tokenizer.json").write_text(json.dumps(tok))
        ids = dict(LING_RELEASE_IDS)
    config = llada2_config(ids, LING_VOCAB if release_ids else padded(max(ids.values()) + 1), version=version, **shape)
    _write_json(out / "config.json", {**config, **(config_overrides or {})})  # overrides: config.json only, not the weights
    _write_json(out / "tokenizer_config.json", {
        "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512, "chat_template": LING_TEMPLATE,
    })
    _write_json(out / "special_tokens_map.json", {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})
    _write_json(out / "generation_config.json", {"bos_token_id": ids["<|startoftext|>"], "eos_token_id": ids["<|endoftext|>"],
                                                 "pad_token_id": ids["<|endoftext|>"], "transformers_version": "4.52.3"})
    (out / "README.md").write_text("# LLaDA2 (tiny random test checkpoint in the release's layout)\n")
    for name in ("configuration_llada2_moe.py", "modeling_llada2_moe.py"):  # in the release; sharpen never runs them
        (out / name).write_text(f"# {name}: stands in for the release's remote code; sharpen loads this family natively\n")
    write_sharded(out, llada2_state(config, seed, head_scale), shards, dtype)
    return out


# --- SDAR-30B-A3B (JetAstra; Qwen3-MoE names, SDAR's block-diffusion keys) -------------------------

QWEN3_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|MASK|>")
QWEN3_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SDAR_TINY = dict(d=64, layers=2, heads=4, kv=2, head_dim=32, dense_hidden=96, expert_hidden=24, experts=8, top_k=2)


def sdar_moe_config(ids: dict[str, int], vocab: int, **shape) -> dict:
    """config.json as SDAR-30B-A3B-Chat ships it: SDAR's own keys (block_size, mask_token_id, ...)
    over Qwen3-30B-A3B's MoE keys, at the tiny shape."""
    s = {**SDAR_TINY, **shape}
    return {
        "architectures": ["SDARMoeForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_sdar_moe.SDARMoeConfig", "AutoModel": "modeling_sdar_moe.SDARMoeModel",
                     "AutoModelForCausalLM": "modeling_sdar_moe.SDARMoeForCausalLM"},
        "attention_bias": False, "attention_dropout": 0.0, "attn_implementation": "flex_attention",
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|endoftext|>"],
        "block_size": 4, "mask_token_id": ids["<|MASK|>"],
        "decoder_sparse_step": 1, "head_dim": s["head_dim"], "hidden_act": "silu", "hidden_size": s["d"],
        "initializer_range": 0.02, "intermediate_size": s["dense_hidden"], "max_position_embeddings": 512,
        "max_window_layers": s["layers"], "mlp_only_layers": [], "model_type": "sdar_moe",
        "moe_intermediate_size": s["expert_hidden"], "norm_topk_prob": True, "num_attention_heads": s["heads"],
        "num_experts": s["experts"], "num_experts_per_tok": s["top_k"], "num_hidden_layers": s["layers"],
        "num_key_value_heads": s["kv"], "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
        "rope_theta": 1000000, "router_aux_loss_coef": 0.001, "sliding_window": None, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.52.4", "use_cache": False, "use_sliding_window": False,
        "vocab_size": vocab,
    }


def sdar_moe_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    d, hd, h, kv = config["hidden_size"], config["head_dim"], config["num_attention_heads"], config["num_key_value_heads"]
    e, f = config["num_experts"], config["moe_intermediate_size"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config["vocab_size"], d)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (d,), p + "self_attn.q_proj.weight": (h * hd, d), p + "self_attn.k_proj.weight": (kv * hd, d),
            p + "self_attn.v_proj.weight": (kv * hd, d), p + "self_attn.o_proj.weight": (d, h * hd),
            p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,), p + "post_attention_layernorm.weight": (d,),
            p + "mlp.gate.weight": (e, d),
        })
        for j in range(e):
            q = p + f"mlp.experts.{j}."
            shapes.update({q + "gate_proj.weight": (f, d), q + "up_proj.weight": (f, d), q + "down_proj.weight": (d, f)})
    shapes["model.norm.weight"] = (d,)
    shapes["lm_head.weight"] = (config["vocab_size"], d)
    return shapes


def write_sdar_moe(out: Path, *, seed: int = 30, shards: int = 2, dtype: torch.dtype = torch.float32, **shape) -> Path:
    """An SDAR-30B-A3B-Chat checkpoint directory in the release's layout, at the tiny shape."""
    out.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer(out, QWEN3_SPECIAL)
    config = sdar_moe_config(ids, padded(max(ids.values()) + 1), **shape)
    _write_json(out / "config.json", config)
    _write_json(out / "tokenizer_config.json", {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                                                "tokenizer_class": "Qwen2Tokenizer", "model_max_length": 512})
    (out / "chat_template.jinja").write_text(QWEN3_TEMPLATE)
    _write_json(out / "special_tokens_map.json", {"additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|MASK|>"],
                                                  "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})
    _write_json(out / "added_tokens.json", {name: ids[name] for name in QWEN3_SPECIAL})
    _write_json(out / "generation_config.json", {"bos_token_id": ids["<|endoftext|>"], "do_sample": True,
                                                 "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
                                                 "pad_token_id": ids["<|endoftext|>"], "temperature": 0.6, "top_k": 20, "top_p": 0.95,
                                                 "transformers_version": "4.51.0"})
    model = json.loads((out / "tokenizer.json").read_text())["model"]
    _write_json(out / "vocab.json", model["vocab"])
    (out / "merges.txt").write_text("#version: 0.2\n" + "\n".join(m if isinstance(m, str) else " ".join(m) for m in model["merges"]) + "\n")
    (out / "README.md").write_text("# SDAR-30B-A3B-Chat (tiny random test checkpoint in the release's layout)\n")
    for name in ("configuration_sdar_moe.py", "modeling_sdar_moe.py", "tokenization_qwen2.py", "tokenization_qwen2_fast.py",
                 "fused_linear_diffusion_cross_entropy.py"):  # in the release; sharpen never runs them
        (out / name).write_text(f"# {name}: stands in for the release's remote code; sharpen loads this family natively\n")
    state = random_state(sdar_moe_shapes(config), seed)
    gen = torch.Generator().manual_seed(seed + 1)
    for name in state:
        if name.endswith("mlp.gate.weight"):  # decided routing, as for LLaDA2 above
            state[name] = 2.0 * torch.randn(state[name].shape, generator=gen) / state[name].shape[1] ** 0.5
    write_sharded(out, state, shards, dtype)
    return out
