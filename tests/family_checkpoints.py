"""Tiny random checkpoints in the real on-disk layouts of LLaDA, Dream and Open-dCoder.

Each directory has what the released checkpoints have: config.json with the family's own
key names, weights under the released tensor names in sharded safetensors with
model.safetensors.index.json, tokenizer.json whose special tokens are the family's
(appended after the BPE vocabulary, as in the real ones), and tokenizer_config.json
(special-token names, chat template for instruct variants). Only the sizes are tiny.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from checkpoints import TRAINING_TEXT

LLADA_SPECIAL = ("<|startoftext|>", "<|endoftext|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|mdm_mask|>")
QWEN_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
DREAM_SPECIAL = (*QWEN_SPECIAL, "<|beginoftext|>", "<|mask|>")
OPEN_DCODER_SPECIAL = (*QWEN_SPECIAL, "[MASK]")

# The released templates, shortened to what matters: LLaDA-8B-Instruct (Llama 3 headers)
# and Qwen2.5's ChatML (Dream-Instruct).
LLADA_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
CHATML_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{%- endif %}"
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)


def write_tokenizer(out: Path, special: tuple[str, ...], bpe_size: int = 300) -> dict[str, int]:
    """Byte-level BPE trained on a little code, the family's special tokens appended after it."""
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=bpe_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    hf.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    hf.add_special_tokens(list(special))
    hf.save(str(out / "tokenizer.json"))
    return {name: hf.token_to_id(name) for name in special}


def padded(n: int, multiple: int = 64) -> int:
    # released embeddings are padded past the tokenizer (LLaDA 126464, Qwen2.5 151936/152064)
    return multiple * math.ceil(n / multiple)


