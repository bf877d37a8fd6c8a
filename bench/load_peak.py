"""Peak memory while loading a checkpoint, per precision, against the weights it loads.

    python bench/load_peak.py                      # writes a ~180M-parameter Dream-layout checkpoint to a temp dir
    python bench/load_peak.py --model DIR          # an existing checkpoint directory
    python bench/load_peak.py --device cuda        # GPU memory (torch's allocator peak) as well as host RSS

Each row loads in a fresh Python process, so no row inherits another's allocator state:
the process first loads the embedded model (every import the loader needs is then paid),
resets the kernel's resident-set high-water mark (/proc/self/clear_refs), loads the
checkpoint through `load_denoiser` and reports VmHWM above the RSS it had just before. That
counts everything the process touched, file pages it mapped included, which tracemalloc
would not see. "weights" is what the loaded model's parameters take; the int8 rows are
also compared with the float32 weights (the issue's bound: within 0.5x of them).

A benchmark, not a test: it prints a table and asserts nothing (tests/test_loading.py
asserts the bounds on a smaller checkpoint). `rows()` is what bench/gpu_ready.py imports.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

# Dream-layout (Qwen2.5 names, q/k/v biases, untied head) at about 180M parameters, in the
# proportions of the 7B release: the embedding and the head are about 14% of the weights.
DREAM_180M = dict(vocab_size=12800, hidden_size=1024, intermediate_size=2816, num_hidden_layers=14,
                  num_attention_heads=16, num_key_value_heads=2)
DREAM_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                 "<|beginoftext|>", "<|mask|>")
ROWS = (  # label, dtype, quantize, with a device map
    ("float32", "float32", None, False),
    ("bfloat16", "bfloat16", None, False),
    ("int8", "float32", "int8", False),
    ("int8 + device map", "float32", "int8", True),
)

_CHILD = r"""
import gc, json, sys
import torch
from sharpen.core.models.loading import embedded_model_path, load_denoiser, model_config, read_config
from sharpen.core.models.quantize import weight_bytes

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))

path, dtype, quantize, device_map, device = json.loads(sys.argv[1])
dtype = getattr(torch, dtype)
load_denoiser(embedded_model_path(), device=device)  # imports and one-off allocations, outside the measurement
plan = None
if device_map:
    from sharpen.core.models.placement import plan as make_plan
    _, cfg = model_config(path, read_config(__import__("pathlib").Path(path)))
    max_memory = {0: torch.cuda.mem_get_info(0)[0] // 2, "cpu": 64 * 2**30} if device == "cuda" else {"cpu": 64 * 2**30}
    plan = make_plan(cfg, dtype, max_memory, quantize).device_map
gc.collect()
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    reset = True
except OSError:
    reset = False
base = status("VmRSS")
gpu_base = 0
if device == "cuda":
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); gpu_base = torch.cuda.memory_allocated()
den = load_denoiser(path, device=device, dtype=dtype, device_map=plan, quantize=quantize)
out = {"peak": status("VmHWM") - base, "kept": status("VmRSS") - base, "weights": weight_bytes(den.model), "reset": reset}
if device == "cuda":
    torch.cuda.synchronize(); out["gpu_peak"] = torch.cuda.max_memory_allocated() - gpu_base
print(json.dumps(out))
"""


def measure(path: str | Path, dtype: str = "float32", quantize: str | None = None, device_map: bool = False,
            device: str = "cpu") -> dict:
    """One load in a fresh process: {"peak", "kept", "weights"} in bytes (and "gpu_peak" on CUDA)."""
    arg = json.dumps([str(path), dtype, quantize, device_map, device])
    proc = subprocess.run([sys.executable, "-c", _CHILD, arg], capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"load failed ({dtype}, {quantize}, device map {device_map}): {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def float32_bytes(path: str | Path) -> int:
    """The checkpoint's weights in float32, from the shards' headers."""
    from sharpen.core.models.loading import weight_files
    from sharpen.core.models.shards import Shards

    with Shards(weight_files(Path(path))) as shards:
        return sum(math.prod(shape) * 4 for shape in shards.shapes().values())


def rows(path: str | Path, device: str = "cpu", which=ROWS) -> list[dict]:
    """The table's rows: label, peak / loaded weights, peak / float32 weights, and the bytes."""
    fp32 = float32_bytes(path)
    out = []
    for label, dtype, quantize, device_map in which:
        m = measure(path, dtype, quantize, device_map, device)
        peak = m.get("gpu_peak", m["peak"])
        out.append({"row": label, "peak": peak, "host_peak": m["peak"], "weights": m["weights"], "float32_weights": fp32,
                    "vs_weights": peak / m["weights"], "vs_float32": peak / fp32, "reset": m["reset"]})
    return out


