"""Mixture-of-experts backbone (core/models/moe.py) and the LLaDA2 / SDAR-MoE families (core/models/families/).

The reference for LLaDA2 is its release's own modeling code, run once by
tests/golden/llada2_reference.py on the tiny checkpoint of tests/moe_checkpoints.py (golden:
tests/golden/llada2_tiny.json, naming the repository and commit): sharpen's logits within 1e-4
in float32 and the same experts for every token in every MoE layer. The Qwen3-MoE routing is
held to transformers' own router class. LLaDA2.1's editing decode: tests/test_editing.py.
"""
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from moe_checkpoints import write_llada2
from sharpen.core.models.derived import Derived, DerivedShards, derive_tensors, derived_shapes
from sharpen.core.errors import ModelError
from sharpen.core.models.loading import load_denoiser
from sharpen.core.models.kv_cache import Attend, block_causal_mask
from sharpen.core.models.moe import MoEFeedForward, MoESpec, route, run_experts
from sharpen.core.models.shards import Shards

GOLDEN = json.loads((Path(__file__).parent / "golden" / "llada2_tiny.json").read_text())
TEXT = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"
LLADA2_SPEC = MoESpec(n_experts=8, top_k=2, expert_hidden=16, scoring="sigmoid", selection_bias=True, n_group=4, topk_group=2,
                      scaling=2.5, n_shared=1, router_float32=True)


@pytest.fixture(scope="module")
def llada2(tmp_path_factory):
    """The golden's checkpoint (LLaDA2.1 layout, float32) and the same weights in the 2.0 layout."""
    root = tmp_path_factory.mktemp("llada2")
    return {"2.1": write_llada2(root / "llada2.1", version="2.1", head_scale=3.0),
            "2.0": write_llada2(root / "llada2.0", version="2.0", head_scale=3.0)}


def _recorded_logits(model, ids: torch.Tensor, attend=None) -> tuple[torch.Tensor, list]:
    moe_layers = [block.ffn for block in model.layers if isinstance(block.ffn, MoEFeedForward)]
    for ffn in moe_layers:
        ffn.record_routing = True
    try:
        with torch.inference_mode():
            logits = model(ids) if attend is None else model(ids, attend=attend)
    finally:
        for ffn in moe_layers:
            ffn.record_routing = False
    return logits[0], [ffn.last_routing[0].tolist() for ffn in moe_layers]


# --- routing -------------------------------------------------------------------------------------


