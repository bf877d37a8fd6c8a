"""Tiny random checkpoints in the released layouts of the 2026 block-diffusion and Seed families.

SDAR-{1.7B,4B,8B}-Chat and Fast_dLLM_v2_7B start from the releases' own files
(tests/releases/, read by tests/release_checkpoints.py): config.json with only the sizes
changed (the hub's SDAR config.json has no block_size and no mask_token_id), generation_config.json,
special_tokens_map.json, added_tokens.json and tokenizer_config.json with the special ids moved
to the tiny vocabulary, the file set the release ships, the weight names of its index. The
remote code files (configuration_sdar.py, modeling_sdar.py, ...) are stand-ins sharpen never runs.
Only the sizes are tiny; the special tokens sit after the BPE vocabulary in the release's order.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer

from family_checkpoints import padded, random_state, write_sharded, write_tokenizer
from release_checkpoints import added_tokens, facts, generation_config, id_map, shrink, special_tokens, tokenizer_config, write_json

# Qwen3's added tokens in their released order (151643...), SDAR's <|MASK|> last (151669).
QWEN3_SPECIAL = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
)
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
SDAR_FILES = tuple(facts("SDAR-8B-Chat")["files"])

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


def release_tokenizer_files(out: Path, record: dict, tiny: dict[str, int], ids: dict[int, int], template: str) -> None:
    """vocab.json + merges.txt beside tokenizer.json, and the release's added_tokens.json,
    special_tokens_map.json, tokenizer_config.json and chat_template.jinja where it ships them
    (tests/release_checkpoints.py: its ids moved to the tiny vocabulary, its template shortened)."""
    Tokenizer.from_file(str(out / "tokenizer.json")).model.save(str(out))  # vocab.json, merges.txt
    for name, data in (("added_tokens.json", added_tokens(record, tiny, ids)),
                       ("special_tokens_map.json", record.get("special_tokens_map.json")),
                       ("tokenizer_config.json", tokenizer_config(record, ids, template)),
                       ("generation_config.json", generation_config(record, ids))):
        if data is not None:
            write_json(out / name, data)
    if "chat_template.jinja" in record["files"]:
        (out / "chat_template.jinja").write_text(template, encoding="utf-8")


def release_vocabulary(out: Path, record: dict) -> tuple[dict[str, int], dict[int, int], int]:
    """A tiny tokenizer.json with the release's added tokens after the BPE, in the release's order:
    (tiny ids by text, release id -> tiny id, embedding rows)."""
    tiny = write_tokenizer(out, tuple(text for _, text in special_tokens(record)))
    return tiny, id_map(record, tiny), padded(max(tiny.values()) + 1)


def qwen3_sizes(vocab: int) -> dict:
    return {"hidden_size": D, "intermediate_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "num_key_value_heads": KV, "head_dim": HEAD_DIM, "max_window_layers": LAYERS, "vocab_size": vocab}


def write_sdar(out: Path, *, seed: int = 7, tie: bool = False, shards: int = 2, dtype: torch.dtype = torch.float32,
               release: str = "SDAR-8B-Chat", training_copy: bool = False) -> Path:
    """SDAR-8B-Chat's files as the hub ships them (tests/releases/SDAR-8B-Chat), tiny: 2 layers,
    hidden 64, head_dim 32. Its config.json has no block_size and no mask_token_id; with
    `training_copy`, the repository's training copy, which adds both. tie=True as SDAR-1.7B-Chat
    (no file of it was found: tied embeddings as its Qwen3-1.7B base, docs/models.md)."""
    out.mkdir(parents=True, exist_ok=True)
    record = facts(release)
    tiny, ids, vocab = release_vocabulary(out, record)
    config = shrink(record["config.json"], qwen3_sizes(vocab), ids)
    if tie:
        config["tie_word_embeddings"] = True
    if training_copy:
        config.update(block_size=4, mask_token_id=tiny["<|MASK|>"])
    write_json(out / "config.json", config)
    release_tokenizer_files(out, record, tiny, ids, QWEN3_TEMPLATE)
    for name in SDAR_REMOTE_CODE:  # shipped by the release, never run by sharpen
        (out / name).write_text(f"# {name}: stands in for the release's remote code; sharpen loads this family natively\n")
    (out / "README.md").write_text("# SDAR (tiny random test checkpoint in the release layout)\n", encoding="utf-8")
    write_sharded(out, random_state(qwen3_shapes(vocab, config["tie_word_embeddings"]), seed), shards, dtype)
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
FAST_DLLM_FILES = tuple(facts("Fast_dLLM_v2_7B")["files"])  # (+ tokenizer.json, which sharpen reads; not in the vendored copy)


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


def write_fast_dllm_v2(out: Path, *, seed: int = 13, shards: int = 2, dtype: torch.dtype = torch.float32) -> Path:
    """Fast_dLLM_v2_7B's files (tests/releases/Fast_dLLM_v2_7B), tiny: Qwen2 names with q/k/v
    biases, bd_size 32; the chat template in chat_template.jinja only, no mask token named."""
    out.mkdir(parents=True, exist_ok=True)
    record = facts("Fast_dLLM_v2_7B")
    tiny, ids, vocab = release_vocabulary(out, record)
    sizes = {"hidden_size": D, "intermediate_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
             "num_key_value_heads": KV, "max_window_layers": LAYERS, "vocab_size": vocab}
    write_json(out / "config.json", shrink(record["config.json"], sizes, ids))
    release_tokenizer_files(out, record, tiny, ids, QWEN3_TEMPLATE)
    for name in ("configuration.py", "modeling.py"):
        (out / name).write_text(f"# {name}: stands in for the release's remote code; sharpen loads this family natively\n")
    (out / "latest").write_text("global_step2500")
    (out / "README.md").write_text("---\nlicense: apache-2.0\n---\n", encoding="utf-8")
    write_sharded(out, random_state(qwen2_shapes(vocab), seed), shards, dtype)
    return out
