"""Weight-only int8 / int4 linears for the backbone, built a few rows at a time: 8B models on 8-12 GB cards.

The backbone's quantized linears run on kernels that ship inside PyTorch itself, so no extra
package can be missing on the day a GPU runs them:

- int8: one scale per output row (symmetric). CPU: `torch._weight_int8pack_mm` for the few
  rows of a cached step, in bfloat16 (see CPU_KERNEL_ROWS). CUDA: the
  weight is converted to the activation dtype inside the matmul expression, which eager runs
  as a whole-weight dequantization per call (about 2.5x the bytes of bfloat16 moved) and
  torch.compile fuses into the matmul: on CUDA int8 wants --compile (see `int8_needs_compile`).
- int4: groups of 128 along the input, one scale and zero point per group (asymmetric, the
  "tinygemm" convention: w = (q - 8) * scale + zero). CUDA: `torch._weight_int4pack_mm`
  (tensor cores, sm80+); CPU: `torch._weight_int4pack_mm_for_cpu`. The packed layouts tile
  rows in blocks (8 on CUDA, 64 on the CPU), so a weight quantizes and packs block by block:
  the loader never holds a whole full-precision matrix (core/models/assemble.py).

Quantized models run the unpacked layout (the packed input-major matrices are a float layout);
the embedding stays in the load dtype. DiffusionGemma's experts (transformers' own modules)
still quantize through torchao: `quantize_experts_model`.
"""
from __future__ import annotations

import logging
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UsageError

QUANTIZATIONS = ("int8", "int4")
INT4_GROUP = 128  # input columns per int4 scale/zero pair (torchao's and gpt-fast's default)
INT4_INNER_K_TILES = 8  # the packing's k-tiles per 16-byte load; K must be a multiple of 8 * 16
INT4_ROW_BLOCK = {"cuda": 8, "cpu": 64}  # rows per packed tile: a chunk of rows packs alone if it is a multiple of this
# torch's int8 / int4 CPU kernels are fast in bfloat16 only (float32 input takes a reference path,
# 10-100x slower), and beat a float32 matmul only for the few rows of a cached step: measured on
# this CPU at 2048 x 2048, 8 rows: int8 2.2 ms, int4 1.1 ms, float32 4.4 ms; 64 rows: 26 / 24 / 17 ms.
# Above this many rows int8 dequantizes to the activation dtype instead; int4 stays on its kernel.
CPU_KERNEL_ROWS = 32


def check_quantization(kind: str, device: torch.device) -> None:
    """Refuse what cannot run here before any weight is read (UsageError: exit 2)."""
    if kind not in QUANTIZATIONS:
        raise UsageError(f"unknown quantization {kind!r}; known: {', '.join(QUANTIZATIONS)}")
    if kind == "int4":
        if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] < 8:
            name = torch.cuda.get_device_name(device)
            raise UsageError(f"--quantize int4 needs an Ampere or newer GPU (sm80+) for PyTorch's int4 kernels; {name} is older: use --quantize int8")
        if device.type not in ("cuda", "cpu"):
            raise UsageError(f"--quantize int4 runs on CUDA GPUs and CPUs, not on {device.type}; use --quantize int8")


def int8_needs_compile(kind: str | None, device: torch.device | str, compile_mode: str) -> str | None:
    """The line to show when int8 runs eagerly on CUDA, where each call dequantizes the whole
    weight (slower than bfloat16); None where nothing needs saying."""
    if kind == "int8" and torch.device(device).type == "cuda" and compile_mode == "off":
        return ("--quantize int8 on a GPU runs eagerly: each step dequantizes every weight, slower than bfloat16; "
                "pass --compile default to fuse it into the matmuls")
    return None


