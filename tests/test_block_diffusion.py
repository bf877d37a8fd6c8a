"""Model kinds and their loops: each kind is declared, holds to its protocol and yields public frames;
the backbone's attention policy (block-causal masks, read-only caches) is what block diffusion needs.
"""
from __future__ import annotations

import json

import pytest
import torch

from sharpen.core import families
from sharpen.core.denoiser import LOOPS, ModelSpec
from sharpen.core.errors import ModelError
from sharpen.core.loops import LOOP_PROTOCOLS, SLOT_STATES, run_loop
from sharpen.core.loops.frame import EDITED, MASKED, SHARP, Frame
from sharpen.core.model import Attend, ModelConfig, Transformer, block_causal_mask


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    pytest.importorskip("transformers.models.diffusion_gemma")
    from gemma_checkpoint import write_diffusion_gemma
    from sharpen.core.gemma import load_gemma

    return load_gemma(write_diffusion_gemma(tmp_path_factory.mktemp("gemma") / "tiny", canvas_length=32))


def kind_models(tiny_denoiser, gemma) -> dict[str, object]:
    return {"masked": tiny_denoiser, "random-token": gemma}


def test_every_model_kind_holds_to_its_protocol_and_its_loop_yields_public_frames(tiny_denoiser, gemma):
    from sharpen.core.canvas import build_canvas
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    models = kind_models(tiny_denoiser, gemma)
    assert set(LOOP_PROTOCOLS) <= set(LOOPS) and set(models) == set(LOOP_PROTOCOLS)
    text = "def f(x):\n    return x\n"
    for kind, model in models.items():
        assert model.spec.loop == kind  # declared, not probed
        assert isinstance(model, LOOP_PROTOCOLS[kind]), kind
        other = [k for k in LOOP_PROTOCOLS if k != kind and not isinstance(model, LOOP_PROTOCOLS[k])]
        assert other, f"the {kind} model would satisfy every protocol: the protocols do not tell kinds apart"
        canvas = build_canvas(text, [Span(10, 10, max_tokens=4)], model.tokenizer, model.spec.mask_id, 64, model.max_len)
        frames = list(run_loop(model, canvas, Sampling(steps=4, seed=1)))
        assert frames[-1].done and not any(f.done for f in frames[:-1])
        for frame in frames:
            assert frame.loop == kind
            for span in frame.spans:
                assert set(span.states) <= set(SLOT_STATES)
                assert [t is None for t in span.tokens] == [s in ("masked", "noise") for s in span.states]
            assert frame.masked == sum(s in ("masked", "noise") for span in frame.spans for s in span.states)
        assert frames[0].masked == 4 and frames[-1].masked == 0
        assert frames[0].unsharp_name == ("noise" if kind == "random-token" else "masked")


def test_a_kind_is_declared_once_and_an_unknown_one_is_refused():
    with pytest.raises(ValueError, match="unknown loop kind 'diffusion'; known: masked, random-token, block-causal"):
        ModelSpec(family="x", mask_id=1, pad_id=0, eos_id=2, loop="diffusion")


def test_routing_from_config_json_is_decided_in_core():
    assert families.route({"model_type": "diffusion_gemma"}) == families.Route("transformers", "random-token", "diffusion_gemma")
    assert families.route({"model_type": "llada"}) == families.Route("backbone", "masked", "llada")
    with pytest.raises(ModelError, match="pass --trust-remote-code if you trust it"):
        families.route({"model_type": "mystery", "auto_map": {"AutoModel": "modeling_mystery.Mystery"}})
    assert families.route({"model_type": "mystery"}, trust_remote_code=True) == families.Route("remote", "masked", "mystery")


def test_the_frontends_read_no_private_frame_field():
    import pathlib
    import re

    app = pathlib.Path(__file__).resolve().parents[1] / "app"
    private = re.compile(r"\bframe\._|\.frame\._")
    hits = [f"{p}:{n}" for p in app.rglob("*.py") for n, line in enumerate(p.read_text().splitlines(), 1) if private.search(line)]
    assert not hits, hits


