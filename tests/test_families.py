"""Real checkpoint families on tiny random checkpoints in their released on-disk layouts.

They load through the one real path; the backbone's logits match transformers' own
LlamaModel (LLaDA layout) and Qwen2Model (Dream, Open-dCoder) run with a full,
non-causal attention mask; a broken weight map makes that comparison fail; the Dream
shift is applied; other models run their own code only on opt-in; errors are one line
and exit 4 through the CLI; `sharpen models` / `doctor` report what is on disk.
"""
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from family_checkpoints import write_dream, write_llada, write_open_dcoder, write_tokenizer
from sharpen.core.models import families
from sharpen.core.errors import ModelError, UsageError
from sharpen.core.models.loading import load_denoiser, weight_files
from sharpen.core.spans import Span

TEXT = "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {
        "llada": write_llada(root / "llada"),  # bf16 like the release, 3 shards
        "llada-instruct": write_llada(root / "llada-instruct", instruct=True, mask_in_config=False),
        "llada-tied-bias": write_llada(root / "llada-tied-bias", tie=True, qkv_bias=True, dtype=torch.float32),
        "dream": write_dream(root / "dream"),
        "dream-instruct": write_dream(root / "dream-instruct", instruct=True),
        "open-dcoder": write_open_dcoder(root / "open-dcoder"),
    }


def tensors(path: Path) -> dict[str, torch.Tensor]:
    out = {}
    for file in weight_files(path):
        out.update({k: v.float() for k, v in load_file(str(file)).items()})
    return out


# -- references: transformers' own models, fed the checkpoint's tensors under their names --

