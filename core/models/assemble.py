"""A meta-device backbone's weights, built from the checkpoint's shards in their final place.

Nothing is read twice into memory: each weight's rows are read a chunk at a time
(core/models/shards.py) and written where they will live, so a load peaks at the loaded model plus
one chunk, not at the checkpoint plus the model built from it:

- one device, full precision: the fused matrices of the inference layout (q|k|v, gate|up,
  and each matrix stored input-major, as Transformer.pack lays them out) are allocated once
  and filled from their source tensors; the per-projection weights are views into them;
- quantized: each linear is quantized chunk by chunk into its int8 / int4 storage
  (core/models/quantize.py) and its full-precision rows are dropped as soon as they are used;
- a device map: every tensor goes straight to its module's device (accelerate dispatches
  the model afterwards, core/models/placement.py), quantized the same way when asked.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .model import FeedForward, PackedAttention, PackedFeedForward, Transformer
from .moe import MoEFeedForward, quantized_experts
from .quantize import quantized_linear
from .shards import Shards


@torch.no_grad()
def assemble(model: Transformer, shards: Shards, source: dict[str, str], dtype: torch.dtype,
             where: Callable[[str], torch.device], runs_on: Callable[[str], torch.device],
             packed: bool, quantize: str | None = None) -> None:
    """Fill every parameter of the meta-built `model` from `shards`.

    `source`: backbone name -> checkpoint name (a tied head has none). `where(module)`: the
    device a module's tensors are stored on; `runs_on(module)`: where it computes (they
    differ for modules offloaded to host memory). `packed`: lay out the fused inference
    matrices (one device, no quantization), as Transformer.pack would.
    """
    tied = model.cfg.tie_embeddings
    if quantize is not None:
        _quantize_linears(model, shards, source, dtype, where, runs_on, quantize)
    elif packed:
        _pack_from_shards(model, shards, source, dtype, where("embed"))
    for name, param in list(model.named_parameters()):
        if param.is_meta:
            module = name.rsplit(".", 1)[0]
            _set(model, name, _read(shards, source[name], dtype, where(module)))
    if tied and isinstance(model.output, nn.Linear) and model.packed_output is None:
        # The head reads the embedding's matrix (a float head: unquantized, or a shape int4 does not take).
        model.output.weight = model.embed.weight


def _set(model: nn.Module, name: str, tensor: torch.Tensor) -> None:
    module, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(module), leaf, nn.Parameter(tensor, requires_grad=False))


def _read(shards: Shards, name: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor in its usual (row-major) layout, filled a chunk of rows at a time."""
    out = torch.empty(shards.entries[name].shape, dtype=dtype, device=device)
    for start, stop, rows in shards.chunks(name):
        out[start:stop].copy_(rows.view(out[start:stop].shape))
    return out


