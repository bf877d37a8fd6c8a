"""The one compact transformer behind every native family.

RMSNorm, rotary position embeddings (rotate-half convention, as transformers' Llama and
Qwen2), SwiGLU feed-forward and grouped-query attention through torch's
scaled_dot_product_attention. Who attends to whom is the caller's `Attend` policy: by
default every position sees every other (masked diffusion); a block-causal family passes a
block-causal mask for its prefill and a read-only cache for its open block. Families (our
own, LLaDA, Dream, SDAR, ...) differ only in config names and weight names; see families/.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from .kv_cache import FULL, Attend, KVCache
from .moe import MoEFeedForward, MoESpec
from .rotary import apply_rotary, rotary_table


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
    head_dim: int | None = None  # per-head width; None means dim // n_heads (LLaDA2 and Qwen3 state it in config.json)
    qk_norm: bool = False  # RMSNorm over each head's queries and keys before rotary (Qwen3, LLaDA2's query/key_layernorm)
    rotary_dim: int | None = None  # leading dims of each head that rotate; None: all (LLaDA2 rotates half: partial_rotary_factor 0.5)
    moe: MoESpec | None = None  # mixture-of-experts feed-forward (core/models/moe.py); None: dense in every layer

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r} must be a whole number of at least 1")
        for name, low, high in (("rope_theta", 0.0, 1e12), ("norm_eps", 0.0, 1.0)):
            value = getattr(self, name)  # a null or a string from config.json: refused here, not a TypeError mid-pass
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not low < value < high:
                raise ValueError(f"{name}={value!r} must be a number between {low:g} and {high:g}")
        if not (self.moe is None or isinstance(self.moe, (dict, MoESpec))):
            raise ValueError(f"moe={self.moe!r} must be a table of mixture-of-experts settings")
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.ffn_hidden is None:
            self.ffn_hidden = 64 * ((8 * self.dim // 3 + 63) // 64)
        if self.head_dim is None:
            if self.dim % self.n_heads:
                raise ValueError(f"dim {self.dim} is not divisible by n_heads {self.n_heads}")
            self.head_dim = self.dim // self.n_heads
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.rotary_dim is not None and not (0 < self.rotary_dim <= self.head_dim and self.rotary_dim % 2 == 0):
            raise ValueError(f"rotary_dim {self.rotary_dim} must be even and within head_dim {self.head_dim}")
        if isinstance(self.moe, dict):  # from_dict / a saved config.json
            self.moe = MoESpec(**self.moe)

    def to_dict(self) -> dict:
        out = asdict(self)
        if self.dim % self.n_heads == 0 and self.head_dim == self.dim // self.n_heads:
            del out["head_dim"]  # derived: a preset resized through from_dict derives it again
        return out

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
        # One op in every dtype (one fused kernel on CUDA): torch's rms_norm normalises in
        # float32 inside, as the reference implementations do, and rounds x * rstd * weight to
        # x's dtype once, where Llama's and LLaDA's RMSNorm round the normalised value before
        # scaling it: at most one rounding step apart in bfloat16 (tests/test_step_cost.py).
        # The weight must share x's dtype (torch falls back to its composite otherwise). The
        # eager bfloat16 norm was eight launches (upcast, square, mean, add, rsqrt, multiply,
        # round, scale).
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None  # per head, before rotary
        self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.rotary_dim = cfg.rotary_dim or cfg.head_dim
        self.packed: PackedAttention | None = None  # inference layout, see Transformer.pack

    def _norm_rotate(self, qk: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        """q and k heads together [B, H + Hkv, S, D]: q/k norm (where the family has it), then
        rotary over each head's first rotary_dim dims (the rest pass through, LLaDA2's partial rotary)."""
        if self.q_norm is not None:
            H = self.n_heads
            qk = torch.cat([self.q_norm(qk[:, :H]), self.k_norm(qk[:, H:])], dim=1)
        if self.rotary_dim == self.head_dim:
            return apply_rotary(qk, rope)
        r = self.rotary_dim
        return torch.cat([apply_rotary(qk[..., :r], rope), qk[..., r:]], dim=-1)

    def forward(self, x, rope, positions, layer_cache, attend: Attend = FULL):
        q, k, v = self.project(x, rope)
        return self.output(self.attend(q, k, v, positions, layer_cache, attend))

    def project(self, x: torch.Tensor, rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, S, dim] -> queries [B, H, S, D], keys and values [B, Hkv, S, D], rotated.

        Row by row: core/batch.py runs it once over several runs' rows packed together."""
        B, S, _ = x.shape
        H, Hkv, D = self.n_heads, self.n_kv_heads, self.head_dim
        if self.packed is None:
            q = self.wq(x).view(B, S, H, D).transpose(1, 2)  # [B, H, S, D]
            k = self.wk(x).view(B, S, Hkv, D).transpose(1, 2)  # [B, Hkv, S, D]
            v = self.wv(x).view(B, S, Hkv, D).transpose(1, 2)
            if self.q_norm is None and self.rotary_dim == D:
                q, k = apply_rotary(q, rope), apply_rotary(k, rope)
            else:
                q, k = self._norm_rotate(torch.cat([q, k], dim=1), rope).split([H, Hkv], dim=1)
        else:
            # One matmul for q|k|v and one rotary call for q and k together.
            qkv = x @ self.packed.qkv if self.packed.bias is None else torch.addmm(self.packed.bias, x.flatten(0, 1), self.packed.qkv)
            qkv = qkv.view(B, S, H + 2 * Hkv, D).transpose(1, 2)  # [B, H + 2Hkv, S, D]
            qk = self._norm_rotate(qkv[:, :H + Hkv], rope)
            q, k, v = qk[:, :H], qk[:, H:], qkv[:, H + Hkv:]
        return q, k, v

    def attend(self, q, k, v, positions, layer_cache, attend: Attend = FULL) -> torch.Tensor:
        """One canvas's attention: q [B, H, S, D], k and v [B, Hkv, S, D] -> [B, S, H D]."""
        B, S = q.shape[0], q.shape[2]
        if layer_cache is not None:
            cache_k, cache_v = layer_cache
            keys = cache_k.shape[2] if attend.keys is None else attend.keys
            if attend.write:
                cache_k.index_copy_(2, positions, k)
                cache_v.index_copy_(2, positions, v)
                k, v = cache_k[:, :, :keys], cache_v[:, :, :keys]  # [B, Hkv, K, D]
            else:  # read-only cache: the chunk sees what is cached before it, and itself
                k = torch.cat([cache_k[:, :, :keys], k], dim=2)  # [B, Hkv, keys + S, D]
                v = torch.cat([cache_v[:, :, :keys], v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attend.mask, enable_gqa=self.n_kv_heads != self.n_heads)
        return out.transpose(1, 2).reshape(B, S, -1)

    def output(self, out: torch.Tensor) -> torch.Tensor:
        """Attention's output projection: [B, S, H D] -> [B, S, dim]."""
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


FLOAT16_LIMIT = torch.finfo(torch.float16).max - 1000  # headroom: the next op's rounding stays finite


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        # A mixture-of-experts family keeps a dense MLP in its first layers (first_k_dense_replace).
        moe = cfg.moe is not None and cfg.moe.is_moe_layer(layer)
        self.ffn = MoEFeedForward(cfg.dim, cfg.moe) if moe else FeedForward(cfg)

    def forward(self, x, rope, positions, layer_cache, attend: Attend = FULL):
        return self.feed_forward(x + self.attn(self.attn_norm(x), rope, positions, layer_cache, attend))

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The block's second half, after attention's residual add: row by row (core/batch.py)."""
        x = x + self.ffn(self.ffn_norm(x))
        if x.dtype == torch.float16:
            # float16 tops out at 65504, and big models' residual streams pass it (bfloat16 and
            # float32 do not overflow there): an inf here becomes NaN in the next norm and NaN
            # logits after it. Clamping to the largest finite value is transformers' T5 guard.
            x = x.clamp(-FLOAT16_LIMIT, FLOAT16_LIMIT)
        return x


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.embed.weight
        self._rope: torch.Tensor | None = None  # [L, 2, 2, D/2] in the activations' dtype, see rope
        self.packed_output: torch.Tensor | None = None  # [dim, V] inference layout, see pack
        # Set by core/models/placement.py when the layers are spread over devices (accelerate): where
        # each layer's keys/values live (a hook would otherwise copy the cache to the layer on
        # every call, and a chunked pass's in-place writes would be lost), and where hidden
        # states and logits come back to. None: everything on the embedding's device.
        self.layer_devices: list[torch.device] | None = None
        self.output_device: torch.device | None = None

    def rope(self, device, length: int | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The rotary table (rotary_table) covering at least `length` positions (default: a
        small canvas), in `dtype` (the activations': apply_rotary multiplies in it).

        Built lazily (not a buffer) so meta-device construction and state dicts stay clean, and
        sized to the canvas in use, grown in powers of two, never to the declared maximum: a
        config may declare a million positions, and the table costs positions x head_dim x 2 values.
        """
        need = min(self.cfg.max_seq_len, max(length or 0, 512))
        table = self._rope
        if table is None or table.device != device or table.dtype != dtype or table.shape[0] < need:
            size = min(self.cfg.max_seq_len, 1 << (need - 1).bit_length())
            self._rope = rotary_table(self.cfg.rotary_dim or self.cfg.head_dim, size, self.cfg.rope_theta, device).to(dtype)
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
            if isinstance(ffn, FeedForward):  # a mixture of experts keeps its [E, out, in] experts as loaded
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

    def hidden(self, ids: torch.Tensor, positions: torch.Tensor | None = None, cache: KVCache | None = None,
               attend: Attend = FULL) -> torch.Tensor:
        """ids [B, S] -> final hidden states [B, S, dim], before the last norm.

        `positions` [S] are the absolute canvas positions of `ids` (default 0..S-1); with a
        `cache`, this chunk's keys/values are written at those positions and attention
        runs over the whole cached canvas, unless `attend` (see Attend) says otherwise.
        """
        B, S = ids.shape
        if positions is None:
            positions = torch.arange(S, device=ids.device)
        longest = max(S, cache.length if cache is not None else 0)
        if longest > self.cfg.max_seq_len:
            raise ValueError(f"canvas of {longest} tokens exceeds max_seq_len {self.cfg.max_seq_len}")
        x = self.embed(ids)  # [B, S, dim]
        rope = self.rope(ids.device, longest, x.dtype)[positions]  # [S, 2, 2, D/2]
        for i, layer in enumerate(self.layers):
            layer_cache = None if cache is None else (cache.k[i], cache.v[i])
            x = layer(x, rope, positions, layer_cache, attend)
        return x if self.output_device is None else x.to(self.output_device)

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, S, dim] -> logits [B, S, V] float32."""
        if self.packed_output is not None:
            logits = (self.norm(hidden) @ self.packed_output).float()
        else:
            logits = self.output(self.norm(hidden)).float()
        return logits if self.output_device is None else logits.to(self.output_device)

    def scores(self, ids: torch.Tensor, positions: torch.Tensor | None, cache: KVCache | None, rows: torch.Tensor,
               attend: Attend = FULL) -> torch.Tensor:
        """A pass over `ids` (as `hidden`), projected at `rows` only: [B, len(rows), V] float32.

        A denoising step's whole forward in one call: what `Denoiser.compile` wraps, so that
        a step is one compiled graph (one CUDA graph with "reduce-overhead").
        """
        return self.project(self.hidden(ids, positions, cache, attend)[:, rows])

    def forward(self, ids: torch.Tensor, positions: torch.Tensor | None = None, cache: KVCache | None = None,
                attend: Attend = FULL) -> torch.Tensor:
        """ids [B, S] -> logits [B, S, V] (float32)."""
        return self.project(self.hidden(ids, positions, cache, attend))
