"""Tiny random checkpoints in the released layouts of the 2026 block-diffusion and Seed families.

SDAR-{1.7B,4B,8B}-Chat (JetAstra/SDAR, training/model/SDAR-8B-Chat at c2041a8 lists the file
set): config.json with `model_type: sdar`, `block_size` 4, `mask_token_id` and the Qwen3 keys
(`head_dim`, q/k norms), generation_config.json (eos [<|im_end|>, <|endoftext|>], temperature
0.6, top-k 20, top-p 0.95), tokenizer.json + vocab.json + merges.txt + added_tokens.json +
special_tokens_map.json + tokenizer_config.json (mask_token <|MASK|>, chat template) +
chat_template.jinja, sharded safetensors with model.safetensors.index.json, and the remote
code files (configuration_sdar.py, modeling_sdar.py, tokenization_qwen2*.py,
fused_linear_diffusion_cross_entropy.py), which sharpen never runs. Only the sizes are tiny;
the special tokens sit after the BPE vocabulary in Qwen's order, as in the release.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer

from family_checkpoints import padded, random_state, write_sharded, write_tokenizer

# Qwen3's added tokens in their released order (151643...), SDAR's <|MASK|> last (151669).
QWEN3_SPECIAL = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
)
SDAR_SPECIAL = (*QWEN3_SPECIAL, "<|MASK|>")
# Qwen3's ChatML without a default system turn (SDAR's chat_template.jinja, shortened to what an edit uses).
QWEN3_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message['role'] != 'system' %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
SDAR_REMOTE_CODE = ("configuration_sdar.py", "modeling_sdar.py", "tokenization_qwen2.py", "tokenization_qwen2_fast.py",
                    "fused_linear_diffusion_cross_entropy.py")
# The release's file set (besides the weight shards, which follow model.safetensors.index.json).
SDAR_FILES = ("README.md", "added_tokens.json", "chat_template.jinja", "config.json", *SDAR_REMOTE_CODE, "generation_config.json",
              "merges.txt", "model.safetensors.index.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
              "vocab.json")

D, LAYERS, HEADS, KV, HEAD_DIM, HIDDEN = 64, 2, 4, 2, 32, 96  # head_dim stated apart from hidden/heads, as Qwen3 does


def _json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def qwen3_shapes(vocab: int, tie: bool) -> dict[str, tuple[int, ...]]:
    shapes = {"model.embed_tokens.weight": (vocab, D)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (D,), p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, D),
            p + "self_attn.k_proj.weight": (KV * HEAD_DIM, D), p + "self_attn.v_proj.weight": (KV * HEAD_DIM, D),
            p + "self_attn.o_proj.weight": (D, HEADS * HEAD_DIM), p + "self_attn.q_norm.weight": (HEAD_DIM,),
            p + "self_attn.k_norm.weight": (HEAD_DIM,), p + "post_attention_layernorm.weight": (D,),
            p + "mlp.gate_proj.weight": (HIDDEN, D), p + "mlp.up_proj.weight": (HIDDEN, D), p + "mlp.down_proj.weight": (D, HIDDEN),
        })
    shapes["model.norm.weight"] = (D,)
    if not tie:
        shapes["lm_head.weight"] = (vocab, D)
    return shapes


def _tokenizer_files(out: Path, special: tuple[str, ...], ids: dict[str, int], mask: str, template: str) -> None:
    """vocab.json + merges.txt beside tokenizer.json, added_tokens.json, special_tokens_map.json,
    tokenizer_config.json (added_tokens_decoder, Qwen2Tokenizer, the chat template) and chat_template.jinja."""
    Tokenizer.from_file(str(out / "tokenizer.json")).model.save(str(out))  # vocab.json, merges.txt
    _json(out / "added_tokens.json", {name: ids[name] for name in sorted(special)})
    additional = [t for t in special if t.startswith("<|") and t not in ("<|endoftext|>",) and "fim" not in t
                  and t not in ("<|repo_name|>", "<|file_sep|>")]
    _json(out / "special_tokens_map.json", {"additional_special_tokens": additional,
                                           "eos_token": {"content": "<|endoftext|>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False},
                                           "pad_token": {"content": "<|endoftext|>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}})
    decoder = {str(ids[t]): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                             "special": t.startswith("<|") or t == mask} for t in special}
    _json(out / "tokenizer_config.json", {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": decoder,
        "additional_special_tokens": additional, "auto_map": {"AutoTokenizer": ["tokenization_qwen2.Qwen2Tokenizer", None]},
        "bos_token": None, "chat_template": template, "clean_up_tokenization_spaces": False, "eos_token": "<|endoftext|>",
        "mask_token": mask, "errors": "replace", "model_max_length": 131072, "pad_token": "<|endoftext|>",
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None})
    (out / "chat_template.jinja").write_text(template, encoding="utf-8")


def sdar_config(ids: dict[str, int], vocab: int, tie: bool, block_size: int = 4) -> dict:
    """config.json of SDAR-8B-Chat, key for key, at tiny sizes."""
    return {
        "architectures": ["SDARForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_sdar.SDARConfig", "AutoModel": "modeling_sdar.SDARModel",
                     "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"},
        "attention_bias": False, "attention_dropout": 0.0, "attn_implementation": "flex_attention",
        "bos_token_id": ids["<|endoftext|>"], "debug": False, "eos_token_id": ids["<|endoftext|>"],
        "block_size": block_size, "mask_token_id": ids["<|MASK|>"], "ep_size": 1, "fuse_cross_entropy": True,
        "head_dim": HEAD_DIM, "hidden_act": "silu", "hidden_size": D, "initializer_range": 0.02, "intermediate_size": HIDDEN,
        "max_position_embeddings": 32768, "max_window_layers": LAYERS, "micro_forward": False, "model_type": "sdar",
        "num_attention_heads": HEADS, "num_hidden_layers": LAYERS, "num_key_value_heads": KV, "rms_norm_eps": 1e-06,
        "rope_scaling": None, "rope_theta": 1000000, "skip_checkpoint": False, "sliding_window": None,
        "tie_word_embeddings": tie, "torch_dtype": "bfloat16", "transformers_version": "4.52.4", "use_cache": False,
        "use_deepep": False, "use_sliding_window": False, "vocab_size": vocab,
    }


def write_sdar(out: Path, *, seed: int = 7, tie: bool = False, shards: int = 2, dtype: torch.dtype = torch.float32,
               block_size: int = 4) -> Path:
    """SDAR-8B-Chat's file set, tiny (2 layers, hidden 64, head_dim 32); tie=True as SDAR-1.7B-Chat."""
    out.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer(out, SDAR_SPECIAL)
    vocab = padded(max(ids.values()) + 1)
    _json(out / "config.json", sdar_config(ids, vocab, tie, block_size))
    _json(out / "generation_config.json", {
        "bos_token_id": ids["<|endoftext|>"], "do_sample": True, "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"], "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})
    _tokenizer_files(out, SDAR_SPECIAL, ids, "<|MASK|>", QWEN3_TEMPLATE)
    for name in SDAR_REMOTE_CODE:  # shipped by the release, never run by sharpen
        (out / name).write_text(f"# {name}: stands in for the release's remote code; sharpen loads this family natively\n")
    (out / "README.md").write_text("# SDAR (tiny random test checkpoint in the release layout)\n", encoding="utf-8")
    write_sharded(out, random_state(qwen3_shapes(vocab, tie), seed), shards, dtype)
    return out


# Stable-DiffCoder-8B-Instruct (huggingface.co/ByteDance-Seed, the transformers-5 revision): config.json
# (model_type llama, architectures StableDiffcoderForCausalLM, auto_map to modeling_stable_diffcoder),
# tokenizer.json + tokenizer_config.json (the chat template) + special_tokens_map.json, sharded
# safetensors with the index, modeling_stable_diffcoder.py, README.md. No generation_config.json.
# Seed-Coder's specials open the vocabulary; id 5 is the mask generate_block uses by default.
SEED_SPECIAL = ("<[begin▁of▁sentence]>", "<[PAD▁TOKEN]>", "<[end▁of▁sentence]>", "<[SEP▁TOKEN]>", "<[CLS▁TOKEN]>", "<[MASK▁TOKEN]>")
SEED_TEMPLATE = (  # Seed-Coder-Instruct's turns, shortened to what an edit uses
    "{{ bos_token }}{%- for message in messages %}{{- '<[begin▁of▁sentence]>' + message['role'] + '\n' + message['content'] + "
    "'<[end▁of▁sentence]>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<[begin▁of▁sentence]>assistant\n' }}{%- endif %}"
)
STABLE_DIFFCODER_FILES = ("README.md", "config.json", "model.safetensors.index.json", "modeling_stable_diffcoder.py",
                          "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json")


def _seed_tokenizer(out: Path, bpe_size: int = 300) -> dict[str, int]:
    """Byte-level BPE whose first ids are Seed-Coder's special tokens, as in the release."""
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from checkpoints import TRAINING_TEXT

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=bpe_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
                                  special_tokens=list(SEED_SPECIAL))
    hf.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    hf.save(str(out / "tokenizer.json"))
    return {name: hf.token_to_id(name) for name in SEED_SPECIAL}