def _input_major(shards: Shards, names: list[str], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The [in, sum(out)] matrix of the [out, in] weights `names`, side by side and transposed:
    the layout Transformer.pack builds with cat(...).t().contiguous(), filled in place."""
    outs = [shards.entries[n].shape[0] for n in names]
    packed = torch.empty(shards.entries[names[0]].shape[1], sum(outs), dtype=dtype, device=device)  # [in, sum(out)]
    column = 0
    for name, out in zip(names, outs):
        for start, stop, rows in shards.chunks(name):
            packed[:, column + start:column + stop].copy_(rows.to(device).t())
        column += out
    return packed


def _views(linears: list[nn.Linear], packed: torch.Tensor) -> None:
    """Each linear's weight becomes its (transposed) column block of `packed`: no copy."""
    start = 0
    for lin in linears:
        out = lin.out_features
        lin.weight = nn.Parameter(packed[:, start:start + out].t(), requires_grad=False)
        start += out


def _pack_from_shards(model: Transformer, shards: Shards, source: dict[str, str], dtype: torch.dtype, device: torch.device) -> None:
    """Transformer.pack's layout, built from the shards (tests/test_packing.py holds the two equal)."""
    for i, block in enumerate(model.layers):
        attn, ffn = block.attn, block.ffn
        p = f"layers.{i}."
        qkv = _input_major(shards, [source[p + f"attn.{w}.weight"] for w in ("wq", "wk", "wv")], dtype, device)
        _views([attn.wq, attn.wk, attn.wv], qkv)
        bias = None
        if attn.wq.bias is not None:
            parts = [_read(shards, source[p + f"attn.{w}.bias"], dtype, device) for w in ("wq", "wk", "wv")]
            bias = torch.cat(parts)  # [(H + 2Hkv) D]
            for lin, part in zip((attn.wq, attn.wk, attn.wv), bias.split([t.numel() for t in parts])):
                lin.bias = nn.Parameter(part, requires_grad=False)
        wo = _input_major(shards, [source[p + "attn.wo.weight"]], dtype, device)
        _views([attn.wo], wo)
        attn.packed = PackedAttention(qkv, bias, wo)
        if not isinstance(ffn, FeedForward):
            continue  # a mixture of experts: its [E, out, in] tensors are read as they are, below
        gate_up = _input_major(shards, [source[p + "ffn.w1.weight"], source[p + "ffn.w3.weight"]], dtype, device)
        _views([ffn.w1, ffn.w3], gate_up)
        down = _input_major(shards, [source[p + "ffn.w2.weight"]], dtype, device)
        _views([ffn.w2], down)
        ffn.packed = PackedFeedForward(gate_up, down)
    if not model.cfg.tie_embeddings:
        model.packed_output = _input_major(shards, [source["output.weight"]], dtype, device)
        _views([model.output], model.packed_output)
    elif device.type == "cpu":
        # Tied on a CPU: one input-major matrix serves the head and the embedding (see Transformer.pack).
        model.packed_output = _input_major(shards, [source["embed.weight"]], dtype, device)
        _views([model.output], model.packed_output)
        model.embed.weight = model.output.weight


def _quantize_linears(model: Transformer, shards: Shards, source: dict[str, str], dtype: torch.dtype,
                      where: Callable[[str], torch.device], runs_on: Callable[[str], torch.device], kind: str) -> None:
    """Every nn.Linear becomes its quantized twin, filled chunk by chunk; a tied head is quantized
    from the embedding's rows, apart from the embedding (which stays in `dtype`)."""
    for module_name, linear in list(model.named_modules()):
        if not isinstance(linear, nn.Linear):
            continue
        kernel = runs_on(module_name).type
        q = quantized_linear(kind, linear, dtype, where(module_name), kernel)
        if q is None:
            continue  # a shape the int4 kernels do not take: stays in `dtype` (read by assemble)
        weight = source.get(f"{module_name}.weight", source["embed.weight"] if module_name == "output" else None)
        for start, stop, rows in shards.chunks(weight, multiple=q.row_block):
            q.fill_rows(start, stop, rows)
        if q.bias is not None:
            q.bias.copy_(shards.read(source[f"{module_name}.bias"]))
        parent, _, leaf = module_name.rpartition(".")
        setattr(model.get_submodule(parent), leaf, q)
    _quantize_experts(model, shards, source, dtype, where, runs_on, kind)


def _quantize_experts(model: Transformer, shards: Shards, source: dict[str, str], dtype: torch.dtype,
                      where: Callable[[str], torch.device], runs_on: Callable[[str], torch.device], kind: str) -> None:
    """A mixture of experts' [E, out, in] experts become one quantized linear per expert and
    projection, filled from the rows the shards serve a few experts at a time (core/models/moe.py)."""
    for module_name, layer in list(model.named_modules()):
        if not isinstance(layer, MoEFeedForward):
            continue
        experts = quantized_experts(kind, layer, dtype, where(module_name), runs_on(module_name).type)
        if experts is None:
            continue  # shapes the int4 kernels do not take: the experts stay in `dtype`
        for part, linears in (("gate_up", experts.gate_up), ("down", experts.down)):
            for start, stop, rows in shards.chunks(source[f"{module_name}.{part}"]):  # rows [experts, out, in]
                for j in range(stop - start):
                    linears[start + j].fill_rows(0, rows.shape[1], rows[j])
        layer.use_quantized(experts)
