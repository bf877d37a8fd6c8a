"""Will a model fit this machine? Its weights and KV cache at each precision, against GPUs and RAM.

    need = footprint(cfg, "int8", context_tokens=1024)     # weights + cache, in bytes
    verdict(need.total, room)                             # "fits" | "tight" | "does not fit"

Sizes are computed from the backbone's ModelConfig (the same numbers the loader builds), so a
local checkpoint and a known release are judged alike. Quantized sizes follow the weight-only
layouts of core/models/quantize.py: int8 keeps one scale per output row, int4 one scale and zero
point per group of 128 weights; the embedding stays in the load dtype (bfloat16 on a GPU).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .model import ModelConfig
from .moe import MoESpec

PRECISIONS = ("float32", "bfloat16", "int8", "int4")
BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "int8": 1.0, "int4": 0.5}
INT4_GROUP = 128  # core/models/quantize.py's int4 group size
SLOT_ALLOWANCE = 256  # canvas slots on top of the context: a long infill's worth
TIGHT = 0.85  # above this share of free memory a load is "tight": activations and the allocator need the rest


@dataclass(frozen=True)
class Footprint:
    precision: str
    weights: int  # bytes
    kv_cache: int  # bytes, batch 1, at the context given

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache


def _layer_parts(cfg: ModelConfig, layer: int) -> tuple[int, int, int]:
    """(attention + norms, feed-forward, router) parameters of one layer. A mixture-of-experts
    layer's feed-forward is every expert plus the shared ones; its router stays in the load dtype."""
    d, hd = cfg.dim, cfg.head_dim
    attn = d * cfg.n_heads * hd + 2 * d * cfg.n_kv_heads * hd + cfg.n_heads * hd * d
    attn += (cfg.n_heads + 2 * cfg.n_kv_heads) * hd if cfg.qkv_bias else 0
    attn += 2 * d + (2 * hd if cfg.qk_norm else 0)
    moe = cfg.moe
    if moe is None or not moe.is_moe_layer(layer):
        return attn, 3 * d * cfg.ffn_hidden, 0
    return attn, 3 * d * moe.expert_hidden * (moe.n_experts + moe.n_shared), moe.n_experts * (d + (1 if moe.selection_bias else 0))


def parameter_split(cfg: ModelConfig) -> tuple[int, int]:
    """(parameters that stay in the load dtype: the embedding and MoE routers; linear parameters
    incl. the output head and the experts): only the second kind quantizes."""
    d = cfg.dim
    parts = [_layer_parts(cfg, i) for i in range(cfg.n_layers)]
    linear = sum(a + f for a, f, _ in parts) + d + (0 if cfg.tie_embeddings else cfg.vocab_size * d)
    return cfg.vocab_size * d + sum(r for _, _, r in parts), linear


def active_parameters(cfg: ModelConfig) -> int:
    """Parameters one token uses: everything but the experts a mixture-of-experts router did not
    pick (top_k of n_experts, plus the shared ones), embedding included as the releases count it
    (LLaDA2.0-mini: 1.4B of 16B). A dense model's is its total."""
    embed, linear = parameter_split(cfg)
    moe = cfg.moe
    if moe is None:
        return embed + linear
    idle = sum(1 for i in range(cfg.n_layers) if moe.is_moe_layer(i)) * (moe.n_experts - moe.top_k) * 3 * cfg.dim * moe.expert_hidden
    return embed + linear - idle


@dataclass(frozen=True)
class WeightsOnly:
    """A model sharpen does not build in its own backbone (DiffusionGemma runs through transformers'
    class), sized by its parameter count alone: every parameter quantizes and the cache is not
    counted, so its cells are a floor, not a budget."""

    params: int
    active: int | None = None  # a mixture of experts' parameters per token


def footprint(cfg: ModelConfig | WeightsOnly, precision: str, context_tokens: int = 1024) -> Footprint:
    if isinstance(cfg, WeightsOnly):
        scales = {"int8": cfg.params / 4096 * 2, "int4": cfg.params / INT4_GROUP * 4}.get(precision, 0)
        return Footprint(precision, int(cfg.params * BYTES[precision] + scales), 0)
    embed, linear = parameter_split(cfg)
    if precision in ("int8", "int4"):
        scales = linear / (cfg.dim if precision == "int8" else INT4_GROUP) * (2 if precision == "int8" else 4)
        weights = embed * 2 + linear * BYTES[precision] + scales
        if cfg.tie_embeddings:  # the tied head is quantized apart from the embedding it was tied to
            weights += cfg.vocab_size * cfg.dim * BYTES[precision]
        cache_bytes = 2  # the cache stays in bfloat16
    else:
        weights = (embed + linear) * BYTES[precision]
        cache_bytes = BYTES[precision]
    tokens = context_tokens + SLOT_ALLOWANCE
    cache = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * tokens * cache_bytes
    return Footprint(precision, int(weights), int(cache))


