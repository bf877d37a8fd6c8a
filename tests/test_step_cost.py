"""What a denoising step costs the host (bench/step_cost.py counts it): kernel launches per
layer, host reads per step, compiled graphs per session; and the numerics of the fused forms.

Launches are counted as aten ops under inference mode, where the engine runs (views and bare
allocations excluded), so an op that is one CUDA kernel counts once (bench/step_cost.py).
"""
import pytest
import torch
import torch.nn.functional as F

import step_cost  # bench/step_cost.py (pytest's pythonpath)
from sharpen.core.models.model import FLOAT16_LIMIT, Block, ModelConfig
from sharpen.core.models.rotary import apply_rotary, rotary_table

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


TEXT = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    x = 1\n    y = 2\n"


def _reads_per_step(denoiser, settings, rules):
    """Host reads between consecutive frames of a run, and the run's final frame."""
    from sharpen.core.canvas import build_canvas
    from sharpen.core.loops import run_loop
    from sharpen.core.spans import Span

    canvas = build_canvas(TEXT, [Span(48, 48, max_tokens=24)], denoiser.tokenizer, denoiser.spec.mask_id, 256, denoiser.max_len)
    marks, blocks = [], []
    with step_cost.counting() as (launches, explicit):
        for frame in run_loop(denoiser, canvas, settings, rules=rules):
            marks.append(sum(explicit.reads.values()) + sum(launches.reads.values()))
            if frame.done:
                break
    return [b - a for a, b in zip(marks, marks[1:-1])], frame


def test_a_fixed_schedule_block_reads_the_host_only_at_its_start(tiny_denoiser):
    # On a GPU each read stalls the launch queue. Planned reads (CUDA's default): one per block,
    # before its first step; none inside it. Here every block has 8 slots and 4 steps.
    from sharpen.core.loops import LoopRules
    from sharpen.core.settings import Sampling

    settings = Sampling(schedule="fixed", block_size=8, steps=12)
    planned, frame = _reads_per_step(tiny_denoiser, settings, LoopRules(expected_length=False, reads="planned"))
    inside = [n for i, n in enumerate(planned) if i % 4]  # steps 1-3 of each block
    assert len(planned) == 12 and inside and set(inside) == {0}, planned
    assert all(n >= 1 for i, n in enumerate(planned) if i % 4 == 0)  # the block's start
    every, same = _reads_per_step(tiny_denoiser, settings, LoopRules(expected_length=False, reads="every-step"))
    assert same.final_ids == frame.final_ids and set(every) - {0} == {1, 2}


def test_the_threshold_schedule_reads_one_step_late_and_ends_where_it_did(tiny_denoiser):
    from sharpen.core.loops import LoopRules
    from sharpen.core.settings import Sampling

    settings = Sampling(block_size=8)
    planned, frame = _reads_per_step(tiny_denoiser, settings, LoopRules(expected_length=False, reads="planned"))
    every, same = _reads_per_step(tiny_denoiser, settings, LoopRules(expected_length=False, reads="every-step"))
    assert frame.final_ids == same.final_ids
    assert max(planned) <= 2 and len(planned) <= len(every) + 3  # at most one idle step per block (3 blocks)


def test_counter_noise_is_uniform_and_a_function_of_its_keys():
    from sharpen.kernels import reference as R

    keys = R.row_keys(torch.tensor(R.seed_key(7)), torch.tensor(3), torch.arange(64))
    u = R.counter_uniform(keys, 4096)  # [64, 4096] float64
    assert u.dtype == torch.float64 and 0 < u.min() and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    counts = torch.histc(u.float(), bins=16, min=0, max=1)  # chi-square over 16 bins, 15 degrees of freedom
    assert ((counts - u.numel() / 16) ** 2 / (u.numel() / 16)).sum() < 37.7  # p = 0.001
    assert torch.equal(u, R.counter_uniform(keys.clone(), 4096))  # no hidden state
    other_step = R.counter_uniform(R.row_keys(torch.tensor(R.seed_key(7)), torch.tensor(4), torch.arange(64)), 4096)
    other_seed = R.counter_uniform(R.row_keys(torch.tensor(R.seed_key(8)), torch.tensor(3), torch.arange(64)), 4096)
    assert (u != other_step).float().mean() > 0.999 and (u != other_seed).float().mean() > 0.999
    assert abs(torch.corrcoef(torch.stack([u[0], u[1]]))[0, 1]) < 0.05  # neighbouring rows unrelated
    assert R.mix32(123456789) == int(R.mix32(torch.tensor(123456789)))  # host and device agree


