"""Round three, checkpoints that lie (issue 29: F4, F5, F6, F7, F10, F15, F16, F17, F21).

Every broken checkpoint ends in exit 4 with one `sharpen: ` line, in bounded time, with the
user's file untouched; `sharpen models` and `doctor` list it as not usable, with why. The
checkpoints are the tiny ones of tests/checkpoints.py and tests/gemma_checkpoint.py, each
broken one way. Promises: docs/safety.md, "Checkpoints are untrusted input".
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sharpen.core.models import untrusted
from sharpen.core.errors import ModelError

ORIGINAL = b"def f(x):\n    return x + 1\n"


@pytest.fixture
def cli(tmp_path, capfd):
    """main() in this process on a fresh copy of ORIGINAL, bounded in time (a FIFO must not hang the
    suite): returns (exit code, the one stderr line) and checks the file and stdout are untouched."""
    from sharpen.app.cli import main

    path = tmp_path / "f.py"
    path.write_bytes(ORIGINAL)

    def run(model, *more, expect_untouched=True):
        capfd.readouterr()
        result = []
        worker = threading.Thread(target=lambda: result.append(main([str(path), "--apply-edit", "2:12-2:17", "--in-place",
                                                                      "--steps", "2", "--model", str(model), *more])), daemon=True)
        worker.start()
        worker.join(120)
        assert not worker.is_alive(), "sharpen hung"
        out, err = capfd.readouterr()
        if expect_untouched:
            assert out == "" and path.read_bytes() == ORIGINAL
        lines = err.splitlines()
        assert len(lines) <= 1 and all(line.startswith("sharpen: ") for line in lines), lines
        return result[0], (lines[0] if lines else "")

    run.path = path
    return run


def copy(source: Path, tmp_path: Path, name: str = "model") -> Path:
    model = tmp_path / name
    shutil.copytree(source, model, symlinks=True)
    return model


def edit_json(file: Path, change) -> None:
    data = json.loads(file.read_text())
    change(data)
    file.write_text(json.dumps(data))


def fifo(file: Path) -> None:
    file.unlink(missing_ok=True)
    os.mkfifo(file)


def to_dev_zero(file: Path) -> None:
    file.unlink(missing_ok=True)
    file.symlink_to("/dev/zero")


def sharded(tiny_model_dir: Path, tmp_path: Path, shard_name: str) -> Path:
    """The tiny checkpoint with a shard index naming `shard_name` for every tensor."""
    from safetensors import safe_open

    model = copy(tiny_model_dir, tmp_path)
    with safe_open(str(model / "model.safetensors"), "pt") as handle:
        names = list(handle.keys())
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {n: shard_name for n in names}}))
    return model


# -- F4: numbers that are not finite or out of range; F15/F16: ids of the wrong type ------------------


NATIVE_CONFIGS = [
    ("rope-theta-nan", lambda text: text.replace('"rope_theta": 10000.0', '"rope_theta": NaN'), "NaN is not a number JSON allows"),
    ("rope-theta-overflow", lambda text: text.replace('"rope_theta": 10000.0', '"rope_theta": 1e400'), "out of range"),
    ("norm-eps-negative", lambda text: text.replace('"norm_eps": 1e-05', '"norm_eps": -1.0'), "norm_eps=-1.0 must be a number between 0 and 1"),
    ("rope-theta-zero", lambda text: text.replace('"rope_theta": 10000.0', '"rope_theta": 0'), "rope_theta=0 must be a positive number"),
    ("nested-5000", lambda text: text.replace('"name"', '"deep": ' + "[" * 5000 + "]" * 5000 + ', "name"'), "nested too deeply"),
    ("mask-id-string", lambda text: text.replace('"name"', '"mask_token_id": "0", "name"'), "mask_token_id is '0', not a token id"),
    ("model-type-list", lambda text: text.replace('"model_type": "sharpen"', '"model_type": ["sharpen"]'), "model_type is ['sharpen'], not a name"),
    ("kv-heads-half", lambda text: text.replace('"n_kv_heads": 2', '"n_kv_heads": 0.5'), "n_kv_heads=0.5 must be a whole number"),
    ("pad-id-past-int64", lambda text: text.replace('"name"', '"pad_token_id": 10000000000000000000, "name"'), "pad token id 10000000000000000000 is outside"),
    ("ffn-hidden-string", lambda text: text.replace('"ffn_hidden": 192', '"ffn_hidden": "192"'), "ffn_hidden='192' must be a whole number"),
    ("rope-theta-null", lambda text: text.replace('"rope_theta": 10000.0', '"rope_theta": null'), "rope_theta=None must be a number"),
    ("moe-a-number", lambda text: text.replace('"name"', '"moe": 5, "name"'), "moe=5 must be a table"),
]


@pytest.mark.parametrize("how, change, message", NATIVE_CONFIGS, ids=[c[0] for c in NATIVE_CONFIGS])
def test_config_numbers_must_be_finite_and_in_range(cli, tiny_model_dir, tmp_path, how, change, message):
    model = copy(tiny_model_dir, tmp_path)
    config = model / "config.json"
    before = config.read_text()
    config.write_text(change(before))
    assert config.read_text() != before
    code, line = cli(model)
    assert code == 4 and message in line, line


def test_an_eos_list_as_hf_configs_write_it_loads(cli, tiny_model_dir, tmp_path):
    model = copy(tiny_model_dir, tmp_path)
    edit_json(model / "config.json", lambda c: c.update(eos_token_id=[2, 1]))
    code, line = cli(model, expect_untouched=False)
    assert code == 0 and line == "" and cli.path.read_bytes().startswith(b"def f(x):\n    return ")


def test_all_nan_weights_stop_at_the_first_step(cli, tiny_model_dir, tmp_path):
    """Weights a header cannot give away: the first non-finite step stops the run (exit 4), nothing written."""
    from safetensors.torch import load_file, save_file

    model = copy(tiny_model_dir, tmp_path)
    state = load_file(str(model / "model.safetensors"))
    save_file({k: v.fill_(float("nan")) for k, v in state.items()}, str(model / "model.safetensors"))
    code, line = cli(model)
    assert code == 4 and "not finite" in line, line


def test_a_header_that_lies_about_the_dtype_is_refused(cli, tiny_model_dir, tmp_path):
    """F32 bytes declared I32: same size, so only the dtype gives it away."""
    model = copy(tiny_model_dir, tmp_path)
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = data[8:8 + length].replace(b'"F32"', b'"I32"')
    weights.write_bytes(data[:8] + header + data[8 + length:])
    code, line = cli(model)
    assert code == 4 and "I32" in line, line


def test_tokenizer_ids_past_the_embedding_are_refused_at_load(cli, tiny_model_dir, tmp_path):
    model = copy(tiny_model_dir, tmp_path)
    extra = {"id": 400, "content": "zzzq", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": False}
    edit_json(model / "tokenizer.json", lambda t: t["added_tokens"].append(extra))
    code, line = cli(model)
    assert code == 4 and "more than the model's 375-row embedding" in line, line


# -- F17: shard names outside the checkpoint; F15: index values that are not names ------------------


@pytest.mark.parametrize("name", ["../elsewhere/model.safetensors", "/dev/zero", "../../../../etc/hostname", "/dev/urandom"])
def test_index_names_outside_the_checkpoint_are_refused(cli, tiny_model_dir, tmp_path, name):
    model = sharded(tiny_model_dir, tmp_path, name)
    if name.startswith("../elsewhere"):
        (tmp_path / "elsewhere").mkdir()
        shutil.copy(model / "model.safetensors", tmp_path / "elsewhere" / "model.safetensors")
    code, line = cli(model)
    assert code == 4 and "points outside the checkpoint directory" in line, line


def test_index_values_that_are_not_names_are_one_line(cli, tiny_model_dir, tmp_path):
    model = sharded(tiny_model_dir, tmp_path, "model.safetensors")
    edit_json(model / "model.safetensors.index.json", lambda i: i["weight_map"].update({"embed.weight": 7}))
    code, line = cli(model)
    assert code == 4 and "weight_map" in line, line


# -- F6/F7: FIFOs and /dev/zero anywhere in a checkpoint ---------------------------------------


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "model.safetensors", "tokenizer_config.json", "chat_template.jinja",
                                  "generation_config.json", "model.safetensors.index.json"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_special_files_in_a_checkpoint_never_hang_nor_fill_memory(cli, tiny_model_dir, tmp_path, name, kind):
    model = copy(tiny_model_dir, tmp_path)
    (fifo if kind == "fifo" else to_dev_zero)(model / name)
    code, line = cli(model)
    assert code == 4 and ("is a FIFO, not a regular file" if kind == "fifo" else "is a device, not a regular file") in line, line


def test_untrusted_reads_are_bounded_and_checked_on_the_descriptor(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    with pytest.raises(ModelError, match="too large"):
        untrusted.read_bytes(big, 1024)
    with pytest.raises(ModelError, match="points outside"):
        untrusted.inside_name(tmp_path, "a/../../b")
    assert untrusted.inside_name(tmp_path, "sub/model.safetensors") == tmp_path / "sub" / "model.safetensors"
    assert untrusted.read_json(_write(tmp_path / "bom.json", b"\xef\xbb\xbf{\"a\": 1}")) == {"a": 1}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# -- DiffusionGemma: F4 (rope_theta NaN), F5 (config against the headers), F16 (generation_config types),
#    F21 (canvas_length <= 0), F6 (a FIFO among the files transformers opens itself) ---------------------


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory):
    from gemma_checkpoint import write_diffusion_gemma

    return write_diffusion_gemma(tmp_path_factory.mktemp("gemma") / "model")


def _text(key, value):
    return lambda m: edit_json(m / "config.json", lambda c: c["text_config"].update({key: value}))


def _relabel(weights: Path, old: bytes, new: bytes) -> None:
    """Rewrite a safetensors header in place (same length: the offsets stay right)."""
    data = weights.read_bytes()
    length = int.from_bytes(data[:8], "little")
    weights.write_bytes(data[:8] + data[8:8 + length].replace(old, new) + data[8 + length:])


def _all_nan(model: Path) -> None:
    from safetensors.torch import load_file, save_file

    for shard in model.glob("*.safetensors"):
        save_file({k: v.fill_(float("nan")) for k, v in load_file(str(shard)).items()}, str(shard), metadata={"format": "pt"})


GEMMA_CASES = [
    ("rope-theta-nan", lambda m: (m / "config.json").write_text((m / "config.json").read_text().replace('"rope_theta": 10000.0', '"rope_theta": NaN')),
     "NaN is not a number JSON allows"),
    ("layers-3-for-2", lambda m: edit_json(m / "config.json", lambda c: c["text_config"].update(
        num_hidden_layers=3, layer_types=["sliding_attention", "full_attention", "full_attention"])), "says 3 layers, but the weights hold 2"),
    ("layers-types-disagree", _text("num_hidden_layers", 3), "num_hidden_layers is 3 but layer_types names 2 layers"),
    ("hidden-size-huge", _text("hidden_size", 10**7), "text_config.hidden_size=10000000 must be a whole number from 1 to 65536"),
    ("hidden-size-wrong", _text("hidden_size", 64), "says a 456 x 64 embedding, but the weights hold (456, 32)"),
    ("layers-100000", _text("num_hidden_layers", 100_000), "num_hidden_layers=100000 must be a whole number from 1 to 1024"),
    ("canvas-0", lambda m: edit_json(m / "config.json", lambda c: c.update(canvas_length=0)), "canvas_length=0 must be a whole number of at least 1"),
    ("canvas-negative", lambda m: edit_json(m / "config.json", lambda c: c.update(canvas_length=-5)), "canvas_length=-5"),
    ("steps-string", lambda m: edit_json(m / "generation_config.json", lambda g: g.update(max_denoising_steps="48")), "max_denoising_steps is '48', not a whole number"),
    ("steps-ten-million", lambda m: edit_json(m / "generation_config.json", lambda g: g.update(max_denoising_steps=10**7)), "steps and stability 0..4096"),
    ("t-min-string", lambda m: edit_json(m / "generation_config.json", lambda g: g.update(t_min="0.4")), "t_min is '0.4', not a number"),
    ("eos-strings", lambda m: edit_json(m / "generation_config.json", lambda g: g.update(eos_token_id=["<eos>"])), "not a whole number or a list of them"),
    ("processor-fifo", lambda m: fifo(m / "processor_config.json"), "processor_config.json is a FIFO, not a regular file"),
    ("kv-heads-list", _text("num_key_value_heads", [1]), "is not a DiffusionGemma config transformers accepts"),
    ("top-k-none", _text("top_k_experts", None), "top_k_experts=None must be from 1 to num_experts=4"),
    ("top-k-past-int64", _text("top_k_experts", 10**19), "text_config.top_k_experts=10000000000000000000 is out of range"),
    ("sliding-window-negative", _text("sliding_window", -1), "text_config.sliding_window=-1 is out of range"),
    ("pad-id-past-vocab", _text("pad_token_id", 5000), "text_config.pad_token_id=5000 is outside the vocabulary of 456"),
    ("per-layer-config-string", _text("per_layer_config", "x"), "per_layer_config must be an object"),
    # a pad is one token: a list of them is a lie transformers passes over (its embedding takes no padding_idx list)
    ("pad-id-list", _text("pad_token_id", [0, 1]), "text_config.pad_token_id=[0, 1] must be one token id, not a list"),
    ("pad-id-list-of-one", _text("pad_token_id", [0]), "text_config.pad_token_id=[0] must be one token id, not a list"),
    ("generation-pad-id-list", lambda m: edit_json(m / "generation_config.json", lambda g: g.update(pad_token_id=[0, 1])),
     "pad_token_id=[0, 1] must be one token id, not a list"),
    ("top-pad-id-list", lambda m: edit_json(m / "config.json", lambda c: c.update(pad_token_id=[0, 1])),
     "pad_token_id=[0, 1] must be one token id, not a list"),
    ("dtype-name", lambda m: edit_json(m / "config.json", lambda c: c.update(dtype="x")), "dtype='x' is not a dtype"),
    ("canvas-null", lambda m: edit_json(m / "config.json", lambda c: c.update(canvas_length=None)), "canvas_length=None"),
    ("stability-past-int64", lambda m: edit_json(m / "generation_config.json", lambda g: g.update(stability_threshold=10**19)), "sharpen cannot use"),
    ("dtype-lie", lambda m: _relabel(m / "model-00001-of-00002.safetensors", b'"F32"', b'"I32"'), "not a floating-point weight"),
    ("all-nan-weights", lambda m: _all_nan(m), "not finite"),
    ("shard-truncated", lambda m: (lambda f: f.write_bytes(f.read_bytes()[:-100]))(m / "model-00002-of-00002.safetensors"), "truncated weights file"),
]


@pytest.mark.parametrize("how, breaks, message", GEMMA_CASES, ids=[c[0] for c in GEMMA_CASES])
def test_diffusion_gemma_is_checked_like_the_native_families(cli, gemma_dir, tmp_path, how, breaks, message):
    model = copy(gemma_dir, tmp_path)
    breaks(model)
    code, line = cli(model)
    assert code == 4 and message in line, line


# -- What a model writes into a file: no NUL, no control bytes, no special tokens (DiffusionGemma too) ----


def test_diffusion_gemma_writes_no_control_bytes_nor_special_tokens(gemma_dir, monkeypatch):
    """The random-token loop samples as transformers does (nothing banned), so a model that favours
    <0x00> and <|turn> would write them; the engine drops them from the text as for the masked families."""
    from sharpen.core.models.families import diffusion_gemma as gemma
    from sharpen.core.engine import run_edit
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    denoiser = gemma.load_gemma(gemma_dir)
    nul, turn = denoiser.tokenizer.token_id("<0x00>"), denoiser.tokenizer.token_id("<|turn>")
    real = gemma.GemmaDenoiser.canvas_logits

    def favouring(self, canvas, self_conditioning, context):
        logits = real(self, canvas, self_conditioning, context).clone()
        logits[..., nul] += 50.0
        logits[..., 1::2, turn] += 100.0  # odd slots: the special token, even ones: the NUL byte
        return logits

    monkeypatch.setattr(gemma.GemmaDenoiser, "canvas_logits", favouring)
    text = "def f(x):\n    return x + 1\n"
    result = [u.result for u in run_edit(denoiser, text, [Span(21, 26, "infill", max_tokens=6)], Sampling(steps=4)) if u.result][0]
    written = result.changes().apply(text)
    assert "\x00" not in written and "<|turn>" not in written and written.startswith("def f(x):\n    return ")
    assert {nul, turn} <= set(denoiser.banned_ids.tolist())


def test_remote_code_checkpoints_are_checked_before_transformers_opens_them(cli, tiny_model_dir, tmp_path):
    """--trust-remote-code hands the directory to transformers, which opens files itself: a FIFO
    among them is refused first instead of blocking the load forever."""
    model = copy(tiny_model_dir, tmp_path)
    edit_json(model / "config.json", lambda c: c.update(model_type="evil", auto_map={"AutoModel": "modeling_evil.EvilModel"}))
    fifo(model / "modeling_evil.py")
    code, line = cli(model, "--trust-remote-code")
    assert code == 4 and "modeling_evil.py is a FIFO, not a regular file" in line, line


def test_a_weights_header_nested_too_deep_is_one_line(cli, tiny_model_dir, tmp_path):
    model = copy(tiny_model_dir, tmp_path)
    header = b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    (model / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    code, line = cli(model)
    assert code == 4 and "nested too deeply" in line, line


def test_declared_end_ids_outside_the_vocabulary_are_refused(cli, tmp_path):
    """generation_config.json's eos list becomes a tensor of end ids: 10**19 overflowed int64 (internal error)."""
    from family_checkpoints import write_llada

    model = write_llada(tmp_path / "llada")
    generation = model / "generation_config.json"
    edit_json(generation, lambda g: g.update(eos_token_id=[g["eos_token_id"], 10**19]))
    code, line = cli(model)
    assert code == 4 and "end token id 10000000000000000000 is outside the vocabulary" in line, line


