"""The packed inference layout (Transformer.pack) computes exactly what the training layout does."""
import copy

import pytest
import torch

from sharpen.core.model import ModelConfig, Transformer


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
    from sharpen.core.loading import load_denoiser

    model = load_denoiser(tiny_model_dir).model
    assert all(block.attn.packed is not None and block.ffn.packed is not None for block in model.layers)
