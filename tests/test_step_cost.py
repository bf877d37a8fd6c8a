"""What a denoising step costs the host (bench/step_cost.py counts it): kernel launches per
layer, host reads per step, compiled graphs per session; and the numerics of the fused forms.

Launches are counted as aten ops under inference mode, where the engine runs (views and bare
allocations excluded), so an op that is one CUDA kernel counts once (bench/step_cost.py).
"""
import pytest
import torch
import torch.nn.functional as F

import step_cost  # bench/step_cost.py (pytest's pythonpath)
from sharpen.core.model import FLOAT16_LIMIT, Block, ModelConfig, apply_rotary, rotary_table

# Issue 28 counted 33.5 launches per layer of a cached bfloat16 step (RMSNorm 8, RoPE 6).
BF16_BOUND = 33.5 / 2


@pytest.mark.parametrize("shape", ["llada", "qwen2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_layer_of_a_cached_step_launches_at_most_half_of_before(shape, dtype):
    per_layer, fixed, ops = step_cost.layer_launches(shape, dtype)
    assert per_layer <= BF16_BOUND, ops
    assert ops["rms_norm"] == 2 and not {"pow", "rsqrt", "mean", "to", "_to_copy"} & set(ops), ops  # each norm one op, no casts
    rotary = ops["mul"] - 1 + ops["sum"]  # the feed-forward's gating is the other mul
    assert rotary <= 2 and "roll" not in ops, ops  # RoPE (q and k together) in at most two kernels
    assert fixed <= 8, fixed


def test_the_launch_counter_sees_what_it_should():
    x = torch.randn(4, 8)
    with torch.inference_mode(), step_cost.Launches() as seen:
        x.t()  # a view: no kernel
        x.view(8, 4)
        x.float()  # already float32: no copy
        x + 1
        x.contiguous()
        x.t().contiguous()  # a copy
        x.add_(1)
        x[x > 0]  # the bool index sizes its result on the host
    assert seen.total == 5 and dict(seen.reads) == {"index": 1}, (seen.ops, seen.reads)


def test_bfloat16_rms_norm_is_the_reference_to_one_rounding():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    reference = LlamaRMSNorm(256, eps=1e-5).to(torch.bfloat16)
    reference.weight.data = torch.randn(256).to(torch.bfloat16)
    x = (torch.randn(3, 7, 256) * 5).to(torch.bfloat16)
    fused = F.rms_norm(x, (256,), reference.weight, 1e-5)
    x32 = x.float()
    rounded_once = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5) * reference.weight.float()).to(torch.bfloat16)
    assert torch.equal(fused, rounded_once)  # float32 inside, one rounding at the end (CUDA's kernel does the same)
    want = reference(x).float()
    assert ((fused.float() - want).abs() <= want.abs() * 2 ** -7).all()  # within one bfloat16 step of Llama's


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_equals_transformers_llama(dtype):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    config = LlamaConfig(hidden_size=256, num_attention_heads=4, rope_theta=500000.0)
    torch.manual_seed(0)
    x = torch.randn(2, 6, 10, 64).to(dtype).transpose(1, 2)  # [B, H, S, D] as the projections leave it
    positions = torch.tensor([0, 3, 4, 5, 9, 100])
    cos, sin = LlamaRotaryEmbedding(config)(x, positions[None])
    want, _ = apply_rotary_pos_emb(x, x, cos, sin)
    got = apply_rotary(x, rotary_table(64, 128, 500000.0).to(dtype)[positions])
    torch.testing.assert_close(got, want, atol=0, rtol=0) if dtype == torch.bfloat16 else torch.testing.assert_close(got, want)
    assert got.transpose(1, 2).is_contiguous()  # the projections' layout kept: attention's output reshapes as a view


def test_float16_residual_stream_stays_finite():
    # A float16 block whose residual passes 65504 used to hand inf to the next norm (NaN after it).
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=64, dim=64, n_layers=1, n_heads=4)
    block = Block(cfg).to(torch.float16).eval()
    with torch.no_grad():
        for linear, value in ((block.ffn.w1, 0.1), (block.ffn.w3, 0.1), (block.ffn.w2, 60.0)):
            linear.weight.fill_(value)  # a feed-forward whose output overflows float16 (about 4.7e5)
        x = torch.full((1, 4, 64), 1000.0, dtype=torch.float16)
        out = block(x, rotary_table(cfg.head_dim, 4, cfg.rope_theta).to(torch.float16), torch.arange(4), None)
    assert torch.isfinite(out).all() and out.abs().max() <= FLOAT16_LIMIT