def test_sigmoid_routing_keeps_to_the_best_groups_and_the_bias_only_selects():
    torch.manual_seed(0)
    logits = torch.randn(64, 8)
    bias = torch.randn(8) * 0.5
    chosen, weights = route(logits, LLADA2_SPEC, bias)
    scores = logits.sigmoid()
    choice = scores + bias
    group_best = choice.view(64, 4, 2).topk(2, dim=-1).values.sum(-1)  # [N, G]
    allowed = group_best.topk(2, dim=-1).indices  # the two best groups per token
    for n in range(64):
        groups = set((chosen[n] // 2).tolist())
        assert groups <= set(allowed[n].tolist())  # never an expert of a losing group
        candidates = [e for e in range(8) if e // 2 in allowed[n].tolist()]
        best = sorted(candidates, key=lambda e: -choice[n, e].item())[:2]
        assert chosen[n].tolist() == best  # chosen by score + bias, best first
        expected = scores[n, chosen[n]] / scores[n, chosen[n]].sum() * 2.5  # weighted by the plain scores
        torch.testing.assert_close(weights[n], expected)
    without_bias, _ = route(logits, LLADA2_SPEC, None)
    assert not torch.equal(without_bias, chosen)  # the bias did change some selections


def test_softmax_routing_equals_transformers_qwen3_moe_router():
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    config = Qwen3MoeConfig(hidden_size=32, num_experts=16, num_experts_per_tok=4, norm_topk_prob=True)
    router = Qwen3MoeTopKRouter(config)
    torch.nn.init.normal_(router.weight)
    x = torch.randn(40, 32)
    _, ref_weights, ref_chosen = router(x)
    spec = MoESpec(n_experts=16, top_k=4, expert_hidden=8, scoring="softmax", norm_topk_prob=True)
    chosen, weights = route(F.linear(x, router.weight), spec, None)
    assert torch.equal(chosen, ref_chosen)
    torch.testing.assert_close(weights, ref_weights)


@pytest.mark.parametrize("grouped", [True, False])
def test_experts_run_grouped_equal_each_token_through_its_experts(grouped):
    torch.manual_seed(1)
    gate_up, down = torch.randn(8, 32, 24) / 5, torch.randn(8, 24, 16) / 4  # [E, 2F, D], [E, D, F]
    x = torch.randn(30, 24)
    chosen = torch.stack([torch.randperm(8)[:3] for _ in range(30)])  # [N, 3]: experts 0..7, some idle
    chosen[:, 0] = 5  # one expert takes every token, others few or none
    weights = torch.rand(30, 3)
    out = run_experts(x, chosen, weights, gate_up, down, grouped=grouped)
    naive = torch.zeros_like(x)
    for n in range(30):
        for j in range(3):
            gate, up = (gate_up[chosen[n, j]] @ x[n]).chunk(2)
            naive[n] += weights[n, j] * (down[chosen[n, j]] @ (F.silu(gate) * up))
    torch.testing.assert_close(out, naive, atol=1e-5, rtol=1e-5)


# --- the LLaDA2 family against its reference -----------------------------------------------------


@pytest.mark.parametrize("mask", ["full", "block_causal_4"])
def test_llada2_logits_and_expert_choices_equal_the_reference(llada2, mask):
    den = load_denoiser(llada2["2.1"])
    ids = torch.tensor([GOLDEN["ids"]])
    attend = None
    if mask != "full":
        positions = torch.arange(ids.shape[1])
        attend = Attend(mask=block_causal_mask(positions, ids.shape[1], 4))
    logits, experts = _recorded_logits(den.model, ids, attend)
    reference = torch.tensor(GOLDEN[mask]["logits"])
    assert (logits - reference).abs().max().item() < 1e-4
    assert experts == GOLDEN[mask]["experts"]  # every token, every MoE layer, in the router's order


def test_llada2_release_layouts_load_alike(llada2):
    """LLaDA2.0-mini's config.json leaves use_qk_norm unstated (the configuration class defaults
    it to true); LLaDA2.1 states it. Same weights, same logits."""
    ids = torch.tensor([GOLDEN["ids"]])
    a, _ = _recorded_logits(load_denoiser(llada2["2.0"]).model, ids)
    b, _ = _recorded_logits(load_denoiser(llada2["2.1"]).model, ids)
    torch.testing.assert_close(a, b)


def test_llada2_special_ids_and_experts_packed_once(llada2):
    den = load_denoiser(llada2["2.1"])
    tok = den.tokenizer
    assert den.spec.mask_id == tok.token_id("<|mask|>")
    assert den.spec.eos_id == tok.token_id("<|role_end|>")  # instruct: the turn end ends an answer
    assert tok.token_id("<|endoftext|>") in den.spec.end_ids
    cfg = den.model.cfg
    assert cfg.moe is not None and cfg.rotary_dim == cfg.head_dim // 2 and cfg.qk_norm
    layer = den.model.layers[1].ffn
    assert isinstance(den.model.layers[0].ffn, torch.nn.Module) and not isinstance(den.model.layers[0].ffn, MoEFeedForward)
    assert tuple(layer.gate_up.shape) == (8, 64, 64) and tuple(layer.down.shape) == (8, 64, 32)  # [E, out, in]
    assert layer.gate_up.is_contiguous() and layer.down.is_contiguous()
    # expert j's gate rows then up rows, exactly the release's tensors
    state = {}
    for file in sorted(llada2["2.1"].glob("*.safetensors")):
        state.update(load_file(str(file)))
    torch.testing.assert_close(layer.gate_up[3, :32], state["model.layers.1.mlp.experts.3.gate_proj.weight"])
    torch.testing.assert_close(layer.gate_up[3, 32:], state["model.layers.1.mlp.experts.3.up_proj.weight"])
    torch.testing.assert_close(layer.down[5], state["model.layers.1.mlp.experts.5.down_proj.weight"])
    torch.testing.assert_close(layer.expert_bias, state["model.layers.1.mlp.gate.expert_bias"])


@pytest.mark.parametrize("change, message", [
    ({"norm_head": True}, "norm_head"),
    ({"num_experts": None}, "num_experts"),
    ({"score_function": "softmax"}, "score_function"),
])
def test_llada2_configs_it_cannot_run_are_one_line(tmp_path, change, message):
    ckpt = write_llada2(tmp_path / "m", config_overrides=change)
    with pytest.raises(ModelError, match=message) as info:
        load_denoiser(ckpt)
    assert "\n" not in str(info.value)


def test_llada2_missing_expert_tensor_is_one_line(tmp_path):
    ckpt = write_llada2(tmp_path / "m", shards=1)
    file = next(ckpt.glob("*.safetensors"))
    state = load_file(str(file))
    del state["model.layers.2.mlp.experts.6.up_proj.weight"]
    save_file(state, str(file))
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    del index["weight_map"]["model.layers.2.mlp.experts.6.up_proj.weight"]
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelError, match="experts.6.up_proj"):
        load_denoiser(ckpt)


# --- derived tensors -------------------------------------------------------------------------------


def test_derived_rows_served_in_chunks_equal_the_whole(tmp_path):
    """The streaming view (a few experts per read) and the whole-tensor build give the same tensors."""
    gen = torch.Generator().manual_seed(3)
    tensors = {f"e.{j}.{p}": torch.randn(6, 10, generator=gen) for j in range(5) for p in ("g", "u")}
    tensors["qkv"] = torch.randn(12, 10, generator=gen)
    tensors["bias"] = torch.randn(12, generator=gen)
    save_file(tensors, str(tmp_path / "w.safetensors"))
    derived = {
        "gate_up": Derived(tuple((f"e.{j}.{p}", 0, 6) for j in range(5) for p in ("g", "u")), (5, 12, 10)),
        "k": Derived((("qkv", 4, 8),), (4, 10)),
        "kb": Derived((("bias", 4, 8),), (4,)),
    }
    whole = derive_tensors(dict(tensors), derived)
    with Shards([tmp_path / "w.safetensors"], chunk_bytes=2 * 12 * 10 * 4) as shards:  # two experts per read
        view = DerivedShards(shards, derived)
        assert set(view.shapes()) == {"gate_up", "k", "kb"}  # the parts are consumed
        for name in derived:
            parts = [rows.clone() for _, _, rows in view.chunks(name)]
            torch.testing.assert_close(torch.cat(parts), whole[name])
    assert "e.0.g" not in whole and "qkv" not in whole  # consumed tensors are dropped
    with pytest.raises(ModelError, match="qkv"):
        derived_shapes({"qkv": (7, 10)}, {"k": Derived((("qkv", 4, 8),), (4, 10))})


# --- SDAR-30B-A3B against transformers' Qwen3-MoE -------------------------------------------------


def _qwen3_moe_reference(ckpt: Path):
    """transformers' Qwen3MoeForCausalLM with the checkpoint's weights (experts stacked here into
    transformers' own [E, 2F, D] / [E, D, F] layout), float32, SDPA."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    raw = json.loads((ckpt / "config.json").read_text())
    keep = {k: v for k, v in raw.items() if k not in ("model_type", "auto_map", "architectures", "attn_implementation")}
    config = Qwen3MoeConfig(**keep)
    config._attn_implementation = "sdpa"
    model = Qwen3MoeForCausalLM(config).float().eval()
    state = {}
    for file in sorted(ckpt.glob("*.safetensors")):
        state.update(load_file(str(file)))
    E = raw["num_experts"]
    for i in range(raw["num_hidden_layers"]):
        p = f"model.layers.{i}.mlp.experts."
        state[p + "gate_up_proj"] = torch.stack([torch.cat([state.pop(f"{p}{j}.gate_proj.weight"), state.pop(f"{p}{j}.up_proj.weight")])
                                                 for j in range(E)])
        state[p + "down_proj"] = torch.stack([state.pop(f"{p}{j}.down_proj.weight") for j in range(E)])
    model.load_state_dict(state, strict=True)
    return model


def test_sdar_moe_logits_and_expert_choices_equal_transformers_qwen3_moe_block_causal(tmp_path):
    from moe_checkpoints import write_sdar_moe

    ckpt = write_sdar_moe(tmp_path / "sdar-moe")
    den = load_denoiser(ckpt)
    assert den.spec.mask_id == den.tokenizer.token_id("<|MASK|>")
    reference = _qwen3_moe_reference(ckpt)
    ids = torch.randint(0, den.tokenizer.vocab_size, (1, 11), generator=torch.Generator().manual_seed(5))
    positions = torch.arange(11)
    mask = block_causal_mask(positions, 11, 4)  # [S, K]: blocks of 4, causal across them
    chosen = []
    hooks = [layer.mlp.gate.register_forward_hook(lambda m, i, out: chosen.append(out[2].tolist())) for layer in reference.model.layers]
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask[None, None]).logits[0]
    for hook in hooks:
        hook.remove()
    logits, experts = _recorded_logits(den.model, ids, Attend(mask=mask))
    assert (logits - expected).abs().max().item() < 1e-4
    assert experts == chosen


# --- quantized experts -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_quantize_reaches_the_experts(tmp_path, kind):
    """--quantize int8 / int4 quantizes every expert as it is read (core/models/assemble.py): no float
    expert tensor is left, the experts' bytes shrink to the quantized width, and the logits stay
    close to the float model's. int4's kernels need in_features a multiple of 128: a wider shape."""
    from sharpen.core.models.moe import QuantizedExperts
    from sharpen.core.models.quantize import Int4Linear, Int8Linear

    shape = dict(d=128, head_dim=32, expert_hidden=128, dense_hidden=256) if kind == "int4" else {}
    ckpt = write_llada2(tmp_path / "m", version="2.1", head_scale=3.0, **shape)
    float_model = load_denoiser(ckpt).model
    quant_model = load_denoiser(ckpt, quantize=kind).model
    layer = quant_model.layers[1].ffn
    assert isinstance(layer.quantized, QuantizedExperts) and not hasattr(layer, "gate_up")
    linear = Int8Linear if kind == "int8" else Int4Linear
    assert all(isinstance(q, linear) for q in (*layer.quantized.gate_up, *layer.quantized.down))
    expert_bytes = sum(p.numel() * p.element_size() for p in layer.quantized.parameters())
    float_bytes = sum(p.numel() * p.element_size() for p in (float_model.layers[1].ffn.gate_up, float_model.layers[1].ffn.down))
    assert expert_bytes < float_bytes * (0.3 if kind == "int8" else 0.2)  # float32 -> 1 byte (+ scales) or 4 bits
    # The same tokens through the same experts: the quantized layer's output is the float one's
    # within the width's error (int4 on random Gaussian weights: ~10% per product, ~17% through a SwiGLU).
    from sharpen.core.models.moe import run_experts, run_quantized_experts

    dim = layer.router.shape[1]
    x = torch.randn(24, dim, generator=torch.Generator().manual_seed(4))
    chosen = torch.randint(0, 8, (24, 2), generator=torch.Generator().manual_seed(5))
    weights = torch.rand(24, 2, generator=torch.Generator().manual_seed(6))
    exact = run_experts(x, chosen, weights, float_model.layers[1].ffn.gate_up, float_model.layers[1].ffn.down)
    got = run_quantized_experts(x, chosen, weights, layer.quantized)
    error = ((got - exact).norm() / exact.norm()).item()
    assert 0 < error < (0.02 if kind == "int8" else 0.25)  # a mixed-up expert gives ~1.4


# --- sizes: total for memory, active for speed -------------------------------------------------------


def test_moe_releases_are_sized_by_total_and_active_parameters():
    from sharpen.core.models.memory_fit import KNOWN_RELEASES, Machine, active_parameters, footprint, parameter_split, verdict

    def billions(cfg):
        return sum(parameter_split(cfg)) / 1e9, active_parameters(cfg) / 1e9

    # The published sizes: LLaDA2.0-mini 16B with 1.4B active, -flash 100B / 6.1B, SDAR-30B-A3B 30.5B / 3.3B.
    for name, (total, active) in {"LLaDA2.0-mini": (16.3, 1.43), "LLaDA2.1-mini": (16.3, 1.43), "LLaDA2.0-flash": (102.9, 6.15),
                                  "SDAR-30B-A3B-Chat": (30.5, 3.35)}.items():
        got = billions(KNOWN_RELEASES[name][1])
        assert abs(got[0] - total) < 0.1 and abs(got[1] - active) < 0.02, (name, got)
    mini, flash = KNOWN_RELEASES["LLaDA2.0-mini"][1], KNOWN_RELEASES["LLaDA2.0-flash"][1]
    gb = 10**9
    assert verdict(footprint(mini, "int8").total, 24 * gb) == "fits"  # int8 on a 24 GB card
    assert verdict(footprint(mini, "bfloat16").total, 24 * gb) == "does not fit"
    assert verdict(footprint(mini, "bfloat16").total, 48 * gb) == "fits"  # bf16 on 48 GB
    assert verdict(footprint(flash, "int4").total, 80 * gb) == "fits"  # flash: int4 on one 80 GB card
    assert verdict(footprint(flash, "int8").total, 80 * gb) == "does not fit"
    from sharpen.app.subcommands import fit_report

    report = fit_report([("LLaDA2.0-mini", mini)], Machine(gpus=(("GPU", 24 * gb, 24 * gb),), ram_available=64 * gb))
    assert "LLaDA2.0-mini (16.3B, 1.4B active)" in report and "--quantize int8" in report


# --- load peak --------------------------------------------------------------------------------------

# A LLaDA2 layout at about 50M parameters (200 MB in float32), experts most of it as in the releases.
PEAK_SHAPE = dict(d=512, layers=4, heads=8, kv=2, head_dim=64, dense_hidden=1024, expert_hidden=256, experts=32, top_k=4,
                  n_group=8, topk_group=4)


@pytest.fixture(scope="module")
def peak_checkpoint(tmp_path_factory):
    """Written once for the three loads below (200 MB of random weights each time it is written)."""
    return write_llada2(tmp_path_factory.mktemp("peak") / "llada2-50m", **PEAK_SHAPE)


@pytest.mark.parametrize("dtype,quantize", [("float32", None), ("bfloat16", None), ("float32", "int8")])
def test_llada2_load_peak_stays_near_the_loaded_size(peak_checkpoint, dtype, quantize):
    """Measured in a fresh process (bench/load_peak.py): the experts are packed [E, out, in] as
    they are read, a few experts at a time, so a load peaks near the model it builds, never at
    the checkpoint plus the model."""
    from load_peak import float32_bytes, measure

    ckpt = peak_checkpoint
    m = measure(ckpt, dtype, quantize)
    assert m["reset"], "the kernel did not let the high-water mark be reset"
    if quantize is None:
        assert m["peak"] <= 1.25 * m["weights"], (m["peak"] / m["weights"], m)
    else:
        assert m["weights"] < 0.4 * float32_bytes(ckpt)
        assert m["peak"] <= 0.5 * float32_bytes(ckpt), (m["peak"] / float32_bytes(ckpt), m)


def test_llada2_with_the_release_ids_and_vocabulary(tmp_path):
    """The release's special ids (mask 156895, <|endoftext|> 156892) in a 157,184-row embedding,
    with a tiny vocabulary below them: the ids come from the tokenizer, the end tokens stay
    writable, the holes between the vocabulary and the specials are never proposed."""
    from sharpen.core.engine import apply_edit
    from sharpen.core.spans import Span

    ckpt = write_llada2(tmp_path / "m", version="2.1", head_scale=3.0, release_ids=True, d=32, head_dim=8, heads=4, kv=2,
                        dense_hidden=64, expert_hidden=16)
    den = load_denoiser(ckpt)
    assert (den.spec.mask_id, den.model.cfg.vocab_size, den.tokenizer.vocab_size) == (156895, 157184, 156897)
    assert 156892 in den.spec.end_ids and den.spec.eos_id == 156896  # <|endoftext|>; <|role_end|> ends a chat turn
    banned = set(den.banned_ids.tolist())
    assert 156895 in banned and 156892 not in banned and 156896 not in banned and {306, 100000, 157000} <= banned
    start = TEXT.index("return")
    result = apply_edit(den, TEXT, [Span(start, start + len("return a + b"))])
    assert result.text.startswith(TEXT[:start]) and result.text.endswith(TEXT[start + len("return a + b"):])
    assert result.spans[0].commits and result.spans[0].edits is not None


def test_sdar_moe_int8_experts_of_an_odd_width_run(tmp_path):
    """SDAR-MoE's tiny experts are 24 wide: torch's bfloat16 int8 CPU kernel crashes the process
    when K is not a multiple of 16, so such layers take the float32 path (core/models/quantize.py)."""
    from moe_checkpoints import write_sdar_moe

    den = load_denoiser(write_sdar_moe(tmp_path / "sdar-moe"), quantize="int8")
    assert den.model.layers[0].ffn.quantized.down[0].in_features == 24
    with torch.inference_mode():
        logits = den.model(torch.randint(0, 300, (1, 9), generator=torch.Generator().manual_seed(3)))
    assert torch.isfinite(logits).all()
