"""The per-step sampling math behind one interface, with the implementation chosen explicitly.

`propose_and_score` turns the logits of the masked positions of a block into proposals,
their probabilities and the policy's ranking. "reference" is plain torch (any device);
"triton" fuses softmax statistics, argmax / Gumbel-max, margin and entropy into one pass
over the vocabulary (CUDA, or the CPU under TRITON_INTERPRET=1 for tests).
"""
from __future__ import annotations

import functools
import importlib.util
import logging
import os

import torch

from . import reference

IMPLEMENTATIONS = ("reference", "triton")

log = logging.getLogger(__name__)


@functools.cache
def triton_problem() -> str | None:
    """Why triton cannot be used here, or None. Finding the package is not enough: a wheel
    built for another CUDA, or a driver it does not know, fails at import, and the step must
    not be the place that finds out."""
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed"
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception as exc:  # any failure at import means the same: no fused kernels
        return f"triton does not import ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no message'})"
    return None


def choose(implementation: str, device: torch.device) -> str:
    """'auto' means triton on CUDA when triton imports, and the reference elsewhere; anything
    else is taken as asked, if it can run here (ValueError otherwise: triton needs CUDA, or its
    CPU interpreter, and a triton that imports)."""
    if implementation == "auto":
        if device.type != "cuda":
            return "reference"
        problem = triton_problem()
        if problem is not None:
            log.info("per-step kernels: the torch reference (%s)", problem)
            return "reference"
        return "triton"
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"unknown kernel implementation {implementation!r}; known: auto, {', '.join(IMPLEMENTATIONS)}")
    if implementation == "triton":
        problem = triton_problem()
        if problem is not None:
            raise ValueError(f"the triton kernels cannot run: {problem}; use --kernels auto or reference")
        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError(f"the triton kernels run on CUDA, not {device.type} (TRITON_INTERPRET=1 interprets them, slowly); use --kernels auto or reference")
    return implementation


def propose_and_score(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    policy: str,
    generator: torch.Generator,
    implementation: str = "reference",
    active: torch.Tensor | None = None,
    tempered_scores: bool = False,
    noise_keys: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits [M, V] -> (tokens [M] long, p_token [M] float32, ranking [M] float32).

    `tempered_scores`: p_token and the ranking come from the distribution the token was drawn
    from (after temperature, nucleus and top-k), as Dream and Open-dLLM rank commits; else from
    the model's plain softmax, as LLaDA's generate.py does. Equal at temperature 0.

    `active` [M] bool marks the still-masked positions; the others' outputs are unspecified
    (the fused kernel skips their rows, the reference scores every row: on a CPU a dense
    pass costs less than finding the active rows).

    `noise_keys` [M] (reference.row_keys): the random draws (Gumbel noise, the random policy's
    ranking) are hashes of these keys, with no generator state (reference.counter_uniform), so
    they can be captured in a graph; without them the draws come from `generator`.
    """
    filtered = top_k is not None or top_p is not None
    # Tempered scores (Dream's convention) rank by the probability the draw came from: the
    # fused kernel scores the untempered one, so it serves only when the two agree.
    tempered = tempered_scores and temperature > 0.0
    if implementation == "triton" and not filtered and not tempered:
        from . import triton_step

        noise = reference.noise(logits, generator, noise_keys) if temperature > 0 else None
        tokens, p_token, margin, neg_entropy = triton_step.fused_confidence(logits, noise, temperature, active)
        if policy == "confidence":
            ranking = p_token
        elif policy == "margin":
            ranking = margin
        elif policy == "entropy":
            ranking = neg_entropy
        else:
            ranking = reference.score(logits, tokens, policy, generator, noise_keys)[0]
        return tokens, p_token, ranking.float()
    tokens = reference.propose(logits, temperature, top_k, top_p, generator, noise_keys)
    scored = reference.sampling_logits(logits, temperature, top_k, top_p).float() if tempered else logits
    ranking, p_token = reference.score(scored, tokens, policy, generator, noise_keys)
    return tokens, p_token, ranking.float()


def select_commits(ranking: torch.Tensor, active: torch.Tensor, quota: torch.Tensor, implementation: str = "reference") -> torch.Tensor:
    """Per row, the quota[b] active positions ranked highest (ties: lower position first). [B, P] -> [B, P] bool."""
    if implementation == "triton":
        from . import triton_step

        return triton_step.select_commits(ranking, active, quota)
    return reference.select_commits(ranking, active, quota)