def test_a_chat_template_list_of_strings_is_no_template(cli, tmp_path):
    """tokenizer_config.json's chat_template may be a list of {name, template}; a list of anything else
    was an AttributeError (internal error). It is no usable template: an instruction is a usage error."""
    from family_checkpoints import write_llada

    model = write_llada(tmp_path / "llada", instruct=True)
    edit_json(model / "tokenizer_config.json", lambda t: t.update(chat_template=["x"]))
    (model / "chat_template.jinja").unlink(missing_ok=True)
    code, line = cli(model, "--mode", "rewrite", "--instruction", "shorter")
    assert code == 2 and "needs an instruct checkpoint with a chat template" in line, line


def test_an_index_naming_thousands_of_missing_shards_is_a_short_line(cli, tiny_model_dir, tmp_path):
    model = copy(tiny_model_dir, tmp_path)
    (model / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {f"t{i}": f"shard-{i:05d}.safetensors" for i in range(5000)}}))
    code, line = cli(model)
    assert code == 4 and line.endswith("shard-00000.safetensors, shard-00001.safetensors, shard-00002.safetensors and 4997 more"), line


def test_remote_code_models_with_nan_weights_stop_at_the_first_pass(tmp_path, monkeypatch):
    """The toy remote-code checkpoint of tests/test_families.py, its weights all NaN."""
    import torch
    import transformers.dynamic_module_utils as dmu
    from family_checkpoints import write_tokenizer
    from safetensors.torch import save_file
    from test_families import TOY_CONFIG, TOY_MODEL

    from sharpen.core.models.remote_code import load_remote

    monkeypatch.setattr(dmu, "HF_MODULES_CACHE", str(tmp_path / "modules"))
    model = tmp_path / "toy"
    model.mkdir()
    ids = write_tokenizer(model, ("<|endoftext|>", "<|mask|>"))
    (model / "configuration_toy.py").write_text(TOY_CONFIG)
    (model / "modeling_toy.py").write_text(TOY_MODEL)
    (model / "config.json").write_text(json.dumps({
        "model_type": "toy-diffusion", "architectures": ["ToyDiffusionLM"], "vocab_size": 320, "hidden_size": 32,
        "auto_map": {"AutoConfig": "configuration_toy.ToyDiffusionConfig", "AutoModelForMaskedLM": "modeling_toy.ToyDiffusionLM"},
        "eos_token_id": ids["<|endoftext|>"], "pad_token_id": ids["<|endoftext|>"]}))
    shapes = {"embed.weight": (320, 32), "mix.weight": (32, 32), "mix.bias": (32,), "head.weight": (320, 32)}
    save_file({name: torch.full(shape, float("nan")) for name, shape in shapes.items()}, str(model / "model.safetensors"))
    denoiser = load_remote(model, trust_remote_code=True)
    with pytest.raises(ModelError, match="not finite"):
        denoiser.logits(torch.tensor([[1, 2, 3]]))


