"""Plain-torch reference for the denoising step's sampling math.

Small, batch-vectorised functions with no host syncs: each takes tensors and returns
tensors, so the loop can run them on any device and a fused kernel can replace them.
"""
from __future__ import annotations

import torch

POLICIES = ("confidence", "margin", "entropy", "random")


def filter_logits(logits: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """Keep the smallest nucleus with mass >= top_p, then the top-k of it; the rest -> -inf.

    The order is Dream's and Open-dLLM's (nucleus, then top-k); both see the logits after
    temperature (`sampling_logits`). logits [N, V] float -> [N, V].
    """
    if top_p is not None and 0.0 < top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # [N, V]
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token when the mass before it already reaches top_p (the first always stays).
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    if top_k is not None and 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # [N, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits


def sampling_logits(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """The logits sampling draws from: divided by the temperature first (in float64, so the
    Gumbel-max draw keeps its precision), then the nucleus and top-k filters, as Dream's and
    Open-dLLM's sample_tokens do. At temperature 0 the logits are only filtered (argmax)."""
    if temperature > 0.0:
        logits = logits.double() / temperature
    return filter_logits(logits, top_k, top_p)


# Counter-based noise: every random number of a run is a hash of (seed, step, row, column), in
# plain integer tensor ops. No generator state moves between draws, so the draw can sit inside
# a compiled graph (a torch.Generator breaks it), eager, compiled and fused paths draw the same
# numbers, and "same seed, same result" holds whatever runs the step. Values are 32-bit
# integers carried in int64, so no product overflows (see _mul32).
_MASK32 = 0xFFFFFFFF
_SECOND_DRAW = 0x5BD1E995  # keys for the low bits of a float64 uniform: an independent second hash
_RANK_DRAW = 0x27D4EB2F  # keys for the random policy's ranking noise


def _mul32(x: torch.Tensor | int, c: int):
    """(x * c) mod 2**32 for x in [0, 2**32): the constant split in 16-bit halves keeps every
    intermediate below 2**49."""
    low, high = c & 0xFFFF, c >> 16
    return (x * low + (((x * high) & 0xFFFF) << 16)) & _MASK32


def mix32(x: torch.Tensor | int):
    """A bijective 32-bit integer hash (xorshift-multiply rounds with lowbias32's constants,
    after C. Wellons): nearby inputs give unrelated outputs. Tensors (int64) or Python ints."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def seed_key(seed: int) -> int:
    """A run's 32-bit key from a seed of up to 64 bits (on the host, once per run)."""
    return mix32(mix32(seed & _MASK32) ^ (seed >> 32) & _MASK32)


def row_keys(run_key: torch.Tensor, step: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """One key per row of a step: run_key and step 0-dim int64 tensors (device values, so a
    compiled step is not specialised on them), rows [M] int64 (each row's place in the batch,
    e.g. sample * canvas length + position) -> [M] int64 keys in [0, 2**32)."""
    return mix32(mix32(run_key ^ (step & _MASK32)) ^ (rows & _MASK32))


def counter_uniform(keys: torch.Tensor, width: int) -> torch.Tensor:
    """[M] keys -> [M, width] float64 uniforms in (0, 1), 53 random bits each: the high 32 from
    hash(key, column), the low 21 from a second, independent hash."""
    columns = mix32(torch.arange(width, dtype=torch.long, device=keys.device))  # [W]
    high = mix32(keys[:, None] ^ columns)  # [M, W]
    low = mix32(mix32(keys ^ _SECOND_DRAW)[:, None] ^ columns) >> 11  # [M, W], 21 bits
    return ((high << 21) | low).double().add_(0.5).mul_(2.0 ** -53)


def counter_gumbel(keys: torch.Tensor, width: int) -> torch.Tensor:
    """Float64 Gumbel(0, 1) noise [M, width] from counter_uniform (see gumbel_noise)."""
    return -torch.log(-torch.log(counter_uniform(keys, width)))


def gumbel_noise(shape: torch.Size, generator: torch.Generator, device) -> torch.Tensor:
    """Float64 Gumbel(0, 1) noise: low-precision noise biases low-probability tokens (LLaDA's finding)."""
    u = torch.rand(shape, dtype=torch.float64, generator=generator, device=device)
    return -torch.log(-torch.log(u.clamp_min(1e-300)))


def propose(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None, generator: torch.Generator | None,
            noise_keys: torch.Tensor | None = None) -> torch.Tensor:
    """Sample one token per row: argmax at temperature 0, else Gumbel-max over `sampling_logits`
    (a draw from their softmax), the noise from `noise_keys` [N] (counter_gumbel) when given,
    else from `generator`. logits [N, V] -> ids [N]."""
    scaled = sampling_logits(logits, temperature, top_k, top_p)
    if temperature <= 0.0:
        return scaled.argmax(-1)
    return (scaled + noise(logits, generator, noise_keys)).argmax(-1)  # [N]


def noise(logits: torch.Tensor, generator: torch.Generator | None, noise_keys: torch.Tensor | None) -> torch.Tensor:
    """Gumbel noise shaped as logits [N, V]: counter-based from noise_keys [N], else from generator."""
    if noise_keys is not None:
        return counter_gumbel(noise_keys, logits.shape[-1])
    return gumbel_noise(logits.shape, generator, logits.device)


def score(logits: torch.Tensor, tokens: torch.Tensor, policy: str, generator: torch.Generator | None,
          noise_keys: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """How sure the model is of each proposal: (ranking score [N], probability of the token [N]).

    confidence: p(token); margin: p(top1) - p(top2); entropy: minus the entropy; random:
    uniform noise (the original MDLM order). Higher score commits first.
    """
    probs = logits.softmax(-1)  # [N, V]
    p_token = probs.gather(-1, tokens[:, None]).squeeze(-1)  # [N]
    if policy == "confidence":
        ranking = p_token
    elif policy == "margin":
        top2 = probs.topk(2, dim=-1).values  # [N, 2]
        ranking = top2[:, 0] - top2[:, 1]
    elif policy == "entropy":
        ranking = (probs * probs.clamp_min(1e-12).log()).sum(-1)
    elif policy == "random":
        if noise_keys is not None:  # its own draw: the rank noise must not repeat the token's
            ranking = counter_uniform(mix32(noise_keys ^ _RANK_DRAW), 1)[:, 0].float()
        else:
            ranking = torch.rand(p_token.shape, generator=generator, device=p_token.device, dtype=torch.float64).float()
    else:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    return ranking, p_token


def select_commits(ranking: torch.Tensor, active: torch.Tensor, quota: torch.Tensor) -> torch.Tensor:
    """Per row, the `quota[b]` active positions with the highest ranking. All [B, T] except quota [B]."""
    ranking = ranking.masked_fill(~active, float("-inf"))
    order = ranking.argsort(dim=1, descending=True, stable=True)  # [B, T]
    ranks = torch.empty_like(order).scatter_(1, order, torch.arange(order.shape[1], device=order.device).expand_as(order))
    return active & (ranks < quota[:, None])