def test_a_frame_can_show_a_committed_token_rewritten_and_the_preview_draws_it_as_an_edit():
    from sharpen.app.tui.preview import EDITED as EDITED_KIND
    from sharpen.app.tui.preview import span_pieces

    ids = torch.tensor([5, 6, 9, 7])  # [T] position 2 was 8, the loop wrote 9 over it
    state = torch.tensor([SHARP, SHARP, EDITED, MASKED], dtype=torch.uint8)
    frame = Frame(3, 8, 0.1, False, "block-causal", ids, torch.full((4,), 0.95), ids, state, (range(0, 4),),
                  _replaced=torch.tensor([-1, -1, 8, -1]))
    span = frame.spans[0]
    assert span.states == ("sharp", "sharp", "edited", "masked") and span.tokens == (5, 6, 9, None)
    assert span.replaced == (None, None, 8, None) and frame.masked == 1
    pieces = span_pieces(span.tokens, span.confidence, lambda toks: [f"<{t}>" for t in toks], set(), span.noise, span.states)
    assert [(p.text, p.kind) for p in pieces] == [("<5><6>", "sure"), ("<9>", EDITED_KIND), ("░", "masked")]


def tiny_backbone(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=64))
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return model.eval()


@pytest.mark.parametrize("packed", [False, True])
def test_prefill_then_a_read_only_block_equals_one_block_causal_pass(packed):
    """Block diffusion's cache contract on the backbone: prefilling the finished blocks with a
    block-causal mask, then running the open block against the read-only cache, gives the logits
    of one pass over the whole canvas with the block-causal mask; the cache is not written."""
    model = tiny_backbone()
    if packed:
        model.pack()
    block, T = 4, 12
    ids = torch.randint(0, 64, (2, T))  # [B, T]
    positions = torch.arange(T)
    with torch.no_grad():
        whole = model(ids, attend=Attend(mask=block_causal_mask(positions, T, block)))  # [B, T, V]
        cache = model.new_cache(2, T)
        prefix = torch.arange(8)
        model(ids[:, :8], prefix, cache, Attend(mask=block_causal_mask(prefix, T, block)))
        before = [k.clone() for k in cache.k]
        open_block = torch.arange(8, 12)
        step = model(ids[:, 8:], open_block, cache, Attend(keys=8, write=False))  # [B, 4, V]
        assert all(torch.equal(a, b) for a, b in zip(before, cache.k))  # read-only
        commit = model(ids[:, 8:], open_block, cache, Attend(keys=12))  # the committing pass writes it
        assert not torch.equal(before[0][:, :, 8:], cache.k[0][:, :, 8:])
    torch.testing.assert_close(step, whole[:, 8:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(commit, whole[:, 8:], rtol=1e-5, atol=1e-5)
    bidirectional = model(ids)
    assert not torch.allclose(bidirectional[:, :8], whole[:, :8], atol=1e-3)  # the mask is doing something


def test_block_causal_mask_is_bidirectional_inside_a_block_and_causal_across():
    mask = block_causal_mask(torch.arange(6), 6, 2)
    assert mask.tolist() == [
        [True, True, False, False, False, False],
        [True, True, False, False, False, False],
        [True, True, True, True, False, False],
        [True, True, True, True, False, False],
        [True, True, True, True, True, True],
        [True, True, True, True, True, True],
    ]


def test_checkpoint_configs_route_by_kind(tmp_path):
    """config.json alone decides the loader: a written LLaDA checkpoint goes to the backbone as masked."""
    from family_checkpoints import write_llada

    path = write_llada(tmp_path / "llada")
    config = json.loads((path / "config.json").read_text())
    assert families.route(config).loader == "backbone" and families.route(config).loop == "masked"
