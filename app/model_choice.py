"""Which model to load, from --model / --device / config, with clear errors."""
from __future__ import annotations

from argparse import Namespace


def resolve_device(requested: str | None) -> str:
    import torch

    if requested in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def load_model(args: Namespace):
    from ..core.errors import ModelError
    from ..core.loading import load_denoiser

    device = resolve_device(getattr(args, "device", None))
    try:
        return load_denoiser(args.model, device=device)
    except (RuntimeError, ValueError) as exc:  # torch's device errors, e.g. CUDA unavailable
        raise ModelError(f"cannot load the model on {device}: {str(exc).splitlines()[0]}") from None
