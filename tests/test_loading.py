"""Checkpoint directories load through the one real path, and bad ones fail clearly."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from checkpoints import write_tiny_sharpen
from sharpen.core.errors import ModelError
from sharpen.core.loading import load_denoiser, save_checkpoint


def test_round_trip_keeps_weights_and_special_ids(tiny_model_dir, tiny_denoiser, tmp_path):
    again = load_denoiser(save_checkpoint(tiny_denoiser.model, tiny_model_dir / "tokenizer.json", tmp_path / "copy"))
    ids = torch.randint(0, 300, (2, 17))
    assert torch.equal(tiny_denoiser.logits(ids), again.logits(ids))
    spec = tiny_denoiser.spec
    assert (spec.family, spec.mask_id, spec.pad_id, spec.eos_id, spec.shift_logits) == ("sharpen", 0, 1, 2, False)
    assert tiny_denoiser.logits(ids).shape == (2, 17, tiny_denoiser.tokenizer.vocab_size)


def test_tied_embeddings_checkpoint_loads(tmp_path):
    den = load_denoiser(write_tiny_sharpen(tmp_path / "tied", tie_embeddings=True))
    assert den.model.output.weight is den.model.embed.weight


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_missing_directory_and_config(tmp_path, tiny_model_dir):
    with pytest.raises(ModelError, match="not found"):
        load_denoiser(tmp_path / "nowhere")
    broken = _copy(tiny_model_dir, tmp_path / "noconfig")
    (broken / "config.json").unlink()
    with pytest.raises(ModelError, match="no config.json"):
        load_denoiser(broken)


def test_truncated_weights(tmp_path, tiny_model_dir):
    broken = _copy(tiny_model_dir, tmp_path / "trunc")
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelError, match="corrupt or truncated"):
        load_denoiser(broken)


def test_unknown_family_lists_the_known_ones(tmp_path, tiny_model_dir):
    broken = _copy(tiny_model_dir, tmp_path / "unknown")
    config = json.loads((broken / "config.json").read_text())
    config["model_type"] = "gpt-mystery"
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="unknown model family.*known: .*sharpen"):
        load_denoiser(broken)


def test_wrong_shapes_and_missing_tensors(tmp_path, tiny_model_dir):
    broken = _copy(tiny_model_dir, tmp_path / "shape")
    config = json.loads((broken / "config.json").read_text())
    config["n_layers"] = 3
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="says 3 layers, but the weights hold 2"):  # refused before anything is built
        load_denoiser(broken)
    weights = broken / "model.safetensors"
    state = load_file(weights)
    del state[next(k for k in state if k.startswith("layers.1.") and k.endswith("wq.weight"))]
    save_file(state, weights)
    config["n_layers"] = 2
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="missing .* tensors"):
        load_denoiser(broken)
    save_file(load_file(tiny_model_dir / "model.safetensors"), weights)
    config["n_layers"], config["ffn_hidden"] = 2, 64
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="shape"):
        load_denoiser(broken)


def test_mask_pad_collision_is_refused(tmp_path, tiny_model_dir):
    broken = _copy(tiny_model_dir, tmp_path / "collide")
    config = json.loads((broken / "config.json").read_text())
    config["pad_token_id"] = config.get("mask_token_id", 0)
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="collides"):
        load_denoiser(broken)


def test_sharded_index(tmp_path, tiny_model_dir):
    from safetensors.torch import load_file, save_file

    sharded = _copy(tiny_model_dir, tmp_path / "sharded")
    tensors = load_file(str(sharded / "model.safetensors"))
    (sharded / "model.safetensors").unlink()
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, keys in halves.items():
        save_file({k: tensors[k] for k in keys}, str(sharded / file))
    index = {"metadata": {}, "weight_map": {k: f for f, keys in halves.items() for k in keys}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    ids = torch.randint(0, 300, (1, 9))
    assert torch.equal(load_denoiser(sharded).logits(ids), load_denoiser(tiny_model_dir).logits(ids))
    (sharded / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ModelError, match="missing files"):
        load_denoiser(sharded)


def test_weights_move_to_the_target_one_tensor_at_a_time(tiny_model_dir, monkeypatch):
    """Each tensor is converted as soon as it is read: host memory never holds the whole model."""
    import weakref

    import sharpen.core.loading as loading

    real_open = loading.safe_open
    read: list = []  # weak references to every tensor as read from the file
    alive_at_read: list[int] = []  # how many earlier raw tensors were still alive at each read

    class Watched:
        def __init__(self, opened):
            self.opened = opened

        def __enter__(self):
            self.handle = self.opened.__enter__()
            return self

        def __exit__(self, *exc):
            return self.opened.__exit__(*exc)

        def keys(self):
            return self.handle.keys()

        def get_tensor(self, key):
            tensor = self.handle.get_tensor(key)
            alive_at_read.append(sum(ref() is not None for ref in read))
            read.append(weakref.ref(tensor))
            return tensor

    monkeypatch.setattr(loading, "safe_open", lambda *a, **k: Watched(real_open(*a, **k)))
    den = load_denoiser(tiny_model_dir, dtype=torch.bfloat16)
    assert den.model.embed.weight.dtype == torch.bfloat16
    assert len(read) > 3 and set(alive_at_read) == {0}  # each raw tensor was gone before the next was read


def test_loading_skips_weight_init_and_never_imports_dynamo(tiny_model_dir):
    # Meta-device weight init imports torch._dynamo (2.5 s of a headless edit); the loader
    # builds without it, and a fresh process that only loads and denoises never pays for it.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from sharpen.core.loading import load_denoiser\n"
        "from sharpen.core.engine import apply_edit\n"
        "from sharpen.core.spans import Span\n"
        f"den = load_denoiser({str(tiny_model_dir)!r})\n"
        "apply_edit(den, 'def f():\\n    return 1\\n', [Span(13, 21, max_tokens=4)])\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_on_meta_device_restores_weight_init_even_after_an_error():
    from torch import nn

    from sharpen.core.model import on_meta_device

    before = nn.Linear.reset_parameters, nn.Embedding.reset_parameters
    with pytest.raises(RuntimeError):
        with on_meta_device():
            assert nn.Linear(4, 4).weight.is_meta
            raise RuntimeError("boom")
    assert (nn.Linear.reset_parameters, nn.Embedding.reset_parameters) == before
    layer = nn.Linear(4, 4)
    assert not layer.weight.is_meta and layer.weight.abs().sum() > 0  # initialised again


def test_bfloat16_model_runs_the_cached_path_like_float32(tiny_model_dir):
    # The GPU path runs bf16: its norm, rotary and cache code must hold up in that dtype too.
    from sharpen.core.engine import apply_edit
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    full = load_denoiser(tiny_model_dir)
    half = load_denoiser(tiny_model_dir, dtype=torch.bfloat16)
    x = torch.randint(3, 200, (1, 40))
    want = torch.arange(10, 18)
    cache = half.new_cache(1, 40)
    half.logits(x, cache=cache)
    cached = half.logits(x, want=want, run=want, cache=cache)
    assert cached.dtype == torch.float32
    torch.testing.assert_close(cached, half.logits(x, want=want), atol=0.05, rtol=0.05)
    torch.testing.assert_close(cached, full.logits(x, want=want), atol=0.15, rtol=0.1)
    text = "def add(a, b):\n    return a + b\n"
    for settings in (Sampling(), Sampling(cache="none", schedule="fixed")):
        result = apply_edit(half, text, [Span(19, 31)], settings)
        assert result.text.startswith("def add(a, b):\n    ") and result.steps >= 1