def test_same_seed_same_result_through_the_counter_noise(tiny_denoiser):
    from sharpen.core.engine import apply_edit
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    spans = [Span(4, 7), Span(48, 48, max_tokens=10)]
    for settings in (Sampling(temperature=1.2, seed=11, samples=2), Sampling(policy="random", temperature=0.7, seed=3)):
        first = apply_edit(tiny_denoiser, TEXT, spans, settings)
        assert apply_edit(tiny_denoiser, TEXT, spans, settings).samples == first.samples
    seeds = {apply_edit(tiny_denoiser, TEXT, spans, Sampling(temperature=1.2, seed=s)).text for s in range(4)}
    assert len(seeds) > 1


def test_the_sampler_draws_no_generator_inside_a_step(tiny_denoiser, monkeypatch):
    # A generator inside the step breaks a compiled graph; the step's draws are counter-based.
    from sharpen.core.engine import apply_edit
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span
    from sharpen.kernels import reference as R

    def no_generator(*args, **kwargs):
        raise AssertionError("a generator draw inside a step")

    monkeypatch.setattr(R, "gumbel_noise", no_generator)
    monkeypatch.setattr(torch, "rand", no_generator)
    result = apply_edit(tiny_denoiser, TEXT, [Span(48, 48, max_tokens=10)], Sampling(temperature=1.0, policy="random", seed=2))
    assert result.steps > 1


def test_block_size_defaults_by_device_and_model_size(tiny_denoiser):
    from sharpen.core.engine import apply_edit
    from sharpen.core.loops.masked import _plan
    from sharpen.core.settings import Sampling, default_block_size
    from sharpen.core.spans import Span

    assert default_block_size("cuda", 8_000_000_000) == 32 and default_block_size("cuda", 500_000_000) == 8
    assert default_block_size("cpu", 8_000_000_000) == 8
    blocks = _plan([range(10, 80)], Sampling(), "cpu", default_block_size("cuda", 8_000_000_000))
    assert [len(host) for _, _, host in blocks] == [32, 32, 6]
    assert [len(host) for _, _, host in _plan([range(10, 80)], Sampling(block_size=0), "cpu", 32)] == [70]  # set: as asked
    spans = [Span(48, 48, max_tokens=20)]
    unset, eight = (apply_edit(tiny_denoiser, TEXT, spans, Sampling(block_size=b)) for b in (None, 8))
    assert (unset.text, unset.steps) == (eight.text, eight.steps)  # on this CPU: blocks of 8, as before


def test_the_runner_adds_no_host_read_per_step(tiny_denoiser):
    """A consumer that read each frame's spans every step (the runner's sharp-slot count) synced
    the host at every step, undoing the loop's planned reads: the count stays on the device and
    is read once at the end, and progress is built only at the consumer's rate. The runner's
    reads beyond the engine's own stay the same whatever the number of steps."""
    from sharpen.core.engine import run_edit
    from sharpen.core.request import EditRequest
    from sharpen.core.run import Runner
    from sharpen.core.settings import Editing, Sampling
    from sharpen.core.spans import Span

    def reads(run) -> int:
        with step_cost.counting() as (launches, explicit):
            run()
        return sum(explicit.reads.values()) + sum(launches.reads.values())

    runner, extra = Runner(tiny_denoiser), {}
    for steps in (6, 12):
        settings = Sampling(schedule="fixed", block_size=8, steps=steps)
        request = EditRequest(TEXT, (Span(48, 48, max_tokens=24),), settings, Editing(length="fixed"))
        done: list = []
        through_runner = reads(lambda: done.extend(runner.run(request, every=None)))
        engine_alone = reads(lambda: list(run_edit(tiny_denoiser, TEXT, list(request.spans), settings, length="fixed")))
        assert len(done[-1].sharp_per_step) == steps + 1
        extra[steps] = through_runner - engine_alone
    assert abs(extra[12] - extra[6]) <= 1 and extra[12] < 12, extra  # not one (or more) per step
