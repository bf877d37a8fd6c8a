"""A tiny random DiffusionGemma in the release's on-disk layout (google/diffusiongemma-26B-A4B-it).

The release ships: config.json (model_type diffusion_gemma, a text_config and a Gemma 4
vision_config, canvas_length), generation_config.json (the diffusion schedule), sharded
safetensors with model.safetensors.index.json, tokenizer.json (SentencePiece-style BPE:
spaces as "▁", byte fallback, <pad>=0 <eos>=1 <bos>=2), tokenizer_config.json,
chat_template.jinja (Gemma 4 turns: <|turn>user ... <turn|>) and processor_config.json. The
weights come from transformers' own classes, so the model is the real architecture (MoE
experts, self-conditioning, a vision tower), only tiny.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, trainers

from checkpoints import TRAINING_TEXT

# Ids 0-2 as in the release; the turn markers and image tokens follow (the release has them at 105/106, 255999...).
SPECIAL = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>", "<|image>", "<image|>", "<|image|>")
BYTES = tuple(f"<0x{b:02X}>" for b in range(256))

# Gemma 4's chat template, shortened to what matters: turns in <|turn>ROLE ... <turn|>, the answer after <|turn>model.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<|turn>' + role + '\n' + message['content'] | trim + '<turn|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|turn>model\n' }}{% endif %}"
)


def write_gemma_tokenizer(out: Path, bpe_size: int = 200) -> dict[str, int]:
    """SentencePiece-style BPE (Gemma's layout): specials first, the 256 byte tokens, merges learned on code."""
    trainer_model = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_model.normalizer = normalizers.Replace(" ", "▁")
    trainer = trainers.BpeTrainer(vocab_size=bpe_size, special_tokens=list(SPECIAL), show_progress=False)
    trainer_model.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    learned = json.loads(trainer_model.to_str())["model"]
    vocab = {name: i for i, name in enumerate(SPECIAL + BYTES)}
    for token in sorted(learned["vocab"], key=learned["vocab"].get):
        if token not in vocab:
            vocab[token] = len(vocab)
    hf = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]],
                              unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    hf.normalizer = normalizers.Replace(" ", "▁")
    hf.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    hf.add_special_tokens(list(SPECIAL))
    hf.save(str(out / "tokenizer.json"))
    return {name: hf.token_to_id(name) for name in SPECIAL} | {"vocab_size": hf.get_vocab_size()}


def write_diffusion_gemma(out: Path, *, seed: int = 0, canvas_length: int = 16, with_tokenizer: bool = True,
                          generation: dict | None = None) -> Path:
    """The release's files, tiny: 2 layers (sliding + full attention), 4 experts, a 1-layer vision tower."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion, DiffusionGemmaTextConfig
    from transformers.models.gemma4 import Gemma4VisionConfig

    out.mkdir(parents=True, exist_ok=True)
    ids = write_gemma_tokenizer(out)
    text = DiffusionGemmaTextConfig(
        vocab_size=ids["vocab_size"], hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, global_head_dim=16, sliding_window=16, num_experts=4, top_k_experts=2,
        moe_intermediate_size=32, layer_types=["sliding_attention", "full_attention"], max_position_embeddings=4096,
        pad_token_id=ids["<pad>"], eos_token_id=ids["<eos>"], bos_token_id=ids["<bos>"])
    vision = Gemma4VisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
    config = DiffusionGemmaConfig(text_config=text, vision_config=vision, canvas_length=canvas_length,
                                  boi_token_id=ids["<|image>"], eoi_token_id=ids["<image|>"], image_token_id=ids["<|image|>"])
    torch.manual_seed(seed)
    model = DiffusionGemmaForBlockDiffusion(config).eval()
    with torch.no_grad():  # random init leaves the norms at 1 and the router flat: give them structure
        for name, p in model.named_parameters():
            if "norm" in name or "scale" in name:
                p.mul_(1 + 0.2 * torch.randn_like(p))
    model.save_pretrained(str(out), max_shard_size="400KB")  # sharded, with model.safetensors.index.json
    release_generation = {  # the release's generation_config.json keys
        "bos_token_id": ids["<bos>"],
        "eos_token_id": [ids["<eos>"], ids["<turn|>"]],
        "pad_token_id": ids["<pad>"],
        "max_new_tokens": 256,
        "max_denoising_steps": 48,
        "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig", "entropy_bound": 0.1},
        "t_min": 0.4,
        "t_max": 0.8,
        "stability_threshold": 1,
        "confidence_threshold": 0.005,
        "transformers_version": "5.23.0",
    }
    (out / "generation_config.json").write_text(json.dumps({**release_generation, **(generation or {})}, indent=2) + "\n")
    (out / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>",
        "tokenizer_class": "GemmaTokenizer", "processor_class": "Gemma4Processor", "padding_side": "left",
        "model_max_length": 1000000000000000019884624838656,
    }, indent=2) + "\n")
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (out / "processor_config.json").write_text(json.dumps({
        "processor_class": "Gemma4Processor", "image_seq_length": 280,
        "image_processor": {"image_processor_type": "Gemma4ImageProcessor", "patch_size": 16, "max_soft_tokens": 280},
    }, indent=2) + "\n")
    if not with_tokenizer:
        (out / "tokenizer.json").unlink()
    return out