def llama_shapes(vocab: int) -> dict[str, tuple[int, ...]]:
    hd = D // HEADS
    shapes = {"model.embed_tokens.weight": (vocab, D)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (D,), p + "self_attn.q_proj.weight": (D, D), p + "self_attn.k_proj.weight": (KV * hd, D),
            p + "self_attn.v_proj.weight": (KV * hd, D), p + "self_attn.o_proj.weight": (D, D), p + "post_attention_layernorm.weight": (D,),
            p + "mlp.gate_proj.weight": (HIDDEN, D), p + "mlp.up_proj.weight": (HIDDEN, D), p + "mlp.down_proj.weight": (D, HIDDEN),
        })
    shapes["model.norm.weight"] = (D,)
    shapes["lm_head.weight"] = (vocab, D)
    return shapes


def write_stable_diffcoder(out: Path, *, seed: int = 9, shards: int = 2, dtype: torch.dtype = torch.float32,
                           instruct: bool = True) -> Path:
    """Stable-DiffCoder-8B-Instruct's file set (Base: no chat template), tiny."""
    out.mkdir(parents=True, exist_ok=True)
    ids = _seed_tokenizer(out)
    assert ids["<[MASK▁TOKEN]>"] == 5
    vocab = padded(300)
    _json(out / "config.json", {
        "architectures": ["StableDiffcoderForCausalLM"],
        "auto_map": {"AutoModel": "modeling_stable_diffcoder.StableDiffcoderForCausalLM",
                     "AutoModelForCausalLM": "modeling_stable_diffcoder.StableDiffcoderForCausalLM"},
        "attention_bias": False, "attention_dropout": 0.1, "bos_token_id": ids["<[begin▁of▁sentence]>"],
        "eos_token_id": ids["<[end▁of▁sentence]>"], "hidden_act": "silu", "hidden_size": D, "initializer_range": 0.009882118,
        "intermediate_size": HIDDEN, "layer_norm_eps": None, "max_position_embeddings": 8192, "mlp_bias": False,
        "model_type": "llama", "num_attention_heads": HEADS, "num_hidden_layers": LAYERS, "num_key_value_heads": KV,
        "resid_pdrop": 0.1, "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "5.3.0", "use_cache": True, "vocab_size": vocab})
    special = {"bos_token": "<[begin▁of▁sentence]>", "eos_token": "<[end▁of▁sentence]>", "pad_token": "<[PAD▁TOKEN]>",
               "sep_token": "<[SEP▁TOKEN]>"}
    _json(out / "special_tokens_map.json", {k: {"content": v, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
                                           for k, v in special.items()})
    decoder = {str(ids[t]): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
               for t in SEED_SPECIAL}
    tok_cfg = {"added_tokens_decoder": decoder, **special, "clean_up_tokenization_spaces": False, "model_max_length": 8192,
               "tokenizer_class": "PreTrainedTokenizerFast"}
    if instruct:
        tok_cfg["chat_template"] = SEED_TEMPLATE
    _json(out / "tokenizer_config.json", tok_cfg)
    (out / "modeling_stable_diffcoder.py").write_text("# modeling_stable_diffcoder.py: stands in for the release's remote code; "
                                                      "sharpen loads this family natively\n")
    (out / "README.md").write_text("# Stable-DiffCoder (tiny random test checkpoint in the release layout)\n", encoding="utf-8")
    write_sharded(out, random_state(llama_shapes(vocab), seed), shards, dtype)
    return out


# Fast_dLLM_v2_7B / _1.5B (huggingface.co/Efficient-Large-Model): config.json (model_type Fast_dLLM_Qwen,
# bd_size 32, Qwen2.5 keys, layer_types), configuration.py + modeling.py (remote code), the Qwen2.5
# tokenizer files with the mask token added after <|file_sep|> (151665), generation_config.json,
# the shards with their index, and the training run's `latest` marker.
FAST_DLLM_SPECIAL = (*QWEN3_SPECIAL[:22], "|<MASK>|")
FAST_DLLM_FILES = ("README.md", "added_tokens.json", "config.json", "configuration.py", "generation_config.json", "latest",
                   "merges.txt", "model.safetensors.index.json", "modeling.py", "special_tokens_map.json", "tokenizer.json",
                   "tokenizer_config.json", "vocab.json")


def qwen2_shapes(vocab: int) -> dict[str, tuple[int, ...]]:
    hd = D // HEADS
    shapes = {"model.embed_tokens.weight": (vocab, D)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (D,), p + "self_attn.q_proj.weight": (D, D), p + "self_attn.q_proj.bias": (D,),
            p + "self_attn.k_proj.weight": (KV * hd, D), p + "self_attn.k_proj.bias": (KV * hd,),
            p + "self_attn.v_proj.weight": (KV * hd, D), p + "self_attn.v_proj.bias": (KV * hd,),
            p + "self_attn.o_proj.weight": (D, D), p + "post_attention_layernorm.weight": (D,),
            p + "mlp.gate_proj.weight": (HIDDEN, D), p + "mlp.up_proj.weight": (HIDDEN, D), p + "mlp.down_proj.weight": (D, HIDDEN),
        })
    shapes["model.norm.weight"] = (D,)
    shapes["lm_head.weight"] = (vocab, D)
    return shapes


def write_fast_dllm_v2(out: Path, *, seed: int = 13, shards: int = 2, dtype: torch.dtype = torch.float32, bd_size: int = 32) -> Path:
    """Fast_dLLM_v2_7B's file set, tiny (Qwen2 names with q/k/v biases, bd_size 32)."""
    out.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer(out, FAST_DLLM_SPECIAL)
    vocab = padded(max(ids.values()) + 1)
    _json(out / "config.json", {
        "architectures": ["Fast_dLLM_QwenForCausalLM"], "attention_dropout": 0.0,
        "auto_map": {"AutoConfig": "configuration.Fast_dLLM_QwenConfig", "AutoModel": "modeling.Fast_dLLM_QwenModel",
                     "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM"},
        "bd_size": bd_size, "bos_token_id": ids["<|endoftext|>"], "conplemenrary_mask": True, "eos_token_id": ids["<|im_end|>"],
        "hidden_act": "silu", "hidden_size": D, "initializer_range": 0.02, "intermediate_size": HIDDEN,
        "layer_types": ["full_attention"] * LAYERS, "max_position_embeddings": 32768, "max_window_layers": LAYERS,
        "model_type": "Fast_dLLM_Qwen", "num_attention_heads": HEADS, "num_hidden_layers": LAYERS, "num_key_value_heads": KV,
        "pad_token_id": ids["<|im_end|>"], "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0,
        "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.53.1",
        "use_cache": True, "use_sliding_window": False, "vocab_size": vocab})
    _json(out / "generation_config.json", {"bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
                                           "pad_token_id": ids["<|endoftext|>"], "transformers_version": "4.53.1"})
    _tokenizer_files(out, FAST_DLLM_SPECIAL, ids, "|<MASK>|", QWEN3_TEMPLATE)
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    cfg.pop("mask_token")  # the release names no mask token: its generation code passes the id
    cfg["eos_token"], cfg["pad_token"] = "<|im_end|>", "<|endoftext|>"
    _json(out / "tokenizer_config.json", cfg)
    (out / "chat_template.jinja").unlink()  # the template lives in tokenizer_config.json only
    for name in ("configuration.py", "modeling.py"):
        (out / name).write_text(f"# {name}: stands in for the release's remote code; sharpen loads this family natively\n")
    (out / "latest").write_text("global_step2500")
    (out / "README.md").write_text("---\nlicense: apache-2.0\n---\n", encoding="utf-8")
    write_sharded(out, random_state(qwen2_shapes(vocab), seed), shards, dtype)
    return out