def test_models_lists_a_diffusion_gemma_that_would_not_load_as_not_usable(gemma_dir, tmp_path):
    from sharpen.core.models.catalog import find_checkpoints

    for name, breaks in (("fifo", lambda m: fifo(m / "processor_config.json")), ("layers", GEMMA_CASES[1][1])):
        breaks(copy(gemma_dir, tmp_path / "zoo", name))
    found = {Path(c.path).name: c.problem for c in find_checkpoints([tmp_path / "zoo"], cache_dir=tmp_path / "no-cache", embedded=False)}
    assert "processor_config.json is a FIFO" in found["fifo"] and "says 3 layers, but the weights hold 2" in found["layers"]


def test_models_checks_a_native_config_against_its_headers_as_loading_does(tiny_model_dir, tmp_path):
    from sharpen.core.models.catalog import find_checkpoints

    model = copy(tiny_model_dir, tmp_path / "zoo", "layers")
    edit_json(model / "config.json", lambda c: c.update(n_layers=3))
    found = find_checkpoints([tmp_path / "zoo"], cache_dir=tmp_path / "no-cache", embedded=False)
    assert [c.usable for c in found] == [False] and "says 3 layers, but the weights hold 2" in found[0].problem


@pytest.mark.parametrize("name", ["vocab.json", "merges.txt", "added_tokens.json"])
def test_slow_tokenizer_files_are_read_as_untrusted_input(cli, tmp_path, name):
    """Dream-style releases ship vocab.json + merges.txt (no tokenizer.json): read by sharpen, checked first."""
    from family_checkpoints import write_dream_release

    model = write_dream_release(tmp_path / "dream")
    fifo(model / name)
    code, line = cli(model)
    assert code == 4 and f"{name} is a FIFO, not a regular file" in line, line