def random_state(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    """Weights with visible structure: norms near 1 (not exactly), fan-in scaled matrices."""
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in shapes.items():
        if "norm" in name or name.endswith("ln_f.weight"):
            t = 1 + 0.2 * torch.randn(shape, generator=gen)
        elif name.endswith(".bias"):
            t = 0.2 * torch.randn(shape, generator=gen)
        elif "wte" in name or "embed_tokens" in name:
            t = torch.randn(shape, generator=gen)
        else:
            t = torch.randn(shape, generator=gen) / math.sqrt(shape[-1])
        state[name] = t
    return state


def write_sharded(out: Path, state: dict[str, torch.Tensor], shards: int, dtype: torch.dtype) -> None:
    names = list(state)
    per = math.ceil(len(names) / shards)
    weight_map, total = {}, 0
    for k in range(shards):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: state[n].to(dtype).contiguous() for n in names[k * per:(k + 1) * per]}
        save_file(part, str(out / file), metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
        total += sum(t.nbytes for t in part.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def write_llada(out: Path, *, instruct: bool = False, mask_in_config: bool = True, tie: bool = False,
                qkv_bias: bool = False, seed: int = 0, shards: int = 3, dtype: torch.dtype = torch.bfloat16) -> Path:
    """LLaDA-8B layout (OLMo names, block_type llama), at d_model 64 and 2 layers."""
    out.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer(out, LLADA_SPECIAL)
    vocab = padded(max(ids.values()) + 1)
    d, layers, heads, kv, hidden = 64, 2, 4, 2, 96
    config = {
        "architectures": ["LLaDAModelLM"],
        "auto_map": {"AutoConfig": "configuration_llada.LLaDAConfig", "AutoModel": "modeling_llada.LLaDAModelLM"},
        "model_type": "llada",
        "activation_type": "silu", "alibi": False, "attention_layer_norm": False, "block_type": "llama",
        "d_model": d, "n_layers": layers, "n_heads": heads, "n_kv_heads": kv, "mlp_hidden_size": hidden, "mlp_ratio": 4,
        "embedding_size": vocab, "vocab_size": vocab, "max_sequence_length": 512, "rope": True, "rope_theta": 500000.0,
        "rope_full_precision": True, "rms_norm_eps": 1e-5, "layer_norm_type": "rms", "include_bias": False,
        "include_qkv_bias": qkv_bias, "weight_tying": tie, "scale_logits": False, "input_emb_norm": False,
        "eos_token_id": ids["<|endoftext|>"], "pad_token_id": ids["<|endoftext|>"], "use_cache": False,
    }
    if mask_in_config:
        config["mask_token_id"] = ids["<|mdm_mask|>"]
    _write_json(out / "config.json", config)
    tok_cfg = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
               "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512}
    if instruct:
        tok_cfg["chat_template"] = LLADA_TEMPLATE
    _write_json(out / "tokenizer_config.json", tok_cfg)
    # The rest of LLaDA's release file set: special tokens, generation defaults, its own code.
    _write_json(out / "special_tokens_map.json", {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})
    generation = {"bos_token_id": ids["<|startoftext|>"], "eos_token_id": ids["<|eot_id|>" if instruct else "<|endoftext|>"],
                  "pad_token_id": ids["<|endoftext|>"], "transformers_version": "4.38.2"}
    _write_json(out / "generation_config.json", generation)
    for name in ("configuration_llada.py", "modeling_llada.py"):  # present in the release, never run by sharpen
        (out / name).write_text(f"# {name}: stands in for the release's remote code; sharpen loads this family natively\n")
    b = "model.transformer.blocks.{i}."
    shapes = {"model.transformer.wte.weight": (vocab, d)}
    for i in range(layers):
        p = b.format(i=i)
        hd = d // heads
        shapes.update({
            p + "attn_norm.weight": (d,), p + "q_proj.weight": (d, d), p + "k_proj.weight": (kv * hd, d),
            p + "v_proj.weight": (kv * hd, d), p + "attn_out.weight": (d, d), p + "ff_norm.weight": (d,),
            p + "ff_proj.weight": (hidden, d), p + "up_proj.weight": (hidden, d), p + "ff_out.weight": (d, hidden),
        })
        if qkv_bias:
            shapes.update({p + "q_proj.bias": (d,), p + "k_proj.bias": (kv * hd,), p + "v_proj.bias": (kv * hd,)})
    shapes["model.transformer.ln_f.weight"] = (d,)
    if not tie:
        shapes["model.transformer.ff_out.weight"] = (vocab, d)
    write_sharded(out, random_state(shapes, seed), shards, dtype)
    return out


def _qwen2_shapes(vocab: int, d: int, layers: int, heads: int, kv: int, hidden: int, tie: bool) -> dict:
    hd = d // heads
    shapes = {"model.embed_tokens.weight": (vocab, d)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (d, d), p + "self_attn.q_proj.bias": (d,),
            p + "self_attn.k_proj.weight": (kv * hd, d), p + "self_attn.k_proj.bias": (kv * hd,),
            p + "self_attn.v_proj.weight": (kv * hd, d), p + "self_attn.v_proj.bias": (kv * hd,),
            p + "self_attn.o_proj.weight": (d, d), p + "post_attention_layernorm.weight": (d,),
            p + "mlp.gate_proj.weight": (hidden, d), p + "mlp.up_proj.weight": (hidden, d), p + "mlp.down_proj.weight": (d, hidden),
        })
    shapes["model.norm.weight"] = (d,)
    if not tie:
        shapes["lm_head.weight"] = (vocab, d)
    return shapes


def _qwen2_config(vocab: int, tie: bool) -> dict:
    return {
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": vocab, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "hidden_act": "silu", "tie_word_embeddings": tie, "rope_scaling": None,
        "use_sliding_window": False, "sliding_window": None, "attention_dropout": 0.0, "torch_dtype": "bfloat16",
    }


def dream_config(ids: dict[str, int], vocab: int, tie: bool) -> dict:
    """config.json of a Dream-family release (Dream-v0, Dream-Coder-v0, DiffuCoder) at tiny sizes."""
    return {
        "architectures": ["DreamModel"],
        "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
        "model_type": "Dream", **_qwen2_config(vocab, tie),
        "mask_token_id": ids["<|mask|>"], "pad_token_id": ids["<|endoftext|>"],
        "bos_token_id": ids["<|beginoftext|>"], "eos_token_id": ids["<|endoftext|>"],
    }


def write_dream(out: Path, *, instruct: bool = False, tie: bool = False, seed: int = 1, shards: int = 2,
                dtype: torch.dtype = torch.float32) -> Path:
    """Dream-v0 layout (model_type Dream, Qwen2 names); the instruct template in chat_template.jinja."""
    out.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer(out, DREAM_SPECIAL)
    vocab = padded(max(ids.values()) + 1)
    _write_json(out / "config.json", dream_config(ids, vocab, tie))
    _write_json(out / "tokenizer_config.json", {
        "bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": "<|mask|>",
        "tokenizer_class": "Qwen2Tokenizer"})
    if instruct:
        (out / "chat_template.jinja").write_text(CHATML_TEMPLATE, encoding="utf-8")
    write_sharded(out, random_state(_qwen2_shapes(vocab, 64, 2, 4, 2, 96, tie), seed), shards, dtype)
    return out


def write_open_dcoder(out: Path, *, seed: int = 2, with_mask: bool = True) -> Path:
    """Open-dCoder layout: a plain Qwen2 config (tied embeddings, like the 0.5B); the mask token only in the tokenizer."""
    out.mkdir(parents=True, exist_ok=True)
    special = OPEN_DCODER_SPECIAL if with_mask else QWEN_SPECIAL
    ids = write_tokenizer(out, special)
    vocab = padded(max(ids.values()) + 1)
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **_qwen2_config(vocab, True),
              "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|endoftext|>"], "pad_token_id": ids["<|endoftext|>"]}
    _write_json(out / "config.json", config)
    tok_cfg = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "tokenizer_class": "Qwen2Tokenizer",
               "chat_template": CHATML_TEMPLATE}
    if with_mask:
        tok_cfg["mask_token"] = "[MASK]"
    _write_json(out / "tokenizer_config.json", tok_cfg)
    write_sharded(out, random_state(_qwen2_shapes(vocab, 64, 2, 4, 2, 96, True), seed), 1, torch.bfloat16)
    return out


