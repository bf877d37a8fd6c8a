"""The one compact bidirectional transformer behind every native family.

RMSNorm, rotary position embeddings (rotate-half convention, as transformers' Llama and
Qwen2), SwiGLU feed-forward and grouped-query attention through torch's
scaled_dot_product_attention with no causal mask: every position sees every other,
which is what a masked-diffusion denoiser needs. Families (our own, LLaDA, Dream, ...)
differ only in config names and weight names; see families.py.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelConfig:
    vocab_size: int = 4096  # tokenizer size, special tokens included
    dim: int = 256  # residual stream width
    n_layers: int = 4  # transformer blocks
    n_heads: int = 4  # query heads
    n_kv_heads: int | None = None  # key/value heads (GQA); None means n_heads
    ffn_hidden: int | None = None  # SwiGLU inner width; None means ~8/3 * dim, rounded to 64
    rope_theta: float = 10000.0  # RoPE base; LLaDA uses 500000, Qwen2.5 1000000
    norm_eps: float = 1e-5  # RMSNorm epsilon
    max_seq_len: int = 2048  # longest canvas the rotary table is built for
    qkv_bias: bool = False  # Qwen2-style biases on q, k, v projections
    tie_embeddings: bool = False  # output head shares the input embedding matrix

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r} must be a whole number of at least 1")
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.ffn_hidden is None:
            self.ffn_hidden = 64 * ((8 * self.dim // 3 + 63) // 64)
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not divisible by n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


# Named sizes for our own family; an unknown name is an error listing these.
PRESETS: dict[str, ModelConfig] = {
    "test": ModelConfig(vocab_size=512, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=512),
    "tiny": ModelConfig(dim=256, n_layers=4, n_heads=4, n_kv_heads=2, max_seq_len=1024),
    "small": ModelConfig(dim=384, n_layers=6, n_heads=6, n_kv_heads=2, max_seq_len=1024),
    "base": ModelConfig(dim=512, n_layers=8, n_heads=8, n_kv_heads=4, max_seq_len=2048),
}


def preset(name: str, **overrides) -> ModelConfig:
    if name not in PRESETS:
        raise KeyError(f"unknown model preset {name!r}; known: {', '.join(PRESETS)}")
    return ModelConfig.from_dict({**PRESETS[name].to_dict(), **overrides})


@contextmanager
def on_meta_device():
    """Build modules on the meta device without their weight init: a loader assigns the tensors next.

    nn.Linear's and nn.Embedding's init on the meta device runs torch's Python reference ops,
    whose first use imports torch._dynamo: 2.5 s of a 5-second headless edit on a CPU, for
    weights that are thrown away. Process-wide while it lasts: only a model loader uses it.
    """
    saved = {cls: cls.reset_parameters for cls in (nn.Linear, nn.Embedding)}
    try:
        for cls in saved:
            cls.reset_parameters = _skip_init
        with torch.device("meta"):
            yield
    finally:
        for cls, reset in saved.items():
            cls.reset_parameters = reset


def _skip_init(module: nn.Module) -> None:
    pass


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # no upcast needed: torch's own rms_norm (one kernel on CUDA)
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        # Normalise in float32 for bf16 stability, as the reference implementations do.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rotary_table(head_dim: int, max_len: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and *signed* sin tables [L, D]: the sin of the first half is negated, so that the
    rotate-half convention's cat(-x2, x1) * sin becomes roll(x) * signed_sin (see apply_rotary)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    angles = torch.outer(torch.arange(max_len, dtype=torch.float32, device=device), inv_freq)  # [L, D/2]
    return torch.cat([angles, angles], dim=-1).cos(), torch.cat([-angles.sin(), angles.sin()], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE: x * cos + cat(-x2, x1) * sin, computed as x * cos + roll(x) * signed_sin
    (the same products, in three ops instead of ten). x [B, H, S, D]; tables [S, D]."""
    rolled = x.roll(x.shape[-1] // 2, dims=-1)
    if x.dtype == torch.float32:
        return torch.addcmul(x * cos, rolled, signed_sin)
    return torch.addcmul(x.float() * cos, rolled.float(), signed_sin).to(x.dtype)


class KVCache:
    """Keys and values of a whole canvas, per layer: [B, Hkv, T, D].

    A forward pass over a chunk of positions writes that chunk's keys/values in and
    attends over the full cache, so the fixed context is computed once and reused.
    """

    def __init__(self, n_layers: int, batch: int, n_kv_heads: int, length: int, head_dim: int, dtype, device) -> None:
        shape = (batch, n_kv_heads, length, head_dim)
        # One device for all layers, or (a model spread over devices) each layer's own.
        devices = list(device) if isinstance(device, (list, tuple)) else [device] * n_layers
        self.k = [torch.zeros(shape, dtype=dtype, device=d) for d in devices]
        self.v = [torch.zeros(shape, dtype=dtype, device=d) for d in devices]
        self.length = length


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)
        self.packed: PackedAttention | None = None  # inference layout, see Transformer.pack

    def forward(self, x, cos, sin, positions, layer_cache):
        B, S, _ = x.shape
        H, Hkv, D = self.n_heads, self.n_kv_heads, self.head_dim
        if self.packed is None:
            q = self.wq(x).view(B, S, H, D).transpose(1, 2)  # [B, H, S, D]
            k = self.wk(x).view(B, S, Hkv, D).transpose(1, 2)  # [B, Hkv, S, D]
            v = self.wv(x).view(B, S, Hkv, D).transpose(1, 2)
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        else:
            # One matmul for q|k|v and one rotary call for q and k together.
            qkv = x @ self.packed.qkv if self.packed.bias is None else torch.addmm(self.packed.bias, x.flatten(0, 1), self.packed.qkv)
            qkv = qkv.view(B, S, H + 2 * Hkv, D).transpose(1, 2)  # [B, H + 2Hkv, S, D]
            qk = apply_rotary(qkv[:, :H + Hkv], cos, sin)
            q, k, v = qk[:, :H], qk[:, H:], qkv[:, H + Hkv:]
        if layer_cache is not None:
            cache_k, cache_v = layer_cache
            cache_k.index_copy_(2, positions, k)
            cache_v.index_copy_(2, positions, v)
            k, v = cache_k, cache_v  # [B, Hkv, T, D]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=Hkv != H)
        out = out.transpose(1, 2).reshape(B, S, -1)
        return self.wo(out) if self.packed is None else out @ self.packed.wo


