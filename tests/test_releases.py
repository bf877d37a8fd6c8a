"""Released checkpoints as they ship (issue: real releases that did not load as shipped).

The slow-tokenizer file sets of Dream / Dream-Coder / DiffuCoder, the union of declared end
ids, the sampling order of the references, math fields that must be stated, and the cache
refresh a released checkpoint gets by default.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from family_checkpoints import write_dream_release, write_llada
from sharpen.core.errors import ModelError
from sharpen.core.models.loading import embedded_model_path, load_denoiser
from sharpen.core.tokenizer import Tokenizer
from sharpen.kernels import reference

AWKWARD = [
    "def f(x):\n\treturn x  # ünïcödé ✓ 日本語\r\n",
    "e\u0301 café naïve Ωmega",  # a combining accent: NFC decides
    "  \n\n   spaces\t\ttabs\r lone CR\rand CRLF\r\n",
    "'s 're 've 123456 3.14159 0x1F 🙂🙃 \u2028 \x0c",
    "<|mask|><|endoftext|>x<|im_start|>user\nhi<|im_end|>",
    "",
]


@pytest.fixture(scope="module", params=["dream", "diffucoder"])
def release(request, tmp_path_factory):
    return request.param, write_dream_release(tmp_path_factory.mktemp(request.param) / "ckpt", variant=request.param)


def test_the_release_file_set_has_no_tokenizer_json(release):
    _, path = release
    names = {p.name for p in path.iterdir()}
    assert "tokenizer.json" not in names
    assert {"vocab.json", "merges.txt", "added_tokens.json", "special_tokens_map.json", "tokenizer_config.json",
            "tokenization_dream.py", "generation_config.json", "config.json", "model.safetensors.index.json"} <= names


def test_tokenizer_from_vocab_and_merges_equals_transformers(release):
    """Same ids as transformers' own Qwen2 tokenizer built from the same files, on awkward text
    and on every added token, alone and in context."""
    from transformers import Qwen2Tokenizer

    _, path = release
    ours = Tokenizer.from_directory(path)
    theirs = Qwen2Tokenizer.from_pretrained(str(path), local_files_only=True)
    added = json.loads((path / "added_tokens.json").read_text())
    corpus = AWKWARD + list(added) + [f"a {t} b" for t in added]
    for text in corpus:
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False), text
        assert ours.decode(ours.encode(text)) == text or text != theirs.decode(theirs.encode(text, add_special_tokens=False))
    for token, token_id in added.items():
        assert ours.token_id(token) == token_id == theirs.convert_tokens_to_ids(token)


def test_an_added_token_at_the_wrong_id_is_refused(tmp_path):
    path = write_dream_release(tmp_path / "ckpt")
    added = json.loads((path / "added_tokens.json").read_text())
    added["<|mask|>"] += 7  # a hole in the ids: the vocabulary cannot give it that id
    (path / "added_tokens.json").write_text(json.dumps(added))
    cfg = json.loads((path / "tokenizer_config.json").read_text())
    cfg["added_tokens_decoder"] = {}
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="declared with id"):
        Tokenizer.from_directory(path)


def test_diffucoder_spans_can_end_on_its_pad(release):
    """DiffuCoder pads with <|dlm_pad|> while its config.json names <|endoftext|>: both end a span,
    the pad that fills is the tokenizer's, and neither is banned."""
    variant, path = release
    den = load_denoiser(path)
    tok, spec = den.tokenizer, den.spec
    endoftext, im_end = tok.token_id("<|endoftext|>"), tok.token_id("<|im_end|>")
    banned = set(den.banned_ids.tolist())
    assert not banned & set(spec.end_ids) and spec.mask_id in banned
    if variant == "diffucoder":
        dlm_pad = tok.token_id("<|dlm_pad|>")
        assert spec.pad_id == dlm_pad and {dlm_pad, endoftext, im_end} <= set(spec.end_ids)
    else:
        assert spec.pad_id == endoftext