def verdict(need: int, room: int) -> str:
    if room <= 0 or need > room:
        return "does not fit"
    return "fits" if need <= TIGHT * room else "tight"


@dataclass(frozen=True)
class Machine:
    gpus: tuple[tuple[str, int, int], ...]  # (name, free bytes, total bytes) per CUDA device
    ram_available: int  # bytes

    @property
    def best_gpu_free(self) -> int:
        return max((free for _, free, _ in self.gpus), default=0)


def this_machine() -> Machine:
    """The GPUs torch sees (free memory now) and the host memory available."""
    gpus = ()
    try:
        import torch

        if torch.cuda.is_available():
            gpus = tuple((torch.cuda.get_device_name(i), *torch.cuda.mem_get_info(i)) for i in range(torch.cuda.device_count()))
    except ImportError:
        pass
    return Machine(gpus, host_available())


def host_available() -> int:
    """MemAvailable from /proc/meminfo (Linux), else physical pages * page size."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def fit_table(cfg: ModelConfig, machine: Machine, context_tokens: int = 1024) -> list[tuple[str, Footprint, str, str]]:
    """Per precision: (precision, footprint, on the best GPU, on the CPU). Every precision runs
    on both (int4 through torch's CPU kernel, core/models/quantize.py)."""
    rows = []
    for precision in PRECISIONS:
        need = footprint(cfg, precision, context_tokens)
        gpu = verdict(need.total, machine.best_gpu_free) if machine.gpus else "no GPU"
        cpu = verdict(need.total, machine.ram_available)
        if precision == "int4" and isinstance(cfg, WeightsOnly):
            cpu = "GPU only"  # DiffusionGemma's int4 experts are torchao's tile-packed CUDA layout
        rows.append((precision, need, gpu, cpu))
    return rows


def advice(cfg: ModelConfig, machine: Machine, context_tokens: int = 1024) -> str:
    """The setting that makes the model fit here, in words, or that nothing does."""
    for precision in PRECISIONS[1:] if machine.gpus else ():
        if verdict(footprint(cfg, precision, context_tokens).total, machine.best_gpu_free) != "does not fit":
            flag = "--dtype bfloat16" if precision == "bfloat16" else f"--quantize {precision}"
            return f"on the GPU with {flag}"
    # bfloat16 is slow on CPUs; int4 runs there too (core/models/quantize.py), but not DiffusionGemma's
    # (torchao's tile-packed layout is a CUDA kernel).
    on_cpu = ("float32", "int8") if isinstance(cfg, WeightsOnly) else ("float32", "int8", "int4")
    for precision in on_cpu:
        need = footprint(cfg, precision, context_tokens).total
        if verdict(need, machine.ram_available) != "does not fit":
            flag = "" if precision == "float32" else f" --quantize {precision}"
            slowly = ", slowly" if need > 2**31 else ""  # a step reads every weight: GiBs on a CPU take seconds
            return f"on the CPU (--device cpu{flag}){slowly}"
    if machine.gpus:
        return "only spread over the GPUs and CPU memory (--device-map auto, with --quantize int8 to shrink it)"
    return "nowhere on this machine; use a smaller model (docs/models.md: which model for which machine)"


def _llada2(dim: int, n_layers: int, n_heads: int, ffn_hidden: int, expert_hidden: int) -> ModelConfig:
    """LLaDA2.x (Ling 2.0) from its config.json: 4 kv heads of 128, half rotary, one dense layer,
    256 experts (top 8 in 4 of 8 groups) and one shared expert, vocabulary 157,184."""
    moe = MoESpec(n_experts=256, top_k=8, expert_hidden=expert_hidden, scoring="sigmoid", selection_bias=True, n_group=8, topk_group=4,
                  scaling=2.5, n_shared=1, first_dense=1, router_float32=True)
    return ModelConfig(vocab_size=157184, dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=4, head_dim=128, ffn_hidden=ffn_hidden,
                       rope_theta=600000.0, max_seq_len=32768, qk_norm=True, rotary_dim=64, moe=moe)


def _qwen3(dim: int, n_layers: int, n_heads: int, ffn_hidden: int, tie_embeddings: bool) -> ModelConfig:
    """SDAR's Qwen3 backbone: 8 kv heads of 128 with q/k norms, vocabulary 151,936."""
    return ModelConfig(vocab_size=151936, dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=8, head_dim=128, ffn_hidden=ffn_hidden,
                       qk_norm=True, rope_theta=1000000.0, tie_embeddings=tie_embeddings, max_seq_len=32768)


# The releases sharpen knows, with their backbone dimensions from their config.json files.
KNOWN_RELEASES: dict[str, tuple[str, ModelConfig | WeightsOnly]] = {
    # name: (hub repo id, backbone dimensions)
    "LLaDA-8B-Instruct": ("GSAI-ML/LLaDA-8B-Instruct", ModelConfig(vocab_size=126464, dim=4096, n_layers=32, n_heads=32, n_kv_heads=32, ffn_hidden=12288, max_seq_len=4096)),
    "LLaDA-1.5": ("GSAI-ML/LLaDA-1.5", ModelConfig(vocab_size=126464, dim=4096, n_layers=32, n_heads=32, n_kv_heads=32, ffn_hidden=12288, max_seq_len=4096)),
    "Dream-v0-Instruct-7B": ("Dream-org/Dream-v0-Instruct-7B", ModelConfig(vocab_size=152064, dim=3584, n_layers=28, n_heads=28, n_kv_heads=4, ffn_hidden=18944, qkv_bias=True, max_seq_len=32768)),
    "Dream-Coder-v0-Instruct-7B": ("Dream-org/Dream-Coder-v0-Instruct-7B", ModelConfig(vocab_size=152064, dim=3584, n_layers=28, n_heads=28, n_kv_heads=4, ffn_hidden=18944, qkv_bias=True, max_seq_len=32768)),
    "DiffuCoder-7B-Instruct": ("apple/DiffuCoder-7B-Instruct", ModelConfig(vocab_size=152064, dim=3584, n_layers=28, n_heads=28, n_kv_heads=4, ffn_hidden=18944, qkv_bias=True, max_seq_len=32768)),
    "Open-dCoder-0.5B": ("fredzzp/open-dcoder-0.5B", ModelConfig(vocab_size=151936, dim=896, n_layers=24, n_heads=14, n_kv_heads=2, ffn_hidden=4864, qkv_bias=True, tie_embeddings=True, max_seq_len=32768)),
    # Block diffusion, dense (Qwen3 / Llama / Qwen2.5 backbones; their config.json files).
    "SDAR-1.7B-Chat": ("JetLM/SDAR-1.7B-Chat", _qwen3(dim=2048, n_layers=28, n_heads=16, ffn_hidden=6144, tie_embeddings=True)),
    "SDAR-4B-Chat": ("JetLM/SDAR-4B-Chat", _qwen3(dim=2560, n_layers=36, n_heads=32, ffn_hidden=9728, tie_embeddings=True)),
    "SDAR-8B-Chat": ("JetLM/SDAR-8B-Chat", _qwen3(dim=4096, n_layers=36, n_heads=32, ffn_hidden=12288, tie_embeddings=False)),
    "Stable-DiffCoder-8B-Instruct": ("ByteDance-Seed/Stable-DiffCoder-8B-Instruct", ModelConfig(
        vocab_size=155136, dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_hidden=14336, rope_theta=500000.0, max_seq_len=32768)),
    "Fast_dLLM_v2_1.5B": ("Efficient-Large-Model/Fast_dLLM_v2_1.5B", ModelConfig(
        vocab_size=151936, dim=1536, n_layers=28, n_heads=12, n_kv_heads=2, ffn_hidden=8960, qkv_bias=True, tie_embeddings=True, max_seq_len=32768)),
    "Fast_dLLM_v2_7B": ("Efficient-Large-Model/Fast_dLLM_v2_7B", ModelConfig(
        vocab_size=152064, dim=3584, n_layers=28, n_heads=28, n_kv_heads=4, ffn_hidden=18944, qkv_bias=True, max_seq_len=32768)),
    # Random-token diffusion through transformers' class: its published size only (26B total, about 4B active).
    "DiffusionGemma-26B-A4B-it": ("google/diffusiongemma-26B-A4B-it", WeightsOnly(params=26_000_000_000, active=4_000_000_000)),
    # Mixtures of experts: memory is their total size, a step's reads nearer their active one (active_parameters).
    "LLaDA2.0-mini": ("inclusionAI/LLaDA2.0-mini", _llada2(dim=2048, n_layers=20, n_heads=16, ffn_hidden=5120, expert_hidden=512)),
    "LLaDA2.1-mini": ("inclusionAI/LLaDA2.1-mini", _llada2(dim=2048, n_layers=20, n_heads=16, ffn_hidden=5120, expert_hidden=512)),
    "LLaDA2.0-flash": ("inclusionAI/LLaDA2.0-flash", _llada2(dim=4096, n_layers=32, n_heads=32, ffn_hidden=9216, expert_hidden=1024)),
    "LLaDA2.1-flash": ("inclusionAI/LLaDA2.1-flash", _llada2(dim=4096, n_layers=32, n_heads=32, ffn_hidden=9216, expert_hidden=1024)),
    "SDAR-30B-A3B-Chat": ("JetLM/SDAR-30B-A3B-Chat", ModelConfig(
        vocab_size=151936, dim=2048, n_layers=48, n_heads=32, n_kv_heads=4, head_dim=128, ffn_hidden=6144, qk_norm=True,
        rope_theta=1000000.0, max_seq_len=32768,
        moe=MoESpec(n_experts=128, top_k=8, expert_hidden=768, scoring="softmax", norm_topk_prob=True))),
}