class QuantizedLinear(nn.Module):
    """What the int8 and int4 linears share: shapes, a float bias, row-block building."""

    row_block = 1  # rows per independent block of the stored layout

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype, device) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.bias = nn.Parameter(torch.empty(out_features, dtype=dtype, device=device), requires_grad=False) if bias else None

    def fill_rows(self, start: int, stop: int, rows: torch.Tensor) -> None:
        """Quantize output rows [start, stop) from `rows` [stop - start, in] (any float dtype, any device)."""
        raise NotImplementedError

    def _out(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        y = y.to(x.dtype).view(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Int8Linear(QuantizedLinear):
    def __init__(self, in_features: int, out_features: int, bias: bool = False, dtype=torch.float32, device=None) -> None:
        super().__init__(in_features, out_features, bias, dtype, device)
        # Parameters, not buffers: accelerate offloads parameters and would pin buffers on the GPU.
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=torch.int8, device=device), requires_grad=False)  # [N, K]
        self.scale = nn.Parameter(torch.empty(out_features, dtype=dtype, device=device), requires_grad=False)  # [N]

    @torch.no_grad()
    def fill_rows(self, start: int, stop: int, rows: torch.Tensor) -> None:
        w = rows.to(self.weight.device, torch.float32)  # [n, K]
        low, high = torch.aminmax(w, dim=1)  # [n] each: no |w| copy
        scale = torch.maximum(-low, high).clamp(min=1e-12) / 127  # [n]
        q = w / scale[:, None]  # the one full-size temporary: rounded and clamped in place
        self.weight[start:stop] = q.round_().clamp_(-128, 127).to(torch.int8)
        self.scale[start:stop] = scale.to(self.scale.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features)  # [M, K]
        # The CPU kernel in bfloat16 crashes the process (SIGSEGV, torch 2.13) when K is not a multiple
        # of 16 (an SDAR-MoE-shaped expert of width 24 did): such layers take the float32 path.
        if x2.device.type == "cpu" and x2.shape[0] <= CPU_KERNEL_ROWS and self.in_features % 16 == 0:
            y = torch._weight_int8pack_mm(x2.to(torch.bfloat16).contiguous(), self.weight, self.scale.to(torch.bfloat16))  # [M, N]
        else:  # CUDA: one fused kernel under torch.compile, a dequantized copy per call in eager mode
            y = F.linear(x2, self.weight.to(x2.dtype)) * self.scale.to(x2.dtype)
        return self._out(y, x)


