"""The packed inference layout (Transformer.pack) computes exactly what the training layout does."""
import copy

import pytest
import torch

from sharpen.core.models.model import ModelConfig, Transformer


def _pair(**overrides):
    torch.manual_seed(0)
    cfg = ModelConfig(**{"vocab_size": 300, "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 64, **overrides})
    plain = Transformer(cfg).eval()
    for p in plain.parameters():  # biases start at zero: make them count
        torch.nn.init.normal_(p, std=0.1)
    return plain, copy.deepcopy(plain).pack()


@pytest.mark.parametrize("overrides", [{}, {"qkv_bias": True}, {"n_kv_heads": 4}, {"tie_embeddings": True}])
def test_packed_matches_plain_full_and_cached(overrides):
    plain, packed = _pair(**overrides)
    x = torch.randint(0, 300, (2, 40))
    with torch.inference_mode():
        torch.testing.assert_close(packed(x), plain(x), rtol=1e-5, atol=1e-5)
        cache_a, cache_b = plain.new_cache(2, 40), packed.new_cache(2, 40)
        plain.hidden(x, None, cache_a), packed.hidden(x, None, cache_b)
        chunk = torch.tensor([3, 4, 5, 20])
        torch.testing.assert_close(packed.hidden(x[:, chunk], chunk, cache_b), plain.hidden(x[:, chunk], chunk, cache_a), rtol=1e-5, atol=1e-5)


def test_packing_keeps_names_shapes_and_memory():
    plain, packed = _pair(qkv_bias=True)
    before, after = plain.state_dict(), packed.state_dict()
    assert list(before) == list(after)
    for name in before:
        torch.testing.assert_close(after[name], before[name])
    # The per-projection weights are views into the packed matrices, not copies.
    attn = packed.layers[0].attn
    storage = attn.packed.qkv.untyped_storage().data_ptr()
    assert all(w.untyped_storage().data_ptr() == storage for w in (attn.wq.weight, attn.wk.weight, attn.wv.weight))
    assert sum(p.numel() for p in packed.parameters()) == sum(p.numel() for p in plain.parameters())


def test_tied_head_on_cpu_packs_into_the_one_shared_matrix():
    plain, packed = _pair(tie_embeddings=True)
    assert packed.packed_output is not None and packed.embed.weight is packed.output.weight
    assert packed.embed.weight.untyped_storage().data_ptr() == packed.packed_output.untyped_storage().data_ptr()
    assert sum(p.numel() for p in packed.parameters()) == sum(p.numel() for p in plain.parameters())  # no copy


def test_loaded_models_are_packed(tiny_model_dir):
    from sharpen.core.models.loading import load_denoiser

    model = load_denoiser(tiny_model_dir).model
    assert all(block.attn.packed is not None and block.ffn.packed is not None for block in model.layers)


# -- the streaming loader builds the same model the read-everything-then-pack path built ----------

def _read_then_pack(path, dtype):
    """The loader before it streamed (the oracle): every tensor read whole, assigned, then packed."""
    from safetensors.torch import load_file

    from sharpen.core.models.loading import model_config, read_config, source_names, weight_files
    from sharpen.core.models.model import on_meta_device

    family, cfg = model_config(path, read_config(path))
    tensors = {}
    for file in weight_files(path):
        tensors.update(load_file(file))
    with on_meta_device():
        model = Transformer(cfg)
    source = source_names(family, cfg, {k: tuple(v.shape) for k, v in tensors.items()}, model)
    model.load_state_dict({dst: tensors[src].to(dtype) for dst, src in source.items()}, strict=not cfg.tie_embeddings, assign=True)
    if cfg.tie_embeddings:
        model.output.weight = model.embed.weight
    return model.pack()


def _fused(model):
    out = {}
    for i, block in enumerate(model.layers):
        a, f = block.attn.packed, block.ffn.packed
        out.update({f"{i}.qkv": a.qkv, f"{i}.wo": a.wo, f"{i}.gate_up": f.gate_up, f"{i}.down": f.down})
        if a.bias is not None:
            out[f"{i}.bias"] = a.bias
    if model.packed_output is not None:
        out["output"] = model.packed_output
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("family", ["sharpen", "sharpen-tied", "dream", "llada-tied-bias", "open-dcoder"])
def test_streamed_load_is_bit_identical_to_read_then_pack(family, dtype, tmp_path):
    from checkpoints import write_tiny_sharpen
    from family_checkpoints import write_dream, write_llada, write_open_dcoder

    from sharpen.core.models.loading import load_denoiser

    path = {
        "sharpen": lambda p: write_tiny_sharpen(p),
        "sharpen-tied": lambda p: write_tiny_sharpen(p, tie_embeddings=True),
        "dream": lambda p: write_dream(p),  # float32 on disk, 2 shards, q/k/v biases
        "llada-tied-bias": lambda p: write_llada(p, tie=True, qkv_bias=True, dtype=torch.float32),
        "open-dcoder": lambda p: write_open_dcoder(p),  # bfloat16 on disk, tied
    }[family](tmp_path / family)
    old, new = _read_then_pack(path, dtype), load_denoiser(path, dtype=dtype).model
    before, after = old.state_dict(), new.state_dict()
    assert list(before) == list(after)
    for name in before:
        assert after[name].dtype == dtype and torch.equal(after[name], before[name]), name
        assert after[name].stride() == before[name].stride(), name  # the same views into the same layout
    old_fused, new_fused = _fused(old), _fused(new)
    assert list(old_fused) == list(new_fused)
    for name in old_fused:
        assert torch.equal(new_fused[name], old_fused[name]) and new_fused[name].is_contiguous(), name
    attn = new.layers[0].attn  # the projections are views into the fused matrix, as pack() makes them
    assert all(w.untyped_storage().data_ptr() == attn.packed.qkv.untyped_storage().data_ptr() for w in (attn.wq.weight, attn.wk.weight, attn.wv.weight))
    if new.cfg.tie_embeddings:
        assert new.embed.weight is new.output.weight
    x = torch.randint(0, new.cfg.vocab_size, (1, 12))
    with torch.inference_mode():
        assert torch.equal(new(x), old(x))
