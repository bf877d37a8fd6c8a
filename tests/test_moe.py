"""Mixture-of-experts backbone (core/moe.py) and the LLaDA2 family (core/families/llada2.py).

The reference for LLaDA2 is its release's own modeling code, run once by
tests/golden/llada2_reference.py on the tiny checkpoint of tests/moe_checkpoints.py (golden:
tests/golden/llada2_tiny.json, naming the repository and commit): sharpen's logits within 1e-4
in float32 and the same experts for every token in every MoE layer. The Qwen3-MoE routing is
held to transformers' own router class.
"""
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from moe_checkpoints import write_llada2
from sharpen.core.derived import Derived, DerivedShards, derive_tensors, derived_shapes
from sharpen.core.errors import ModelError
from sharpen.core.loading import load_denoiser
from sharpen.core.model import Attend, block_causal_mask
from sharpen.core.moe import MoEFeedForward, MoESpec, route, run_experts
from sharpen.core.shards import Shards

GOLDEN = json.loads((Path(__file__).parent / "golden" / "llada2_tiny.json").read_text())
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