class Int4Linear(QuantizedLinear):
    """`kernel` ("cuda" | "cpu") is where the layer runs: it decides the packed layout, which
    is only data, so a layer offloaded to host memory keeps the GPU's layout."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, dtype=torch.float32, device=None,
                 kernel: str = "cpu", group: int = INT4_GROUP) -> None:
        super().__init__(in_features, out_features, bias, dtype, device)
        if not int4_compatible(in_features, out_features, kernel, group):
            raise ValueError(f"a {out_features} x {in_features} weight does not fit the int4 layout on {kernel}")
        self.kernel, self.group, self.row_block = kernel, group, INT4_ROW_BLOCK[kernel]
        scale_dtype = torch.bfloat16  # both kernels run in bfloat16 (CUDA's only takes that; the CPU's float32 path is slow)
        if kernel == "cuda":  # [N/8, K/(8*16), 32, 4] int32: the tensor-core tile layout
            shape, packed_dtype = (out_features // 8, in_features // (INT4_INNER_K_TILES * 16), 32, INT4_INNER_K_TILES // 2), torch.int32
        else:  # [N, K/2] uint8, blocked by 64 rows
            shape, packed_dtype = (out_features, in_features // 2), torch.uint8
        self.weight = nn.Parameter(torch.empty(shape, dtype=packed_dtype, device=device), requires_grad=False)
        self.scales_and_zeros = nn.Parameter(torch.empty(in_features // group, out_features, 2, dtype=scale_dtype, device=device),
                                             requires_grad=False)  # [K/G, N, 2]

    @torch.no_grad()
    def fill_rows(self, start: int, stop: int, rows: torch.Tensor) -> None:
        if start % self.row_block or (stop % self.row_block and stop != self.out_features):
            raise ValueError(f"int4 rows must come in blocks of {self.row_block}")
        compute = torch.device("cuda", self.weight.device.index or 0) if self.kernel == "cuda" else torch.device("cpu")
        n, G = stop - start, self.group
        w = rows.to(compute, torch.float32).view(n, -1, G)  # [n, K/G, G]
        low, high = w.amin(-1), w.amax(-1)  # [n, K/G]
        scale = ((high - low) / 15).clamp(min=1e-6)
        zero = low + 8 * scale  # tinygemm's zero: the value of code 8
        q = (w - low[..., None]).div_(scale[..., None]).round_().clamp_(0, 15).to(torch.int32).view(n, -1)  # [n, K]
        if self.kernel == "cuda":
            nibbles = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)  # [n, K/2]
            packed = torch.ops.aten._convert_weight_to_int4pack(nibbles.contiguous(), INT4_INNER_K_TILES)
            self.weight[start // 8:(stop + 7) // 8] = packed.to(self.weight.device)
        else:
            self.weight[start:stop] = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.contiguous(), INT4_INNER_K_TILES).to(self.weight.device)
        pairs = torch.stack([scale, zero], dim=-1).transpose(0, 1)  # [K/G, n, 2]
        self.scales_and_zeros[:, start:stop] = pairs.to(self.scales_and_zeros.device, self.scales_and_zeros.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features)  # [M, K]
        if self.kernel == "cuda":
            y = torch.ops.aten._weight_int4pack_mm(x2.to(torch.bfloat16).contiguous(), self.weight, self.group, self.scales_and_zeros)
        else:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(x2.to(torch.bfloat16).contiguous(), self.weight, self.group, self.scales_and_zeros)
        return self._out(y, x)


def int4_compatible(in_features: int, out_features: int, kernel: str, group: int = INT4_GROUP) -> bool:
    """Whether the int4 kernels take this shape: whole groups and whole k-tiles along the input,
    whole row tiles. Layers that do not stay in the load dtype (every released shape fits)."""
    rows = 8 if kernel == "cuda" else 16  # the CPU packing takes whole 16-row groups
    return in_features % group == 0 and in_features % (INT4_INNER_K_TILES * 16) == 0 and out_features % rows == 0


def quantized_linear(kind: str, linear: nn.Linear, dtype: torch.dtype, device, kernel: str) -> QuantizedLinear | None:
    """An empty quantized twin of `linear` (on `device`, for a layer running on `kernel`), or
    None where int4 does not fit the shape."""
    N, K = linear.out_features, linear.in_features
    bias = linear.bias is not None
    if kind == "int8":
        return Int8Linear(K, N, bias, dtype, device)
    if not int4_compatible(K, N, kernel):
        return None
    return Int4Linear(K, N, bias, dtype, device, kernel=kernel)


@torch.no_grad()
def quantize_backbone(model: nn.Module, kind: str) -> nn.Module:
    """Quantize every nn.Linear of a materialised, unpacked `model` in place; returns the model.
    (A checkpoint never goes this way: the loader quantizes as it reads, core/models/assemble.py.)"""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Linear):
                continue
            device = child.weight.device
            q = quantized_linear(kind, child, child.weight.dtype, device, "cuda" if device.type == "cuda" else "cpu")
            if q is None:
                continue
            step = max(q.row_block, 4096 // q.row_block * q.row_block)
            for start in range(0, child.out_features, step):
                stop = min(child.out_features, start + step)
                q.fill_rows(start, stop, child.weight[start:stop])
            if child.bias is not None:
                q.bias.copy_(child.bias)
            setattr(parent, name, q)
    return model


def weight_bytes(model: nn.Module) -> int:
    """Bytes the parameters take, quantized tensors counted by what they store."""
    total = 0
    for p in {id(p): p for p in model.parameters()}.values():
        inner = getattr(p, "data", p)
        parts = [getattr(inner, name) for name in getattr(inner, "tensor_data_names", ()) if isinstance(getattr(inner, name, None), torch.Tensor)]
        total += sum(t.nbytes for t in parts) if parts else inner.nbytes
    return total


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
        raise UsageError("--quantize for DiffusionGemma needs the torchao package: pip install 'sharpen[quantize]'") from None
    finally:
        for log, level in zip(quiet, levels):
            log.setLevel(level)
    return quantization


def _weight_only(kind: str):
    ao = _torchao()
    if kind == "int8":
        return ao.Int8WeightOnlyConfig()
    # torchao 0.18's default int4 layout needs the separate `mslk` kernels package; the tile-packed
    # layout runs PyTorch's own tinygemm kernel (CUDA, sm80+).
    return ao.Int4WeightOnlyConfig(group_size=INT4_GROUP, int4_packing_format="tile_packed_to_4d")


def quantize_experts_model(model: nn.Module, kind: str) -> nn.Module:
    """Weight-only quantization of a transformers mixture-of-experts model (DiffusionGemma): every
    nn.Linear, and each experts module's 3-D weights (gate_up_proj, down_proj), which hold most
    of the parameters. The model must run its experts one by one (`experts_implementation=
    "eager"`): torchao's tensors slice per expert, but do not implement the transpose that the
    grouped-matmul path takes. The embedding stays in its dtype. int4 here is torchao's
    tile-packed layout: CUDA only."""
    first = next(model.parameters())
    if kind == "int4" and first.device.type != "cuda":
        raise UsageError("--quantize int4 for DiffusionGemma needs a CUDA GPU (torchao's tile-packed int4); on the CPU use --quantize int8")
    if kind == "int4" and first.dtype != torch.bfloat16:  # torchao asserts it (an AssertionError would be an internal error)
        raise UsageError(f"--quantize int4 for DiffusionGemma needs --dtype bfloat16 (the model is {str(first.dtype).removeprefix('torch.')})")
    ao, config = _torchao(), _weight_only(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchao's deprecation note on "_default" is not the user's to read
        plan = ao.FqnToConfig({r"re:.*experts\.(gate_up_proj|down_proj)": config, "_default": config})
        ao.quantize_(model, plan, filter_fn=None)
    return model