def test_released_checkpoints_load_and_edit_through_the_cli(release, tmp_path):
    _, path = release
    target = tmp_path / "f.py"
    target.write_text("def add(a, b):\n    return a + b\n")
    proc = subprocess.run([sys.executable, "-m", "sharpen.app.cli", str(target), "--apply-edit", "2:12-2:17", "--model", str(path),
                           "--device", "cpu", "--steps", "4", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["text"].startswith("def add(a, b):\n    return ") and result["text"].endswith("\n")


# -- sampling order: temperature, then top-p, then top-k (Dream's sample_tokens) -------------


def _dream_distribution(logits, temperature, top_p, top_k):
    """Dream's sample_tokens, written out: logits / T, nucleus (keeping the token that crosses
    top_p), top-k, softmax."""
    logits = logits / temperature
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    cumulative = torch.cumsum(torch.softmax(sorted_logits, dim=-1), dim=-1)
    remove = cumulative > top_p
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    logits = logits.masked_fill(torch.zeros_like(remove).scatter(-1, order, remove), float("-inf"))
    kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
    logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits, dim=-1)


@pytest.mark.parametrize("temperature", [0.3, 0.7, 1.5])
def test_sampling_follows_the_references_order(temperature):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 50, generator=gen) * 3
    expected = _dream_distribution(logits.double(), temperature, top_p=0.8, top_k=12)
    ours = torch.softmax(reference.sampling_logits(logits, temperature, 12, 0.8), dim=-1)
    torch.testing.assert_close(ours, expected, atol=1e-6, rtol=0)
    # Filtering before the temperature (the old order) draws from a measurably different distribution.
    old = torch.softmax(reference.filter_logits(logits, 12, 0.8).double() / temperature, dim=-1)
    if temperature < 1:
        assert (old - expected).abs().sum(-1).max() > 0.01


def test_tempered_scores_rank_by_the_distribution_drawn_from():
    """Dream ranks commits by the tempered probability of the drawn token; LLaDA by the plain one."""
    from sharpen.kernels.step import propose_and_score

    logits = torch.randn(4, 30, generator=torch.Generator().manual_seed(1)) * 2
    args = (logits, 0.5, None, None, "confidence", torch.Generator().manual_seed(3))
    tokens, p_plain, _ = propose_and_score(*args)
    tokens_t, p_tempered, _ = propose_and_score(logits, 0.5, None, None, "confidence", torch.Generator().manual_seed(3), tempered_scores=True)
    assert torch.equal(tokens, tokens_t)
    torch.testing.assert_close(p_plain, logits.softmax(-1).gather(-1, tokens[:, None]).squeeze(-1))
    torch.testing.assert_close(p_tempered, (logits / 0.5).softmax(-1).gather(-1, tokens[:, None]).squeeze(-1))


def test_families_declare_their_references_scoring(release):
    _, path = release
    assert load_denoiser(path).spec.tempered_scores  # Dream's convention
    assert not load_denoiser(embedded_model_path()).spec.tempered_scores


# -- config fields that change the math -------------------------------------------------------