LLADA_TO_LLAMA = {"attn_norm": "input_layernorm", "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj",
                  "v_proj": "self_attn.v_proj", "attn_out": "self_attn.o_proj", "ff_norm": "post_attention_layernorm",
                  "ff_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "ff_out": "mlp.down_proj"}


def reference_logits(path: Path, ids: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """logits [B, T, V] from LlamaModel (LLaDA layout) or Qwen2Model (Qwen2 layout) + lm_head."""
    from transformers import LlamaConfig, LlamaModel, Qwen2Config, Qwen2Model

    c = json.loads((path / "config.json").read_text())
    t = tensors(path)
    if c["model_type"] == "llada":
        kind = Qwen2Config if c["include_qkv_bias"] else LlamaConfig  # q/k/v-only biases are Qwen2's
        cfg = kind(vocab_size=c["embedding_size"], hidden_size=c["d_model"], intermediate_size=c["mlp_hidden_size"],
                   num_hidden_layers=c["n_layers"], num_attention_heads=c["n_heads"], num_key_value_heads=c["n_kv_heads"],
                   rms_norm_eps=c["rms_norm_eps"], rope_theta=c["rope_theta"], max_position_embeddings=c["max_sequence_length"],
                   attn_implementation="eager")
        state = {"embed_tokens.weight": t.pop("model.transformer.wte.weight"), "norm.weight": t.pop("model.transformer.ln_f.weight")}
        head = t.pop("model.transformer.ff_out.weight", None)
        for key, value in t.items():  # model.transformer.blocks.{i}.{name}.{weight|bias}
            _, _, _, i, name, kind_ = key.split(".")
            state[f"layers.{i}.{LLADA_TO_LLAMA[name]}.{kind_}"] = value
        model = (Qwen2Model if c["include_qkv_bias"] else LlamaModel)(cfg)
    else:
        cfg = Qwen2Config(**{k: c[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                               "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "rope_theta",
                                               "max_position_embeddings")}, attn_implementation="eager")
        head = t.pop("lm_head.weight", None)
        state = {k.removeprefix("model."): v for k, v in t.items()}
        model = Qwen2Model(cfg)
    model.load_state_dict(state, strict=True)
    head = state["embed_tokens.weight"] if head is None else head  # tied
    B, T = ids.shape
    mask = None if causal else torch.zeros(B, 1, T, T)  # a 4D float mask is used as is: 0 = attend
    with torch.no_grad():
        hidden = model.eval()(input_ids=ids, attention_mask=mask).last_hidden_state  # [B, T, D]
    return hidden @ head.T  # [B, T, V]


def shift(logits: torch.Tensor) -> torch.Tensor:
    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)


IDS = torch.randint(0, 300, (2, 23), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", ["llada", "llada-tied-bias", "dream", "open-dcoder"])
def test_backbone_matches_transformers_with_full_attention(ckpt, name):
    den = load_denoiser(ckpt[name])
    ref = reference_logits(ckpt[name], IDS)
    ours_raw = den.model(IDS)  # [B, T, V] before the family's shift
    assert torch.allclose(ours_raw, ref, atol=1e-4, rtol=1e-4), (ours_raw - ref).abs().max()
    expected = shift(ref) if den.spec.shift_logits else ref
    assert torch.allclose(den.logits(IDS), expected, atol=1e-4, rtol=1e-4)
    # the reference really is bidirectional: its causal run is something else
    assert not torch.allclose(reference_logits(ckpt[name], IDS, causal=True), ref, atol=1e-2)


def test_dream_shift_is_applied(ckpt):
    den = load_denoiser(ckpt["dream"])
    raw, shifted = den.model(IDS), den.logits(IDS)
    assert den.spec.shift_logits and load_denoiser(ckpt["open-dcoder"]).spec.shift_logits
    assert not load_denoiser(ckpt["llada"]).spec.shift_logits
    assert torch.equal(shifted[:, 0], raw[:, 0]) and torch.equal(shifted[:, 1:], raw[:, :-1])


@pytest.mark.parametrize("name, family, swap", [
    ("llada", "llada", ("ff_proj", "up_proj")),  # gate and up exchanged
    ("dream", "dream", ("input_layernorm", "post_attention_layernorm")),
])
def test_broken_weight_map_fails_the_equivalence(ckpt, monkeypatch, name, family, swap):
    good = next(f for f in families.FAMILIES if f.name == family)
    a, b = swap
    broken = {k.replace(a, "\0").replace(b, a).replace("\0", b): v for k, v in good.weight_map.items()}
    swapped = tuple(dataclasses.replace(f, weight_map=broken) if f is good else f for f in families.FAMILIES)
    monkeypatch.setattr(families, "FAMILIES", swapped)
    den = load_denoiser(ckpt[name])  # same names and shapes, so it loads...
    assert (den.model(IDS) - reference_logits(ckpt[name], IDS)).abs().max() > 1e-2  # ...and the test catches it


@pytest.mark.parametrize("name, family, mask_token, eos_token", [
    ("llada", "llada", "<|mdm_mask|>", "<|endoftext|>"),
    ("llada-instruct", "llada", "<|mdm_mask|>", "<|eot_id|>"),  # mask from the tokenizer; turn end ends answers
    ("dream", "dream", "<|mask|>", "<|endoftext|>"),
    ("dream-instruct", "dream", "<|mask|>", "<|im_end|>"),  # template from chat_template.jinja
    ("open-dcoder", "open-dcoder", "[MASK]", "<|im_end|>"),  # mask named in tokenizer_config.json only
])
def test_special_ids_and_chat_template_come_from_the_files(ckpt, name, family, mask_token, eos_token):
    den = load_denoiser(ckpt[name])
    tok, spec = den.tokenizer, den.spec
    assert spec.family == family
    assert spec.mask_id == tok.token_id(mask_token) and spec.eos_id == tok.token_id(eos_token)
    assert spec.pad_id == tok.token_id("<|endoftext|>")
    assert bool(spec.chat_template) == (name.endswith("instruct") or name == "open-dcoder")
    # A released checkpoint takes instructions exactly when it ships a template; the listing says the same.
    from sharpen.core.models.catalog import inspect_checkpoint

    assert spec.takes_instructions == bool(spec.chat_template) == inspect_checkpoint(ckpt[name]).instruct
    assert den.model.cfg.vocab_size % 64 == 0 and den.model.cfg.vocab_size > tok.vocab_size  # padded embedding


def test_autoregressive_qwen2_and_unsupported_options_are_refused(ckpt, tmp_path):
    with pytest.raises(ModelError, match="autoregressive Qwen2"):
        load_denoiser(write_open_dcoder(tmp_path / "qwen", with_mask=False))
    odd = shutil.copytree(ckpt["llada"], tmp_path / "bias")
    config = json.loads((odd / "config.json").read_text())
    config["include_bias"] = True
    (odd / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="include_bias=True is not supported"):
        load_denoiser(odd)


# -- instructions ---------------------------------------------------------------------------


def test_instruction_builds_a_chat_canvas_and_plain_infill_stays_plain(ckpt):
    from sharpen.core.canvas import build_canvas
    from sharpen.core.engine import apply_edit
    from sharpen.core.instruct import build_instruct_canvas, render_chat

    den = load_denoiser(ckpt["llada-instruct"])
    tok, spec = den.tokenizer, den.spec
    span = Span(15, 31, mode="rewrite", instruction="Use subtraction")
    canvas = build_instruct_canvas(TEXT, [span], tok, spec, 1024, den.max_len)
    prompt = tok.decode(list(canvas.ids[: canvas.slots[0].start]))
    assert prompt.startswith("<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nUse subtraction")
    assert "<selection>    return a + b</selection>" in prompt
    assert prompt.endswith("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    assert canvas.slots[0].stop == len(canvas.ids) and set(canvas.ids[canvas.slots[0].start:]) == {spec.mask_id}
    assert render_chat(spec.chat_template, [{"role": "user", "content": "x"}]).startswith("<|startoftext|>")
    result = apply_edit(den, TEXT, [span])
    assert result.text.startswith(TEXT[:15]) and result.text.endswith(TEXT[31:])
    plain = build_canvas(TEXT, [Span(15, 31)], tok, spec.mask_id, 1024, den.max_len)
    assert tok.token_id("<|start_header_id|>") not in plain.ids
    with pytest.raises(UsageError, match="instruct checkpoint"):
        apply_edit(load_denoiser(ckpt["llada"]), TEXT, [span])


# -- model choice: local dirs, the local hub cache, dtype -----------------------------------


def fake_hub_cache(root: Path, repo_id: str, checkpoint: Path) -> Path:
    """The Hugging Face cache layout: models--org--name/{refs/main, snapshots/<commit>/...}."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(checkpoint, repo / "snapshots" / commit)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return repo / "snapshots" / commit


def test_hub_id_resolves_from_the_local_cache_only(ckpt, tmp_path):
    from sharpen.core.models.load import resolve_model_path

    snapshot = fake_hub_cache(tmp_path, "GSAI-ML/LLaDA-8B-Instruct", ckpt["llada-instruct"])
    assert resolve_model_path("GSAI-ML/LLaDA-8B-Instruct", cache_dir=tmp_path) == (snapshot, "GSAI-ML/LLaDA-8B-Instruct")
    assert resolve_model_path(str(ckpt["dream"])) == (ckpt["dream"], None)
    with pytest.raises(ModelError, match="nor in the local Hugging Face cache.*sharpen download Dream-org/Dream-v0"):
        resolve_model_path("Dream-org/Dream-v0-Instruct-7B", cache_dir=tmp_path)


def test_dtype_float32_on_cpu_unless_asked(ckpt):
    from sharpen.core.models.load import load_model

    from sharpen.core.settings import ModelRequest

    request = ModelRequest(model=str(ckpt["llada"]), device="cpu")
    assert load_model(request).model.embed.weight.dtype == torch.float32  # stored bf16, run float32 on CPU
    assert load_model(dataclasses.replace(request, dtype="bfloat16")).model.embed.weight.dtype == torch.bfloat16


# -- bigger than one GPU ----------------------------------------------------------------------


def test_device_plan_never_splits_a_block(ckpt):
    from sharpen.core.models.loading import model_config, read_config
    from sharpen.core.models.placement import parse_max_memory, plan

    _, cfg = model_config(ckpt["dream"], read_config(ckpt["dream"]))
    # two virtual 60 kB GPUs and the host: the plan is arithmetic, no GPU needed to make it
    p = plan(cfg, torch.bfloat16, parse_max_memory("0=60kB,1=60kB,cpu=1GiB"))
    assert set(p.device_map.values()) >= {"cpu"} and any(isinstance(d, int) for d in p.device_map.values())
    assert all(k in ("embed", "norm", "output", "layers") or k.startswith("layers.") and k.count(".") == 1 for k in p.device_map)
    assert p.main_device == torch.device(f"cuda:{p.device_map['embed']}")  # the sampler runs where the embedding is
    assert "(offloaded, runs on the main GPU)" in p.describe()
    with pytest.raises(ValueError, match="bad entry 'gpu0=1GB'"):
        parse_max_memory("gpu0=1GB")


def test_offloaded_model_gives_the_same_logits_and_edits(ckpt):
    from sharpen.core.engine import apply_edit

    ref = load_denoiser(ckpt["dream"])
    # CPU-only machine: layer 1 offloaded to disk, streamed in by accelerate's hooks each call
    device_map = {"embed": "cpu", "layers.0": "cpu", "layers.1": "disk", "norm": "cpu", "output": "cpu"}
    placed = load_denoiser(ckpt["dream"], device_map=device_map)
    assert placed.model.layers[1].attn.wq.weight.device.type == "meta"  # really offloaded
    assert torch.allclose(placed.logits(IDS), ref.logits(IDS), atol=1e-5)
    assert apply_edit(placed, TEXT, [Span(15, 31)]).text == apply_edit(ref, TEXT, [Span(15, 31)]).text
    assert [k.device.type for k in placed.new_cache(1, 8).k] == ["cpu", "cpu"]
    # accelerate may put everything on disk: the embedding (the sampler's device) stays in memory
    on_disk = load_denoiser(ckpt["dream"], device_map={"": "disk"})
    assert on_disk.device.type == "cpu" and on_disk.model.layers[0].attn.wq.weight.device.type == "meta"
    assert torch.allclose(on_disk.logits(IDS), ref.logits(IDS), atol=1e-5)


# -- any other dLLM: its own code, on opt-in only --------------------------------------------

TOY_CONFIG = '''from transformers import PretrainedConfig


class ToyDiffusionConfig(PretrainedConfig):
    model_type = "toy-diffusion"

    def __init__(self, vocab_size=320, hidden_size=32, **kwargs):
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        super().__init__(**kwargs)
'''
TOY_MODEL = '''import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput

from .configuration_toy import ToyDiffusionConfig


class ToyDiffusionLM(PreTrainedModel):
    config_class = ToyDiffusionConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.mix = nn.Linear(config.hidden_size, config.hidden_size)
        self.head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids, **kwargs):
        h = self.embed(input_ids)
        h = h + self.mix(h.mean(1, keepdim=True))  # every position sees all others
        return MaskedLMOutput(logits=self.head(torch.tanh(h)))
'''


@pytest.fixture(scope="module")
def toy_remote(tmp_path_factory):
    """A checkpoint of an unknown family with its own modeling code (auto_map), as on the hub."""
    out = tmp_path_factory.mktemp("remote") / "toy"
    out.mkdir()
    ids = write_tokenizer(out, ("<|endoftext|>", "<|mask|>"))
    (out / "configuration_toy.py").write_text(TOY_CONFIG)
    (out / "modeling_toy.py").write_text(TOY_MODEL)
    config = {"model_type": "toy-diffusion", "architectures": ["ToyDiffusionLM"], "vocab_size": 320, "hidden_size": 32,
              "auto_map": {"AutoConfig": "configuration_toy.ToyDiffusionConfig", "AutoModelForMaskedLM": "modeling_toy.ToyDiffusionLM"},
              "eos_token_id": ids["<|endoftext|>"], "pad_token_id": ids["<|endoftext|>"]}
    (out / "config.json").write_text(json.dumps(config))
    g = torch.Generator().manual_seed(3)
    save_file({"embed.weight": torch.randn(320, 32, generator=g), "mix.weight": torch.randn(32, 32, generator=g) / 6,
               "mix.bias": torch.zeros(32), "head.weight": torch.randn(320, 32, generator=g)}, str(out / "model.safetensors"))
    return out


def test_remote_code_runs_only_on_opt_in(toy_remote, monkeypatch, tmp_path, capsys):
    import transformers.dynamic_module_utils as dmu

    from sharpen.app.cli import main
    from sharpen.core.models.remote_code import load_remote

    monkeypatch.setattr(dmu, "HF_MODULES_CACHE", str(tmp_path / "modules"))  # its code is copied here, not to ~/.cache
    with pytest.raises(ModelError, match="--trust-remote-code"):
        load_remote(toy_remote, trust_remote_code=False)
    den = load_remote(toy_remote, trust_remote_code=True, shift_logits=True)
    assert den.spec.family == "remote:toy-diffusion" and den.spec.mask_id == den.tokenizer.token_id("<|mask|>")
    assert den.spec.mask_id in den.banned_ids.tolist() and den.spec.eos_id not in den.banned_ids.tolist()
    raw = den.model(input_ids=IDS).logits
    assert torch.equal(den.logits(IDS), shift(raw))
    src = tmp_path / "a.py"
    src.write_text(TEXT)
    rc = main([str(src), "--apply-edit", "2-2", "--model", str(toy_remote), "--trust-remote-code", "--no-shift-logits", "--json", "-q"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["text"].startswith(TEXT[:15]) and out["text"].endswith(TEXT[31:])


# -- through the CLI ---------------------------------------------------------------------------


def sharpen(*args):
    return subprocess.run([sys.executable, "-m", "sharpen.app.cli", *map(str, args)], capture_output=True, timeout=300)


def sharpen_together(*runs):
    """Several CLI processes at once (their torch imports overlap); CompletedProcess-like results."""
    procs = [subprocess.Popen([sys.executable, "-m", "sharpen.app.cli", *map(str, a)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for a in runs]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return results


def one_line_exit_4(out) -> str:
    lines = out.stderr.decode().strip().splitlines()
    assert out.returncode == 4 and len(lines) == 1 and lines[0].startswith("sharpen: "), (out.returncode, lines)
    assert out.stdout == b""
    return lines[0]


def test_cli_errors_are_one_line_and_exit_4(ckpt, toy_remote, tmp_path, capsys):
    from sharpen.app.cli import main

    src = tmp_path / "a.py"
    src.write_text(TEXT)
    truncated = shutil.copytree(ckpt["llada"], tmp_path / "truncated")
    shard = sorted(truncated.glob("model-*.safetensors"))[1]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    unknown = shutil.copytree(ckpt["dream"], tmp_path / "unknown")
    config = json.loads((unknown / "config.json").read_text())
    config.pop("auto_map")
    (unknown / "config.json").write_text(json.dumps({**config, "model_type": "mamba-diffusion"}))
    runs = sharpen_together((src, "--apply-edit", "1-1", "--model", truncated), (src, "--apply-edit", "1-1", "--model", unknown))
    assert "corrupt or truncated weights file model-00002-of-00003.safetensors" in one_line_exit_4(runs[0])
    line = one_line_exit_4(runs[1])
    assert "unknown model family (config.json model_type='mamba-diffusion'); known: diffusion_gemma, dream, fast-dllm-v2, llada, llada2, open-dcoder, sdar, sdar_moe, sharpen, stable-diffcoder" in line
    assert main([str(src), "--apply-edit", "1-1", "--model", str(toy_remote)]) == 4  # in-process: saves a torch import
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pass --trust-remote-code if you trust it" in err[0]
    assert src.read_text() == TEXT


def test_cli_infill_for_each_family(ckpt, tmp_path, capsys):
    from sharpen.app.cli import main

    src = tmp_path / "a.py"
    src.write_text(TEXT)
    out = sharpen(src, "--apply-edit", "2:5-2:17", "--model", ckpt["dream"])  # one real process
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().startswith("def add(a, b):\n    ") and out.stdout.decode().endswith("\n\n\nprint(add(1, 2))\n")
    for name in ("llada", "llada-instruct", "open-dcoder"):
        assert main([str(src), "--apply-edit", "2:5-2:17", "--model", str(ckpt[name]), "--json", "-q"]) == 0
        payload = json.loads(capsys.readouterr().out)
        assert payload["text"] == "def add(a, b):\n    " + payload["spans"][0]["text"] + "\n\n\nprint(add(1, 2))\n"
    rc = main([str(src), "--apply-edit", "2:5-2:17", "--mode", "rewrite", "--instruction", "negate it",
               "--model", str(ckpt["dream-instruct"]), "--json", "-q"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["spans"][0]["mode"] == "rewrite"


def test_models_and_doctor_tell_the_truth(ckpt, tmp_path, capsys):
    from sharpen.app.cli import main

    broken = shutil.copytree(ckpt["dream"], tmp_path / "dream-truncated")
    shard = sorted(broken.glob("model-*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes()[:-100])
    assert main(["models", str(ckpt["llada"]), str(ckpt["open-dcoder"]), str(broken), "--json"]) == 0
    listed = {Path(c["path"]).name: c for c in json.loads(capsys.readouterr().out)}
    llada, odc = listed["llada"], listed["open-dcoder"]
    assert (llada["family"], llada["dtype"], llada["usable"]) == ("llada", "bfloat16", True)
    assert llada["params"] == sum(t.numel() for t in tensors(ckpt["llada"]).values())
    assert (odc["family"], odc["instruct"], odc["dtype"]) == ("open-dcoder", True, "bfloat16")
    assert not listed["dream-truncated"]["usable"] and "truncated" in listed["dream-truncated"]["problem"]
    assert main(["models", str(tmp_path), str(ckpt["llada"]), "--all"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:6] == ["NAME", "FAMILY", "PARAMS", "DTYPE", "SIZE", "WHERE"]
    assert "llada" in table and "not usable:" in table and "truncated weights file" in table

    assert main(["doctor", "--model", str(ckpt["dream-instruct"]), "--device", "cpu"]) == 0
    report = capsys.readouterr().out
    params = sum(t.numel() for t in tensors(ckpt["dream-instruct"]).values())
    assert f"family dream, instruct (chat template), {params:,} parameters, stored as float32" in report
    assert f"torch {torch.__version__}" in report and "would load on cpu as float32" in report
    assert main(["doctor", "--model", str(broken)]) == 4
    assert "cannot load: truncated weights file" in capsys.readouterr().out


def test_the_embedded_model_has_a_chat_template_and_takes_no_instructions():
    from sharpen.core.models.catalog import inspect_checkpoint
    from sharpen.core.models.loading import embedded_model_path

    spec = load_denoiser(None).spec
    assert spec.chat_template and spec.instruct is False and not spec.takes_instructions
    assert inspect_checkpoint(embedded_model_path()).instruct is False  # `sharpen models` lists it without "(instruct)"


# -- classifier-free guidance: LLaDA's reference generate, cfg_scale > 0 --------------------------

def llada_reference_generate(den, prompt: torch.Tensor, steps: int, gen_length: int, block_length: int, cfg_scale: float) -> torch.Tensor:
    """LLaDA's generate.py (GSAI-ML/LLaDA) at temperature 0 with low-confidence remasking, written out
    from its math: the unconditional pass masks the prompt, logits = un + (cfg + 1) * (cond - un),
    each block's masks spread evenly over its steps (the remainder first), the most confident commit.
    Its one change: the ids sharpen never proposes (the mask, control bytes, stray specials) are banned."""
    mask_id, banned = den.spec.mask_id, den.banned_ids
    x = torch.full((1, prompt.shape[1] + gen_length), mask_id, dtype=torch.long)
    x[:, :prompt.shape[1]] = prompt
    prompt_index = x != mask_id
    blocks = gen_length // block_length
    steps_per_block = steps // blocks
    for b in range(blocks):
        start, end = prompt.shape[1] + b * block_length, prompt.shape[1] + (b + 1) * block_length
        masked = int((x[:, start:end] == mask_id).sum())
        counts = [masked // steps_per_block + (1 if i < masked % steps_per_block else 0) for i in range(steps_per_block)]
        for i in range(steps_per_block):
            mask_index = x == mask_id
            if cfg_scale > 0:
                un_x = x.clone()
                un_x[prompt_index] = mask_id
                logits, un_logits = den.logits(torch.cat([x, un_x])).chunk(2)
                logits = un_logits + (cfg_scale + 1) * (logits - un_logits)
            else:
                logits = den.logits(x)
            logits = logits.index_fill(-1, banned, float("-inf"))
            x0 = logits.argmax(-1)
            x0_p = torch.gather(torch.softmax(logits.double(), -1), -1, x0[..., None]).squeeze(-1)
            x0_p[:, end:] = -float("inf")
            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, torch.tensor(-float("inf"), dtype=x0_p.dtype))
            chosen = torch.topk(confidence[0], k=counts[i]).indices
            x[0, chosen] = x0[0, chosen]
    return x[0, prompt.shape[1]:]


@pytest.fixture(scope="module")
def llada_plain(ckpt):
    """The LLaDA fixture in float32 with no end ids, so sharpen's loop runs the reference's plain decode
    (no pad/eos rules, no length pass): what is compared is the guidance."""
    den = load_denoiser(ckpt["llada-tied-bias"])
    den.spec = dataclasses.replace(den.spec, pad_id=None, eos_id=None, other_end_ids=())
    return den


@pytest.mark.parametrize("cfg_scale, steps, gen_length, block_length", [(0.0, 8, 8, 8), (0.5, 8, 8, 8), (1.0, 6, 12, 4),
                                                                        (2.0, 4, 8, 4), (3.0, 3, 6, 6)])
def test_cfg_scale_decodes_as_llada_reference_generate(llada_plain, cfg_scale, steps, gen_length, block_length):
    from sharpen.core.canvas import Canvas
    from sharpen.core.loops import LoopRules
    from sharpen.core.loops.masked import denoise
    from sharpen.core.settings import Sampling

    den = llada_plain
    prompt = torch.tensor([den.tokenizer.encode("def add(a, b):\n    return a + b\n\nclass Point:\n")])
    reference = llada_reference_generate(den, prompt, steps, gen_length, block_length, cfg_scale)
    ids = tuple(prompt[0].tolist()) + (den.spec.mask_id,) * gen_length
    canvas = Canvas(ids, (range(prompt.shape[1], len(ids)),), (Span(len(TEXT), len(TEXT)),), (0, 0), den.spec.mask_id)
    settings = Sampling(steps=steps, block_size=block_length, cache="none", schedule="fixed", cfg_scale=cfg_scale)
    rules = LoopRules(pad_ends_span=False, defer_end=False, expected_length=False)
    frames = list(denoise(den, canvas, settings, rules=rules))
    assert frames[-1].final_ids[0][0] == tuple(reference.tolist())
    assert frames[-1].step == steps  # as many guided passes as the reference's steps
    if cfg_scale > 0:  # guidance changes the decode here (else the test would not see it)
        assert reference.tolist() != llada_reference_generate(den, prompt, steps, gen_length, block_length, 0.0).tolist()


def test_cfg_scale_with_the_cache_guides_both_halves(llada_plain):
    """The dual cache holds the conditional and the unconditional rows (2B): the first step, which
    fills it, equals the uncached guided step (later ones read the cache: approximate, as without guidance)."""
    from sharpen.core.canvas import Canvas
    from sharpen.core.loops import LoopRules
    from sharpen.core.loops.masked import denoise
    from sharpen.core.settings import Sampling

    den = llada_plain
    prompt = den.tokenizer.encode("def add(a, b):\n    return a + b\n")
    ids = tuple(prompt) + (den.spec.mask_id,) * 8
    canvas = Canvas(ids, (range(len(prompt), len(ids)),), (Span(0, 0),), (0, 0), den.spec.mask_id)
    rules = LoopRules(pad_ends_span=False, defer_end=False, expected_length=False)
    runs = [list(denoise(den, canvas, Sampling(steps=8, block_size=8, cache=cache, schedule="fixed", cfg_scale=1.0), rules=rules))
            for cache in ("none", "dual")]
    assert runs[0][1]._ids.tolist() == runs[1][1]._ids.tolist()
    assert runs[1][-1].done and len(runs[1]) == len(runs[0])


@pytest.mark.parametrize("name", ["dream", "open-dcoder"])
def test_cfg_scale_is_refused_where_the_reference_has_none(ckpt, tmp_path, capsys, name):
    from sharpen.app.cli import main

    target = tmp_path / "f.py"
    target.write_text(TEXT)
    code = main([str(target), "--apply-edit", "2:12-2:17", "--in-place", "--steps", "2", "--model", str(ckpt[name]), "--cfg-scale", "1.5"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--cfg-scale" in err and "reference has none" in err, err
    assert target.read_text() == TEXT
