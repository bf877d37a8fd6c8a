"""Weight-only quantization of the backbone through torchao: 8B models on 8-12 GB cards.

torchao (PyTorch's own quantization library) swaps each nn.Linear weight for a quantized
tensor subclass whose matmul dequantizes on the fly: int8 with one scale per output row (runs
on CPUs and GPUs), int4 in groups of 128 (CUDA kernels only). sharpen's backbone is plain
nn.Linear layers, so no model code changes: the quantized model runs the unpacked layout
(the packed input-major matrices are a float layout). The embedding stays in its dtype.
"""
from __future__ import annotations

import logging
import warnings

import torch
from torch import nn

from .errors import UsageError

QUANTIZATIONS = ("int8", "int4")


def check_quantization(kind: str, device: torch.device) -> None:
    """Refuse what cannot run here before any weight is read."""
    if kind not in QUANTIZATIONS:
        raise UsageError(f"unknown quantization {kind!r}; known: {', '.join(QUANTIZATIONS)}")
    if kind == "int4" and device.type != "cuda":
        raise UsageError("--quantize int4 needs a CUDA GPU (torchao's int4 kernels); on the CPU use --quantize int8")


def _torchao():
    """torchao's quantization module, imported quietly: its import warns on stderr about CUDA
    kernels a CPU machine does not have, and torch about an enum torchao registers; neither is
    news to the user, and stderr is the user's."""
    quiet = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [log.level for log in quiet]
    for log in quiet:
        log.setLevel(logging.ERROR)
    try:
        import torchao.quantization as quantization
    except ImportError:
        raise UsageError("--quantize needs the torchao package: pip install torchao") from None
    finally:
        for log, level in zip(quiet, levels):
            log.setLevel(level)
    return quantization


def _weight_only(kind: str):
    ao = _torchao()
    return ao.Int8WeightOnlyConfig() if kind == "int8" else ao.Int4WeightOnlyConfig(group_size=128)


def quantize_backbone(model: nn.Module, kind: str) -> nn.Module:
    """Quantize every nn.Linear of `model` in place (weight-only); returns the model."""
    _torchao().quantize_(model, _weight_only(kind), filter_fn=lambda module, name: isinstance(module, nn.Linear))
    return model


def weight_bytes(model: nn.Module) -> int:
    """Bytes the parameters take, quantized tensors counted by what they store."""
    total = 0
    for p in {id(p): p for p in model.parameters()}.values():
        inner = getattr(p, "data", p)
        parts = [getattr(inner, name) for name in getattr(inner, "tensor_data_names", ()) if isinstance(getattr(inner, name, None), torch.Tensor)]
        total += sum(t.nbytes for t in parts) if parts else inner.nbytes
    return total


def quantize_experts_model(model: nn.Module, kind: str) -> nn.Module:
    """Weight-only quantization of a transformers mixture-of-experts model (DiffusionGemma): every
    nn.Linear, and each experts module's 3-D weights (gate_up_proj, down_proj), which hold most
    of the parameters. The model must run its experts one by one (`experts_implementation=
    "eager"`): torchao's tensors slice per expert, but do not implement the transpose that the
    grouped-matmul path takes. The embedding stays in its dtype."""
    ao, config = _torchao(), _weight_only(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchao's deprecation note on "_default" is not the user's to read
        plan = ao.FqnToConfig({r"re:.*experts\.(gate_up_proj|down_proj)": config, "_default": config})
        ao.quantize_(model, plan, filter_fn=None)
    return model