# -- Library output: transformers' own warnings never reach the user's stderr ----------------------

def _last_layer_sliding(model: Path) -> None:
    # transformers warns "Last layer must use `full_attention`..." on stderr (its own handler) and forces it
    edit_json(model / "config.json", lambda c: c["text_config"].update(layer_types=["full_attention", "sliding_attention"]))


@pytest.mark.parametrize("lie", [None, "pad-list"])
def test_library_warnings_stay_off_stderr_in_headless(gemma_dir, tmp_path, lie):
    """A success prints nothing on stderr and an error exactly one line, though transformers logs
    its own warning about the checkpoint (a separate process: transformers' handler is made on import)."""
    model = copy(gemma_dir, tmp_path)
    _last_layer_sliding(model)
    if lie:
        edit_json(model / "generation_config.json", lambda g: g.update(pad_token_id=[0, 1]))
    target = tmp_path / "f.py"
    target.write_bytes(ORIGINAL)
    proc = subprocess.run([sys.executable, "-m", "sharpen.app.cli", str(target), "--apply-edit", "2:12-2:17", "--in-place", "--steps", "2",
                           "--model", str(model), "--device", "cpu"], capture_output=True, text=True, timeout=300)
    if lie is None:
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        assert target.read_bytes() != ORIGINAL
    else:
        assert proc.returncode == 4 and proc.stderr.count("\n") == 1 and "must be one token id" in proc.stderr, proc.stderr
        assert target.read_bytes() == ORIGINAL
