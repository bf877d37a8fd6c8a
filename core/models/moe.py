"""A mixture-of-experts feed-forward for the backbone: a router picks k experts per token.

Two routings, each exactly as its reference computes it:

- LLaDA2 / Ling 2.0 (BailingMoeV2, the release's `modeling_llada2_moe.py`): router logits in
  float32, sigmoid scores; an expert bias is added for *selection only*; experts come in
  `n_group` groups, a group scores the sum of its two best experts, only the `topk_group`
  best groups compete; the chosen experts' plain sigmoid scores are renormalised (sum to one,
  plus 1e-20) and multiplied by `routed_scaling_factor` (2.5 in the releases).
- Qwen3-MoE (SDAR-30B-A3B; transformers' `Qwen3MoeTopKRouter`): softmax over all experts in
  float32, top k, renormalised when `norm_topk_prob`.

The experts run grouped: the token-expert assignments are sorted by expert and each expert's
rows go through one matrix product, all experts in one call of torch's grouped GEMM
(`torch._grouped_mm`: no host sync, so a step stays one CUDA graph), or, where that kernel does
not take the dtype (CUDA before sm90, or not bfloat16), one product per *active* expert. Never
a loop over tokens. The experts' weights are stored as the loader packs them once:
gate|up [E, 2F, D] and down [E, D, F] ([experts, out, in], transformers' own layout).

A shared expert (LLaDA2: `num_shared_experts` of them, one MLP of that many times the expert
width) runs on every token and is added; the first `first_dense` layers keep a dense MLP.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .quantize import QuantizedLinear, quantized_linear

SCORINGS = ("sigmoid", "softmax")


@dataclass(frozen=True)
class MoESpec:
    n_experts: int  # routed experts per MoE layer (LLaDA2: 256; Qwen3-30B-A3B: 128)
    top_k: int  # experts each token uses (num_experts_per_tok: 8)
    expert_hidden: int  # SwiGLU width of one expert (moe_intermediate_size)
    scoring: str = "softmax"  # "sigmoid" (LLaDA2) or "softmax" (Qwen3-MoE), see the module doc
    selection_bias: bool = False  # LLaDA2's expert_bias: added to the scores that choose, never to the weights
    n_group: int = 1  # expert groups (LLaDA2: 8); a token's experts come from its topk_group best groups
    topk_group: int = 1  # groups a token may draw from (LLaDA2: 4)
    norm_topk_prob: bool = True  # renormalise the chosen experts' weights to sum to one
    scaling: float = 1.0  # routed_scaling_factor: the routed sum's weight against the shared expert (LLaDA2: 2.5)
    n_shared: int = 0  # shared experts, run on every token as one MLP of n_shared * expert_hidden
    first_dense: int = 0  # first_k_dense_replace: layers before this one keep the dense MLP
    router_float32: bool = False  # LLaDA2 computes router logits in float32 whatever the weights' dtype

    def __post_init__(self) -> None:
        if self.scoring not in SCORINGS:
            raise ValueError(f"router scoring {self.scoring!r} is not supported (known: {', '.join(SCORINGS)})")
        if not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"num_experts_per_tok={self.top_k} must be between 1 and num_experts={self.n_experts}")
        if self.n_experts % self.n_group or not 1 <= self.topk_group <= self.n_group:
            raise ValueError(f"{self.n_experts} experts do not split into n_group={self.n_group} groups with topk_group={self.topk_group}")
        if self.n_group > 1 and self.n_experts // self.n_group < 2:
            raise ValueError("group-limited routing scores a group by its two best experts: each group needs two")
        if self.top_k > self.topk_group * (self.n_experts // self.n_group):
            raise ValueError(f"top {self.top_k} experts cannot come from {self.topk_group} groups of {self.n_experts // self.n_group}")

    def is_moe_layer(self, layer: int) -> bool:
        return layer >= self.first_dense


def route(logits: torch.Tensor, spec: MoESpec, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits [N, E] -> (expert ids [N, k], weights [N, k] float32), as the references do it."""
    if spec.scoring == "softmax":
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)  # [N, E]
        weights, chosen = probs.topk(spec.top_k, dim=-1)  # [N, k]
        if spec.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return chosen, weights * spec.scaling if spec.scaling != 1.0 else weights
    scores = logits.float().sigmoid()  # [N, E]
    choice = scores if bias is None else scores + bias  # the bias steers selection only
    if spec.topk_group < spec.n_group:
        n = choice.shape[0]
        groups = choice.view(n, spec.n_group, -1)  # [N, G, E/G]
        group_score = groups.topk(2, dim=-1).values.sum(dim=-1)  # [N, G]: a group's two best experts
        kept = group_score.topk(spec.topk_group, dim=-1, sorted=False).indices  # [N, topk_group]
        allowed = torch.zeros_like(group_score, dtype=torch.bool).scatter_(1, kept, True)  # [N, G]
        choice = choice.masked_fill(~allowed.unsqueeze(-1).expand_as(groups).reshape(n, -1), float("-inf"))
    chosen = choice.topk(spec.top_k, dim=-1).indices  # [N, k]
    weights = scores.gather(1, chosen)  # [N, k]: the plain scores, without the bias
    if spec.norm_topk_prob and spec.top_k > 1:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return chosen, weights * spec.scaling


