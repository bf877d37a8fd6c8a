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


def gumbel_noise(shape: torch.Size, generator: torch.Generator, device) -> torch.Tensor:
    """Float64 Gumbel(0, 1) noise: low-precision noise biases low-probability tokens (LLaDA's finding)."""
    u = torch.rand(shape, dtype=torch.float64, generator=generator, device=device)
    return -torch.log(-torch.log(u.clamp_min(1e-300)))


def propose(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None, generator: torch.Generator) -> torch.Tensor:
    """Sample one token per row: argmax at temperature 0, else Gumbel-max over `sampling_logits`
    (a draw from their softmax). logits [N, V] -> ids [N]."""
    scaled = sampling_logits(logits, temperature, top_k, top_p)
    if temperature <= 0.0:
        return scaled.argmax(-1)
    return (scaled + gumbel_noise(logits.shape, generator, logits.device)).argmax(-1)  # [N]


def score(logits: torch.Tensor, tokens: torch.Tensor, policy: str, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
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