@pytest.mark.parametrize("field", ["layer_norm_type", "block_type", "activation_type", "rope", "include_bias", "weight_tying"])
def test_a_llada_config_without_a_math_field_stops(tmp_path, field):
    path = write_llada(tmp_path / "llada")
    config = json.loads((path / "config.json").read_text())
    del config[field]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match=f"lacks '{field}'"):
        load_denoiser(path)
    target = tmp_path / "f.py"
    target.write_text("x = 1\n")
    proc = subprocess.run([sys.executable, "-m", "sharpen.app.cli", str(target), "--apply-edit", "1-1", "--model", str(path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4 and proc.stderr.count("\n") == 1 and field in proc.stderr


def test_a_qwen2_config_without_kv_heads_stops(tmp_path):
    path = write_dream_release(tmp_path / "dream")
    config = json.loads((path / "config.json").read_text())
    del config["num_key_value_heads"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="num_key_value_heads"):
        load_denoiser(path)


# -- the cache refresh a released checkpoint gets -------------------------------------------


def test_released_checkpoints_default_to_fast_dllms_refresh(release):
    from sharpen.core.engine import apply_edit
    from sharpen.core.settings import Sampling
    from sharpen.core.spans import Span

    _, path = release
    den = load_denoiser(path)
    assert den.spec.default_refresh == "canvas" and load_denoiser(embedded_model_path()).spec.default_refresh == "block"
    passes = []
    real = den.logits

    def spy(x, want=None, run=None, cache=None):
        passes.append(run is None and cache is not None)  # a whole-canvas pass that fills the cache
        return real(x, want=want, run=run, cache=cache)

    den.logits = spy
    text = "def add(a, b):\n    return a + b\n"
    apply_edit(den, text, [Span(19, 31, max_tokens=24)], Sampling(block_size=8))
    assert sum(passes) == 3  # one whole-canvas refresh per block (3 blocks of 8 slots): Fast-dLLM's dual cache


# -- every supported release's file set loads through the CLI and edits a file ----------------


def _release(kind: str, root: Path) -> Path:
    from family_checkpoints import write_open_dcoder

    writers = {
        "LLaDA-8B-Base": lambda p: write_llada(p), "LLaDA-8B-Instruct": lambda p: write_llada(p, instruct=True),
        "LLaDA-1.5": lambda p: write_llada(p, instruct=True, seed=7),
        "Dream-v0-Base-7B": lambda p: write_dream_release(p), "Dream-v0-Instruct-7B": lambda p: write_dream_release(p, seed=6),
        "Dream-Coder-v0-Instruct-7B": lambda p: write_dream_release(p, seed=8),
        "DiffuCoder-7B-Base": lambda p: write_dream_release(p, variant="diffucoder"),
        "DiffuCoder-7B-cpGRPO": lambda p: write_dream_release(p, variant="diffucoder", seed=9),
        "Open-dCoder-0.5B": lambda p: write_open_dcoder(p),
    }
    return writers[kind](root / kind)


@pytest.mark.parametrize("kind", ["LLaDA-8B-Base", "LLaDA-8B-Instruct", "LLaDA-1.5", "Dream-v0-Base-7B", "Dream-v0-Instruct-7B",
                                  "Dream-Coder-v0-Instruct-7B", "DiffuCoder-7B-Base", "DiffuCoder-7B-cpGRPO", "Open-dCoder-0.5B"])
def test_each_release_file_set_edits_a_file_in_place(kind, tmp_path):
    from family_checkpoints import RELEASE_FILES

    path = _release(kind, tmp_path)
    shipped = {p.name for p in path.iterdir()}
    family = next((names for label, names in RELEASE_FILES.items() if kind.split("-")[0] in label), None)
    if family is not None:  # exactly the release's files: none missing, none extra
        expected = {n for n in family if "*" not in n} | {n for n in shipped if n.startswith("model-") and n.endswith(".safetensors")}
        assert shipped == expected, shipped ^ expected
    target = tmp_path / "f.py"
    original = "def add(a, b):\n    return a + b\n"
    target.write_text(original)
    proc = subprocess.run([sys.executable, "-m", "sharpen.app.cli", str(target), "--apply-edit", "2:12-2:17", "--model", str(path),
                           "--device", "cpu", "--steps", "3", "--in-place"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    edited = target.read_text()
    assert edited.startswith("def add(a, b):\n    return ") and edited.endswith("\n")


# -- the releases' own files (tests/releases/): fixtures change sizes only ------------------------

def _block_fixtures():
    from block_checkpoints import write_fast_dllm_v2, write_sdar

    return {"SDAR-8B-Chat": lambda p: write_sdar(p), "SDAR-4B-Chat": lambda p: write_sdar(p, release="SDAR-4B-Chat"),
            "Fast_dLLM_v2_7B": write_fast_dllm_v2}


def test_every_release_record_names_its_source():
    from release_checkpoints import RELEASES, facts, recorded, source

    assert {"SDAR-8B-Chat", "SDAR-4B-Chat", "Fast_dLLM_v2_7B", "LLaDA2.0-mini"} <= set(recorded())
    for release in recorded():
        line = source(release)
        assert "\n" not in line and "read 20" in line, release  # one line: repository and commit (or page), date read
        assert "config.json" in facts(release) and facts(release)["files"], release
    assert not [p for p in RELEASES.iterdir() if p.is_dir() and not (p / "facts.json").exists()]


@pytest.mark.parametrize("release", ["SDAR-8B-Chat", "SDAR-4B-Chat", "Fast_dLLM_v2_7B"])
def test_a_fixture_has_exactly_the_releases_keys_and_values(release, tmp_path):
    """config.json, generation_config.json, special_tokens_map.json, tokenizer_config.json and
    added_tokens.json: the release's keys, none added, none dropped or renamed; every value the
    release's except the sizes and the special ids (moved with their tokens); the weight names of
    its index; its file set."""
    from block_checkpoints import LAYERS
    from release_checkpoints import facts, key_drift, special_tokens, weight_names

    record = facts(release)
    path = _block_fixtures()[release](tmp_path / release)
    sizes = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
             "max_window_layers", "vocab_size", "layer_types"}
    for name in ("config.json", "generation_config.json", "special_tokens_map.json", "tokenizer_config.json", "added_tokens.json"):
        if name not in record:
            assert not (path / name).exists(), name
            continue
        written = json.loads((path / name).read_text())
        assert key_drift(written, record[name]) == [], name
        for key, value in record[name].items():
            if key in sizes or key.endswith("_token_id") or key in ("added_tokens_decoder", "chat_template") or name == "added_tokens.json":
                continue  # sizes, and ids: checked below through their tokens
            assert written[key] == value, (name, key)
    tiny = Tokenizer.from_directory(path)
    for release_id, text in special_tokens(record):  # every special id moved with its token, in the release's order
        assert tiny.token_id(text) is not None, text
    ids = [tiny.token_id(text) for _, text in special_tokens(record)]
    assert ids == sorted(ids) and ids == list(range(ids[0], ids[0] + len(ids)))
    moved = dict(zip([i for i, _ in special_tokens(record)], ids))
    if "added_tokens.json" in record:  # SDAR's calls 151669 <MASK> where its tokenizer says <|MASK|>: the id keeps its place
        assert json.loads((path / "added_tokens.json").read_text()) == {t: moved[i] for t, i in record["added_tokens.json"].items()}
    config = json.loads((path / "config.json").read_text())
    for key in [k for k in record["config.json"] if k.endswith("_token_id") and record["config.json"][k] is not None]:
        texts = dict(special_tokens(record))
        assert tiny.token_id(texts[record["config.json"][key]]) == config[key], key
    index = json.loads((path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(weight_names(record, LAYERS))
    assert set(record["files"]) <= {p.name for p in path.iterdir()}


@pytest.mark.parametrize("version", ["2.0", "2.1"])
def test_the_llada2_fixture_has_the_releases_config_keys(tmp_path, version):
    """LLaDA2.0-mini's config.json (the one file of it found): the fixture's keys are the release's;
    2.1 adds use_qk_norm, which no file of 2.1 at hand confirms (docs/models.md)."""
    from moe_checkpoints import write_llada2
    from release_checkpoints import facts, key_drift

    record = facts("LLaDA2.0-mini")["config.json"]
    written = json.loads((write_llada2(tmp_path / "llada2", version=version) / "config.json").read_text())
    assert key_drift(written, record) == ([] if version == "2.0" else ["adds use_qk_norm"])
    sizes = {"num_hidden_layers", "hidden_size", "intermediate_size", "first_k_dense_replace", "max_position_embeddings",
             "moe_intermediate_size", "num_experts_per_tok", "num_attention_heads", "num_experts", "num_key_value_heads", "head_dim",
             "num_shared_experts", "vocab_size", "rotary_dim", "n_group", "topk_group", "pad_token_id"}
    assert {k: v for k, v in written.items() if k not in sizes and k in record} == {k: v for k, v in record.items() if k not in sizes}


def test_key_drift_catches_a_fixture_that_adds_the_training_copys_keys(tmp_path):
    """SDAR's training copy of config.json adds block_size and mask_token_id: the hub's does not."""
    from block_checkpoints import write_sdar
    from release_checkpoints import facts, key_drift

    path = write_sdar(tmp_path / "sdar", training_copy=True)
    drift = key_drift(json.loads((path / "config.json").read_text()), facts("SDAR-8B-Chat")["config.json"])
    assert sorted(drift) == ["adds block_size", "adds mask_token_id"]
    renamed = {("bd_size_" if k == "bd_size" else k): v for k, v in facts("Fast_dLLM_v2_7B")["config.json"].items()}
    assert sorted(key_drift(renamed, facts("Fast_dLLM_v2_7B")["config.json"])) == ["adds bd_size_", "drops bd_size"]


@pytest.fixture(scope="module")
def sdar_as_shipped(tmp_path_factory):
    from block_checkpoints import write_sdar

    return write_sdar(tmp_path_factory.mktemp("sdar-hub") / "SDAR-8B-Chat")


def test_sdar_chat_as_shipped_loads_with_block_4_and_the_tokenizers_mask(sdar_as_shipped):
    config = json.loads((sdar_as_shipped / "config.json").read_text())
    assert "block_size" not in config and "mask_token_id" not in config
    den = load_denoiser(sdar_as_shipped)
    assert den.spec.block.size == 4  # generate.py's --block_length default, the default releases' block size
    assert den.spec.mask_id == den.tokenizer.token_id("<|MASK|>")


@pytest.mark.parametrize("mode", ["infill", "rewrite"])
def test_sdar_chat_as_shipped_edits_headless(sdar_as_shipped, tmp_path, mode):
    target = tmp_path / "f.py"
    original = "def add(a, b):\n    return a + b\n"
    target.write_text(original)
    extra = ["--mode", "rewrite", "--instruction", "use sum"] if mode == "rewrite" else []
    proc = subprocess.run([sys.executable, "-m", "sharpen.app.cli", str(target), "--apply-edit", "2:12-2:17", "--model", str(sdar_as_shipped),
                           "--device", "cpu", "--steps", "4", "--in-place", *extra], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # a success prints nothing on stderr
    edited = target.read_text()
    assert edited.startswith("def add(a, b):\n    return ") and edited.endswith("\n")


@pytest.mark.parametrize("name, size", [("SDAR-4B-Chat-b16", 16), ("SDAR-1.7B-Chat-b64", 64), ("SDAR-8B-Chat", 4)])
def test_a_block_size_variant_takes_its_size_from_its_name(tmp_path, name, size):
    from block_checkpoints import write_sdar

    path = write_sdar(tmp_path / name)
    assert load_denoiser(path).spec.block.size == size
    # in a hub cache the directory is the snapshot's hash: the repository's name says it
    cached = tmp_path / "hub" / f"models--JetLM--{name}" / "snapshots" / "0123abcd"
    cached.parent.mkdir(parents=True)
    path.rename(cached)
    assert load_denoiser(cached).spec.block.size == size


def test_a_config_block_size_is_used_and_a_bad_one_refused(tmp_path):
    from block_checkpoints import write_sdar

    path = write_sdar(tmp_path / "SDAR-8B-Chat-b16", training_copy=True)
    assert load_denoiser(path).spec.block.size == 4  # the file says 4: it wins over the name
    config = json.loads((path / "config.json").read_text())
    config["block_size"] = 0
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="block_size=0"):
        load_denoiser(path)


def test_cfg_scale_is_refused_by_a_block_causal_release(sdar_as_shipped, tmp_path):
    target = tmp_path / "f.py"
    target.write_text("x = 1\n")
    proc = subprocess.run([sys.executable, "-m", "sharpen.app.cli", str(target), "--apply-edit", "1:5-1:6", "--model", str(sdar_as_shipped),
                           "--device", "cpu", "--in-place", "--cfg-scale", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "sdar models' reference has none" in proc.stderr, proc.stderr
    assert target.read_text() == "x = 1\n"


def _released(kind: str, path: Path) -> Path:
    from block_checkpoints import write_fast_dllm_v2, write_sdar, write_stable_diffcoder
    from moe_checkpoints import write_llada2

    return {"SDAR-4B-Chat": lambda: write_sdar(path, release="SDAR-4B-Chat"), "SDAR-1.7B-Chat": lambda: write_sdar(path, tie=True),
            "Fast_dLLM_v2_7B": lambda: write_fast_dllm_v2(path), "Stable-DiffCoder-8B-Instruct": lambda: write_stable_diffcoder(path),
            "LLaDA2.0-mini": lambda: write_llada2(path), "LLaDA2.1-mini": lambda: write_llada2(path, version="2.1")}[kind]()


@pytest.mark.parametrize("kind", ["SDAR-4B-Chat", "SDAR-1.7B-Chat", "Fast_dLLM_v2_7B", "Stable-DiffCoder-8B-Instruct", "LLaDA2.0-mini",
                                  "LLaDA2.1-mini"])
def test_each_block_release_infills_and_rewrites_headless(kind, tmp_path):
    """The releases' config files at tiny sizes: infill and rewrite headless exit 0, the file edited
    in place, nothing on stderr."""
    path = _released(kind, tmp_path / kind)
    for extra in ([], ["--mode", "rewrite", "--instruction", "use sum"]):
        target = tmp_path / "f.py"
        target.write_text("def add(a, b):\n    return a + b\n")
        more = ["--editing", "off"] if kind == "LLaDA2.0-mini" else []
        # Fast-dLLM v2 and LLaDA2.1 decode by thresholds: their references take no step count, so --steps is refused
        steps = [] if kind in ("Fast_dLLM_v2_7B", "LLaDA2.1-mini") else ["--steps", "4"]
        proc = subprocess.run([sys.executable, "-m", "sharpen.app.cli", str(target), "--apply-edit", "2:12-2:17", "--model", str(path),
                               "--device", "cpu", *steps, "--in-place", *more, *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and proc.stderr == "", (extra, proc.stderr)
        edited = target.read_text()
        assert edited.startswith("def add(a, b):\n    return ") and edited.endswith("\n")


def test_sdar_30b_a3b_loads_without_the_training_copys_keys(tmp_path):
    """SDAR-30B-A3B's hub config.json was not found (docs/models.md); serving code (sglang, lmdeploy)
    hard-codes its mask and block size as for the dense releases, whose hub files lack both keys:
    without them it loads with blocks of 4 and the tokenizer's <|MASK|>."""
    from moe_checkpoints import write_sdar_moe

    path = write_sdar_moe(tmp_path / "SDAR-30B-A3B-Chat")
    config = json.loads((path / "config.json").read_text())
    del config["block_size"], config["mask_token_id"]
    (path / "config.json").write_text(json.dumps(config))
    den = load_denoiser(path)
    assert den.spec.block.size == 4 and den.spec.mask_id == den.tokenizer.token_id("<|MASK|>")