def write_dream_checkpoint(out: Path, dims: dict = DREAM_180M, shards: int = 2, dtype: str = "float32", seed: int = 0) -> Path:
    """A Dream-v0 checkpoint as released (config.json with model_type Dream, the Qwen2 tokenizer's
    vocab.json + merges.txt + added_tokens.json + tokenizer_config.json, generation_config.json,
    sharded safetensors with the index), random weights at `dims`."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    from sharpen.core.tokenizer import QWEN2_SPLIT

    out.mkdir(parents=True, exist_ok=True)
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    sources = [p.read_text(encoding="utf-8") for p in sorted(Path(__file__).resolve().parents[1].glob("core/*.py"))]
    hf.train_from_iterator(sources, trainers.BpeTrainer(vocab_size=2048, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                        show_progress=False))
    hf.model.save(str(out))  # vocab.json, merges.txt
    base = hf.get_vocab_size()
    ids = {token: base + i for i, token in enumerate(DREAM_SPECIAL)}
    vocab = max(dims["vocab_size"], 64 * math.ceil((base + len(ids)) / 64))  # released embeddings are padded past the tokenizer

    def write(name: str, data: dict) -> None:
        (out / name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

    write("added_tokens.json", ids)
    write("special_tokens_map.json", {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                                      "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|beginoftext|>"]})
    write("tokenizer_config.json", {
        "added_tokens_decoder": {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                                          "special": not t.startswith("<|fim")} for t, i in ids.items()},
        "bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": "<|mask|>",
        "tokenizer_class": "DreamTokenizer", "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
        "model_max_length": 131072})
    write("config.json", {
        "architectures": ["DreamModel"], "model_type": "Dream", **dims, "vocab_size": vocab,
        "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "rope_scaling": None, "use_sliding_window": False, "sliding_window": None,
        "attention_dropout": 0.0, "torch_dtype": dtype, "mask_token_id": ids["<|mask|>"], "pad_token_id": ids["<|endoftext|>"],
        "bos_token_id": ids["<|beginoftext|>"], "eos_token_id": ids["<|endoftext|>"]})
    write("generation_config.json", {"bos_token_id": ids["<|beginoftext|>"], "eos_token_id": ids["<|endoftext|>"],
                                     "pad_token_id": ids["<|endoftext|>"], "mask_token_id": ids["<|mask|>"]})
    for name in ("configuration_dream.py", "modeling_dream.py", "generation_utils.py", "tokenization_dream.py"):
        (out / name).write_text(f"# {name}: the release's remote code stands here; sharpen loads Dream natively\n")
    d, hd, kv, f = dims["hidden_size"], dims["hidden_size"] // dims["num_attention_heads"], dims["num_key_value_heads"], dims["intermediate_size"]
    shapes = {"model.embed_tokens.weight": (vocab, d)}
    for i in range(dims["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (d,), p + "self_attn.q_proj.weight": (d, d), p + "self_attn.q_proj.bias": (d,),
                       p + "self_attn.k_proj.weight": (kv * hd, d), p + "self_attn.k_proj.bias": (kv * hd,),
                       p + "self_attn.v_proj.weight": (kv * hd, d), p + "self_attn.v_proj.bias": (kv * hd,),
                       p + "self_attn.o_proj.weight": (d, d), p + "post_attention_layernorm.weight": (d,),
                       p + "mlp.gate_proj.weight": (f, d), p + "mlp.up_proj.weight": (f, d), p + "mlp.down_proj.weight": (d, f)})
    shapes.update({"model.norm.weight": (d,), "lm_head.weight": (vocab, d)})
    gen = torch.Generator().manual_seed(seed)
    names = list(shapes)
    per = math.ceil(len(names) / shards)
    weight_map, total = {}, 0
    for k in range(shards):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {}
        for name in names[k * per:(k + 1) * per]:  # one shard in memory at a time
            shape = shapes[name]
            t = torch.randn(shape, generator=gen)
            part[name] = (1 + 0.1 * t if "norm" in name else 0.1 * t if name.endswith("bias") else t / math.sqrt(shape[-1])).to(getattr(torch, dtype))
        save_file(part, str(out / file), metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
        total += sum(t.nbytes for t in part.values())
        del part
    write("model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a checkpoint directory (default: write a ~180M Dream-layout one to a temp dir)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--rows", default=",".join(r[0] for r in ROWS), help="which rows, comma-separated")
    args = parser.parse_args(argv)
    wanted = [r for r in ROWS if r[0] in args.rows.split(",")]
    with tempfile.TemporaryDirectory(prefix="sharpen-load-peak-") as tmp:
        path = Path(args.model) if args.model else write_dream_checkpoint(Path(tmp) / "dream-180m")
        fp32 = float32_bytes(path)
        print(f"# load peak, {path.name}: {fp32 / 4 / 1e6:.0f}M parameters, {fp32 / 2**20:.0f} MiB in float32, device {args.device}")
        unit = "GPU allocator peak" if args.device == "cuda" else "peak RSS above the process's RSS before the load"
        print(f"# peak: {unit}; weights: the loaded model's parameters")
        print(f"{'row':<20} {'peak MiB':>9} {'weights MiB':>12} {'peak/weights':>13} {'peak/fp32 weights':>18}")
        for r in rows(path, args.device, wanted):
            print(f"{r['row']:<20} {r['peak'] / 2**20:>9.0f} {r['weights'] / 2**20:>12.0f} {r['vs_weights']:>13.2f} {r['vs_float32']:>18.2f}"
                  + ("" if r["reset"] else "  (high-water mark not reset: includes imports)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