@dataclass
class PackedAttention:
    qkv: torch.Tensor  # [dim, (H + 2Hkv) D]: wq | wk | wv, transposed, contiguous
    bias: torch.Tensor | None  # [(H + 2Hkv) D]
    wo: torch.Tensor  # [H D, dim]


@dataclass
class PackedFeedForward:
    gate_up: torch.Tensor  # [dim, 2 F]: w1 | w3, transposed, contiguous
    down: torch.Tensor  # [F, dim]


def _pack(linears: list[nn.Linear]) -> torch.Tensor:
    """Concatenate the weights of `linears` as one [in, sum(out)] matrix; each Linear's weight
    becomes a (transposed) view into it, so packing costs no memory."""
    packed = torch.cat([lin.weight.detach() for lin in linears], dim=0).t().contiguous()  # [in, sum(out)]
    start = 0
    for lin in linears:
        out = lin.weight.shape[0]
        lin.weight = nn.Parameter(packed[:, start:start + out].t(), requires_grad=False)
        start += out
    return packed


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)  # gate
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)  # up
        self.w2 = nn.Linear(cfg.ffn_hidden, cfg.dim, bias=False)  # down

        self.packed: PackedFeedForward | None = None  # inference layout, see Transformer.pack

    def forward(self, x):
        if self.packed is None:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        gate, up = (x @ self.packed.gate_up).chunk(2, dim=-1)
        return (F.silu(gate) * up) @ self.packed.down


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn = FeedForward(cfg)

    def forward(self, x, cos, sin, positions, layer_cache):
        x = x + self.attn(self.attn_norm(x), cos, sin, positions, layer_cache)
        return x + self.ffn(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.embed.weight
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None
        self.packed_output: torch.Tensor | None = None  # [dim, V] inference layout, see pack
        # Set by core/placement.py when the layers are spread over devices (accelerate): where
        # each layer's keys/values live (a hook would otherwise copy the cache to the layer on
        # every call, and a chunked pass's in-place writes would be lost), and where hidden
        # states and logits come back to. None: everything on the embedding's device.
        self.layer_devices: list[torch.device] | None = None
        self.output_device: torch.device | None = None

    def rope(self, device, length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary tables covering at least `length` positions (default: a small canvas).

        Built lazily (not a buffer) so meta-device construction and state dicts stay clean, and
        sized to the canvas in use, grown in powers of two, never to the declared maximum: a
        config may declare a million positions, and the table costs positions x head_dim floats.
        """
        need = min(self.cfg.max_seq_len, max(length or 0, 512))
        if self._rope is None or self._rope[0].device != device or self._rope[0].shape[0] < need:
            size = min(self.cfg.max_seq_len, 1 << (need - 1).bit_length())
            self._rope = rotary_table(self.cfg.head_dim, size, self.cfg.rope_theta, device)
        return self._rope

    @torch.no_grad()
    def pack(self) -> "Transformer":
        """Switch to the inference layout (in place; for a loaded model on one device, not for training).

        Each block's q/k/v weights become one [dim, (H + 2Hkv) D] matrix and gate/up one
        [dim, 2F] matrix, both stored input-major (so is the output head, unless it is tied and
        on a GPU): a block runs 4 matmuls instead of 7, and `x @ W` with W [in, out] contiguous
        takes MKL's fast path for the few rows a cached step computes (F.linear on 8 rows was
        3-5x slower on our 2-core CPU; see bench/speed.py).
        The original parameters stay as views into the packed tensors: no extra memory, and
        state_dict names are unchanged.
        """
        for block in self.layers:
            attn, ffn = block.attn, block.ffn
            bias = None
            if attn.wq.bias is not None:
                bias = torch.cat([attn.wq.bias, attn.wk.bias, attn.wv.bias])
                sizes = [attn.wq.bias.numel(), attn.wk.bias.numel(), attn.wv.bias.numel()]
                for lin, part in zip((attn.wq, attn.wk, attn.wv), bias.split(sizes)):
                    lin.bias = nn.Parameter(part, requires_grad=False)
            qkv = _pack([attn.wq, attn.wk, attn.wv])
            attn.packed = PackedAttention(qkv, bias, _pack([attn.wo]))
            ffn.packed = PackedFeedForward(_pack([ffn.w1, ffn.w3]), _pack([ffn.w2]))
        if not self.cfg.tie_embeddings:
            self.packed_output = _pack([self.output])
        elif self.embed.weight.device.type == "cpu":
            # Tied, on a CPU: one input-major matrix serves both. The head's few rows per step
            # run about twice as fast from it (measured: 4% of the embedded model's step), and
            # the embedding looks up a handful of strided rows, which costs next to nothing.
            # On a GPU the row-major head is as fast, so the matrix stays as it is there.
            self.packed_output = _pack([self.output])
            self.embed.weight = self.output.weight
        return self

    def new_cache(self, batch: int, length: int) -> KVCache:
        cfg, w = self.cfg, self.embed.weight
        return KVCache(cfg.n_layers, batch, cfg.n_kv_heads, length, cfg.head_dim, w.dtype, self.layer_devices or w.device)

    def hidden(self, ids: torch.Tensor, positions: torch.Tensor | None = None, cache: KVCache | None = None) -> torch.Tensor:
        """ids [B, S] -> final hidden states [B, S, dim], before the last norm.

        `positions` [S] are the absolute canvas positions of `ids` (default 0..S-1); with a
        `cache`, this chunk's keys/values are written at those positions and attention
        runs over the whole cached canvas.
        """
        B, S = ids.shape
        if positions is None:
            positions = torch.arange(S, device=ids.device)
        longest = max(S, cache.length if cache is not None else 0)
        if longest > self.cfg.max_seq_len:
            raise ValueError(f"canvas of {longest} tokens exceeds max_seq_len {self.cfg.max_seq_len}")
        cos, sin = self.rope(ids.device, longest)
        cos, sin = cos[positions], sin[positions]  # [S, D]
        x = self.embed(ids)  # [B, S, dim]
        for i, layer in enumerate(self.layers):
            layer_cache = None if cache is None else (cache.k[i], cache.v[i])
            x = layer(x, cos, sin, positions, layer_cache)
        return x if self.output_device is None else x.to(self.output_device)

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, S, dim] -> logits [B, S, V] float32."""
        if self.packed_output is not None:
            logits = (self.norm(hidden) @ self.packed_output).float()
        else:
            logits = self.output(self.norm(hidden)).float()
        return logits if self.output_device is None else logits.to(self.output_device)

    def scores(self, ids: torch.Tensor, positions: torch.Tensor | None, cache: KVCache | None, rows: torch.Tensor) -> torch.Tensor:
        """A pass over `ids` (as `hidden`), projected at `rows` only: [B, len(rows), V] float32.

        A denoising step's whole forward in one call: what `Denoiser.compile` wraps, so that
        a step is one compiled graph (one CUDA graph with "reduce-overhead").
        """
        return self.project(self.hidden(ids, positions, cache)[:, rows])

    def forward(self, ids: torch.Tensor, positions: torch.Tensor | None = None, cache: KVCache | None = None) -> torch.Tensor:
        """ids [B, S] -> logits [B, S, V] (float32)."""
        return self.project(self.hidden(ids, positions, cache))