def grouped_kernel_takes(x: torch.Tensor) -> bool:
    """Whether torch's grouped GEMM runs for these activations: eagerly on CPUs in any float
    dtype; on CUDA, and under torch.compile anywhere (its shape rules are CUDA's), only bfloat16,
    on CUDA sm90 and newer (its CUTLASS kernel). Decided from the tensor, not by trying and catching."""
    if x.device.type == "cpu":
        return x.dtype == torch.bfloat16 or not torch.compiler.is_compiling()
    if x.device.type == "cuda":
        return x.dtype == torch.bfloat16 and torch.cuda.get_device_capability(x.device) >= (9, 0)
    return False


def run_experts(x: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
                grouped: bool = True) -> torch.Tensor:
    """sum_j weights[n, j] * expert[chosen[n, j]](x[n]) for every token n: x [N, D] -> [N, D].

    The N*k assignments are sorted by expert (stable, so ties keep token order), the rows
    gathered once, and each expert's contiguous run multiplied by its weights: one grouped
    GEMM for all (`grouped`), else one product per expert that received rows. The products
    come back to assignment order and are summed per token in the order of its k choices,
    the reference's order of summation.
    """
    n, k = chosen.shape
    flat = chosen.reshape(-1)  # [N k]
    order = flat.argsort(stable=True)  # [N k] assignments, sorted by expert
    rows = x[order // k]  # [N k, D]
    # [E] rows per expert; scatter_add, not bincount: a fixed output shape keeps torch.compile's graph whole
    counts = torch.zeros(gate_up.shape[0], dtype=torch.long, device=x.device).scatter_add_(0, flat, torch.ones_like(flat))
    if grouped:
        ends = counts.cumsum(0).to(torch.int32)  # [E] end offset of each expert's run
        hidden = torch._grouped_mm(rows, gate_up.transpose(1, 2), offs=ends)  # [N k, 2F]
        gate, up = hidden.chunk(2, dim=-1)
        out = torch._grouped_mm(F.silu(gate) * up, down.transpose(1, 2), offs=ends)  # [N k, D]
    else:
        out = torch.empty_like(rows)
        start = 0
        for expert, count in enumerate(counts.tolist()):  # one host read per layer
            if count:
                part = rows[start:start + count]  # [c, D]
                gate, up = F.linear(part, gate_up[expert]).chunk(2, dim=-1)
                out[start:start + count] = F.linear(F.silu(gate) * up, down[expert])
                start += count
    unsorted = torch.empty_like(out)
    unsorted[order] = out  # back to [N k] assignment order
    combined = (unsorted.view(n, k, -1).float() * weights.unsqueeze(-1)).sum(dim=1)  # [N, D] float32
    return combined.to(x.dtype)


def run_quantized_experts(x: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor, experts: "QuantizedExperts") -> torch.Tensor:
    """run_experts for int8 / int4 experts: the same sort by expert, one quantized product per
    active expert (core/models/quantize.py's kernels read the weights in their stored width)."""
    n, k = chosen.shape
    flat = chosen.reshape(-1)  # [N k]
    order = flat.argsort(stable=True)
    rows = x[order // k]  # [N k, D]
    out = torch.empty_like(rows)
    start = 0
    for expert, count in enumerate(torch.bincount(flat, minlength=len(experts.gate_up)).tolist()):  # one host read per layer
        if count:
            gate, up = experts.gate_up[expert](rows[start:start + count]).chunk(2, dim=-1)
            out[start:start + count] = experts.down[expert](F.silu(gate) * up)
            start += count
    unsorted = torch.empty_like(out)
    unsorted[order] = out
    return (unsorted.view(n, k, -1).float() * weights.unsqueeze(-1)).sum(dim=1).to(x.dtype)


class QuantizedExperts(nn.Module):
    """One layer's experts as core/models/quantize.py's int8 / int4 linears, one per expert and
    projection (gate|up [2F, D], down [D, F]), filled expert by expert as the loader reads them
    (core/models/assemble.py): the full-precision experts never exist whole."""

    def __init__(self, gate_up: list[QuantizedLinear], down: list[QuantizedLinear]) -> None:
        super().__init__()
        self.gate_up = nn.ModuleList(gate_up)
        self.down = nn.ModuleList(down)


def quantized_experts(kind: str, layer: "MoEFeedForward", dtype: torch.dtype, device, kernel: str) -> QuantizedExperts | None:
    """Empty quantized experts for `layer`, or None where int4's kernels do not take its shapes
    (the experts then stay in `dtype`)."""
    E, two_f, D = layer.gate_up.shape
    with torch.device("meta"):  # shape carriers only: quantized_linear reads in/out features and bias
        shapes = (nn.Linear(D, two_f, bias=False), nn.Linear(two_f // 2, D, bias=False))
    gate_up = [quantized_linear(kind, shapes[0], dtype, device, kernel) for _ in range(E)]
    down = [quantized_linear(kind, shapes[1], dtype, device, kernel) for _ in range(E)]
    if any(q is None for q in gate_up + down):
        return None
    return QuantizedExperts(gate_up, down)


class SwiGLU(nn.Module):
    """The shared expert: a plain SwiGLU MLP (gate w1, up w3, down w2) on every token."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoEFeedForward(nn.Module):
    """Router + routed experts (+ shared expert): x [B, S, D] -> [B, S, D]."""

    def __init__(self, dim: int, spec: MoESpec) -> None:
        super().__init__()
        self.spec = spec
        # Plain parameters, not nn.Linear: weight-only quantization swaps every nn.Linear, and the
        # router must keep its precision (LLaDA2 routes in float32); the bias is a parameter so a
        # loader that fills parameters fills it too.
        self.router = nn.Parameter(torch.empty(spec.n_experts, dim))  # [E, D]
        self.expert_bias = nn.Parameter(torch.zeros(spec.n_experts), requires_grad=False) if spec.selection_bias else None  # [E]
        self.gate_up = nn.Parameter(torch.empty(spec.n_experts, 2 * spec.expert_hidden, dim))  # [E, 2F, D]: gate | up
        self.down = nn.Parameter(torch.empty(spec.n_experts, dim, spec.expert_hidden))  # [E, D, F]
        self.shared = SwiGLU(dim, spec.n_shared * spec.expert_hidden) if spec.n_shared else None
        # The last call's choices, [B, S, k], kept for tests and the editor's routing display only
        # when asked (record_routing): keeping them costs nothing on the device but a reference.
        self.record_routing = False
        self.last_routing: torch.Tensor | None = None
        # None: the grouped GEMM wherever its kernel takes the dtype (grouped_kernel_takes); False:
        # one product per active expert (what bench/moe.py compares it with).
        self.grouped: bool | None = None
        self.quantized: QuantizedExperts | None = None  # set by use_quantized: int8 / int4 experts

    def use_quantized(self, experts: QuantizedExperts) -> None:
        """Run `experts` from now on; the float expert tensors are dropped."""
        del self.gate_up, self.down
        self.quantized = experts

    def router_logits(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, D] -> [N, E]; float32 where the reference computes them so (LLaDA2)."""
        if self.spec.router_float32 and x.dtype != torch.float32:
            return F.linear(x.float(), self.router.float())
        return F.linear(x, self.router)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, D = x.shape
        flat = x.reshape(-1, D)  # [N, D]
        chosen, weights = route(self.router_logits(flat), self.spec, self.expert_bias)  # [N, k] each
        if self.record_routing:
            self.last_routing = chosen.view(B, S, -1)
        if self.quantized is not None:
            out = run_quantized_experts(flat, chosen, weights, self.quantized)
        else:
            grouped = grouped_kernel_takes(flat) if self.grouped is None else self.grouped
            out = run_experts(flat, chosen, weights, self.gate_up, self.down, grouped=grouped)
        out = out.view(B, S, D)
        return out if self.shared is None else out + self.shared(x)