# -- the release file sets -----------------------------------------------------------------------
# What each supported release ships, as the fixtures write it. Source: the project's design notes
# (shared DESIGN.md, "Releases as they are shipped") and the issue that reported the loading
# failures; the hub itself is not reachable from this machine, so the lists are not re-checked here.
RELEASE_FILES = {
    "LLaDA-8B-Base / LLaDA-8B-Instruct / LLaDA-1.5": ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                                     "special_tokens_map.json", "configuration_llada.py", "modeling_llada.py",
                                                     "model.safetensors.index.json", "model-*.safetensors"),
    "Dream-v0 / Dream-Coder-v0 (Base, Instruct) / DiffuCoder (Base, Instruct, cpGRPO)": (
        "config.json", "generation_config.json", "vocab.json", "merges.txt", "added_tokens.json", "special_tokens_map.json",
        "tokenizer_config.json", "configuration_dream.py", "modeling_dream.py", "generation_utils.py", "tokenization_dream.py",
        "model.safetensors.index.json", "model-*.safetensors"),
}

# -- releases that ship the slow tokenizer's files only (no tokenizer.json) -----------------------
# Dream-v0 / Dream-Coder-v0 / DiffuCoder: vocab.json + merges.txt + added_tokens.json +
# special_tokens_map.json + tokenizer_config.json (added_tokens_decoder, tokenizer_class in remote
# code) + the remote modeling/tokenizer/generation code + generation_config.json.
REMOTE_CODE_FILES = ("configuration_dream.py", "modeling_dream.py", "generation_utils.py", "tokenization_dream.py")
QWEN2_ADDED = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|beginoftext|>")


def write_qwen2_slow_tokenizer(out: Path, added: tuple[str, ...], pad: str, tokenizer_class: str, bpe_size: int = 300) -> dict[str, int]:
    """vocab.json + merges.txt of a byte-level BPE with Qwen2's split, the added tokens after it."""
    from tokenizers import Regex

    from sharpen.core.tokenizer import QWEN2_SPLIT

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=bpe_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    hf.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    hf.model.save(str(out))  # vocab.json, merges.txt
    base = hf.get_vocab_size()
    ids = {token: base + i for i, token in enumerate(added)}
    _write_json(out / "added_tokens.json", ids)
    specials = [t for t in added if t.startswith("<|") and t not in ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>")]
    _write_json(out / "special_tokens_map.json", {
        "additional_special_tokens": [t for t in specials if t not in ("<|endoftext|>", pad, "<|mask|>")],
        "eos_token": {"content": "<|endoftext|>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False},
        "pad_token": {"content": pad, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False},
    })
    _write_json(out / "tokenizer_config.json", {
        "add_prefix_space": False,
        "added_tokens_decoder": {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": t in specials} for t, i in ids.items()},
        "additional_special_tokens": [t for t in specials if t not in ("<|endoftext|>", pad, "<|mask|>")],
        "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
        "bos_token": None, "clean_up_tokenization_spaces": False, "eos_token": "<|endoftext|>",
        "errors": "replace", "mask_token": "<|mask|>", "model_max_length": 131072, "pad_token": pad,
        "split_special_tokens": False, "tokenizer_class": tokenizer_class, "unk_token": None,
        "chat_template": CHATML_TEMPLATE,
    })
    return ids


def write_dream_release(out: Path, *, variant: str = "dream", seed: int = 5) -> Path:
    """Dream-v0 / Dream-Coder-v0 / DiffuCoder as released: the file set above, at tiny sizes.

    DiffuCoder pads with <|dlm_pad|> (its tokenizer) while config.json's pad_token_id is
    <|endoftext|>; its generation_config.json lists its own end ids.
    """
    out.mkdir(parents=True, exist_ok=True)
    pad = "<|dlm_pad|>" if variant == "diffucoder" else "<|endoftext|>"
    added = (*QWEN2_ADDED, *(("<|dlm_pad|>",) if variant == "diffucoder" else ()), "<|mask|>")
    ids = write_qwen2_slow_tokenizer(out, added, pad, "DreamTokenizer")
    vocab = padded(max(ids.values()) + 1)
    _write_json(out / "config.json", dream_config(ids, vocab, False))
    generation = {"bos_token_id": ids["<|beginoftext|>"], "eos_token_id": ids["<|endoftext|>"],
                  "pad_token_id": ids["<|endoftext|>"], "mask_token_id": ids["<|mask|>"], "transformers_version": "4.46.2"}
    if variant == "diffucoder":
        generation["pad_token_id"] = ids["<|dlm_pad|>"]
        generation["eos_token_id"] = [ids["<|endoftext|>"], ids["<|im_end|>"]]
    _write_json(out / "generation_config.json", generation)
    for name in REMOTE_CODE_FILES:  # the release's own Python: present, never run by sharpen
        (out / name).write_text(f"# {name}: stands in for the release's remote code; sharpen loads this family natively\n")
    write_sharded(out, random_state(_qwen2_shapes(vocab, 64, 2, 4, 2, 96, False), seed), 2, torch.bfloat16)
    return out
