"""Run JetAstra/SDAR's own generate loop on the tiny SDAR checkpoint once; write sdar_generate.json.

    python tests/golden/sdar_generate.py SDAR_CLONE [--out tests/golden/sdar_generate.json]

SDAR_CLONE is a checkout of https://github.com/JetAstra/SDAR. The script writes the tiny
checkpoint of tests/block_checkpoints.py (SDAR-8B-Chat's layout), puts the release's real
remote code next to it (training/model/SDAR-8B-Chat: configuration_sdar.py, modeling_sdar.py,
fused_linear_diffusion_cross_entropy.py), loads it with transformers' AutoModelForCausalLM
(trust_remote_code), and runs `block_diffusion_generate` imported from the clone's generate.py,
unchanged. Nothing of either file is edited.

modeling_sdar.py imports flash-attn (a CUDA-only package) for its RMSNorm and for attention in
decoding. On a machine without it, this script registers a stand-in `flash_attn` module whose
two functions compute the same thing in plain torch (an RMSNorm over the last dim; softmax
attention without a mask, with grouped key/value heads), so the reference runs on a CPU. The
release's code needs transformers 4.52 (it imports names 5.x removed): run this script with
transformers==4.52.4 and einops on the path (pip install --target DIR, then PYTHONPATH=DIR).
"""
from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from block_checkpoints import write_sdar  # noqa: E402

REMOTE = ("configuration_sdar.py", "modeling_sdar.py", "fused_linear_diffusion_cross_entropy.py")
RELEASE_DIR = "training/model/SDAR-8B-Chat"
# (prompt length, generated tokens, seed, temperature, top_k, top_p, remasking, denoising steps)
CASES = [
    (8, 16, 0, 1.0, 0, 1.0, "low_confidence_dynamic", 4),
    (10, 14, 1, 1.0, 0, 1.0, "low_confidence_dynamic", 4),
    (8, 16, 2, 0.7, 20, 0.95, "low_confidence_dynamic", 4),
    (5, 11, 3, 1.0, 0, 1.0, "low_confidence_static", 4),
    (12, 12, 4, 1.0, 0, 1.0, "low_confidence_static", 2),
    # Fewer steps than the block's 4: a step's share can exceed the masks left (a prompt's tail in the
    # first block, or a threshold commit), and generate.py's top-k then also picks positions that are
    # no longer masked and overwrites them (sharpen never does: docs/models.md). `overwrites` records
    # each such write, seen from the inputs of the reference's successive passes over a block.
    (9, 11, 5, 1.0, 0, 1.0, "low_confidence_dynamic", 2),
    (7, 9, 6, 1.0, 0, 1.0, "low_confidence_static", 3),
    (10, 10, 7, 1.0, 0, 1.0, "low_confidence_dynamic", 3),
    (8, 16, 8, 0.2, 0, 1.0, "low_confidence_dynamic", 2),
    (6, 14, 9, 1.0, 0, 1.0, "low_confidence_static", 2),
    # What a user passes as --block-size / --threshold: generate.py's block_length and
    # confidence_threshold at other values than the release's 4 and 0.85 (the last two fields).
    (6, 18, 10, 1.0, 0, 1.0, "low_confidence_dynamic", 8, 8, 0.85),
    (11, 13, 11, 0.5, 0, 1.0, "low_confidence_dynamic", 4, 4, 0.05),
    (5, 15, 12, 1.0, 0, 1.0, "low_confidence_dynamic", 2, 2, 0.3),
    (9, 23, 13, 0.7, 20, 0.95, "low_confidence_static", 8, 8, 0.85),
]


def flash_attn_stand_in() -> None:
    """`flash_attn` as modeling_sdar.py imports it, in plain torch (see the module docstring)."""
    def rms_norm_fn(x, weight, bias=None, residual=None, eps=1e-6, **_):
        x32 = x.float()
        out = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
        return (out if bias is None else out + bias).to(x.dtype)

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, **_):  # [B, L, H, D]
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=softmax_scale,
                                                               enable_gqa=k.shape[1] != q.shape[1])
        return out.transpose(1, 2)

    root = types.ModuleType("flash_attn")
    root.flash_attn_func = flash_attn_func
    ops, triton_ops, layer_norm = (types.ModuleType(n) for n in ("flash_attn.ops", "flash_attn.ops.triton", "flash_attn.ops.triton.layer_norm"))
    layer_norm.rms_norm_fn = rms_norm_fn
    for module in (root, ops, triton_ops, layer_norm):
        module.__spec__ = importlib.machinery.ModuleSpec(module.__name__, None)  # transformers probes find_spec
        sys.modules[module.__name__] = module


def overwrites(passes: list[tuple[int, list[int]]], mask_id: int) -> list[list[int]]:
    """[position, held token, written token] for every position that held a token (prompt or
    committed) in one pass over a block and another in the next pass over the same block."""
    out = []
    for (start, before), (again, after) in zip(passes, passes[1:]):
        if again == start and len(before) == len(after):
            out += [[start + i, a, b] for i, (a, b) in enumerate(zip(before, after)) if a != mask_id and a != b]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("clone", type=Path, help="a checkout of github.com/JetAstra/SDAR")
    parser.add_argument("--out", type=Path, default=HERE / "sdar_generate.json")
    args = parser.parse_args()
    commit = subprocess.run(["git", "-C", str(args.clone), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    import transformers
    from transformers import AutoModelForCausalLM

    if "flash_attn" not in sys.modules and importlib.util.find_spec("flash_attn") is None:
        flash_attn_stand_in()
    spec = importlib.util.spec_from_file_location("sdar_generate_reference", args.clone / "generate.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = write_sdar(Path(tmp) / "sdar-tiny")
        for name in REMOTE:
            shutil.copy(args.clone / RELEASE_DIR / name, ckpt / name)
        config = json.loads((ckpt / "config.json").read_text())
        model = AutoModelForCausalLM.from_pretrained(str(ckpt), trust_remote_code=True, torch_dtype=torch.float32).eval()
        generation = json.loads((ckpt / "generation_config.json").read_text())
        stops = generation["eos_token_id"]
        cases = []
        passes = []  # (first position, input ids) of every pass the reference runs, for `overwrites`
        model.register_forward_pre_hook(lambda module, args, kwargs: passes.append(
            (int(kwargs["position_ids"][0, 0]), args[0][0].tolist())), with_kwargs=True)
        for prompt_len, gen_len, seed, temperature, top_k, top_p, remasking, steps, *knobs in CASES:
            block, threshold = knobs or (config["block_size"], 0.85)
            passes.clear()
            prompt = torch.randint(0, 290, (1, prompt_len), generator=torch.Generator().manual_seed(100 + seed))
            torch.manual_seed(seed)  # generate.py draws from torch's global generator
            out = reference.block_diffusion_generate(
                model, {"input_ids": prompt}, config["mask_token_id"], gen_length=gen_len, block_length=block,
                denoising_steps=steps, temperature=temperature, top_k=top_k, top_p=top_p, remasking_strategy=remasking,
                confidence_threshold=threshold, stopping_criteria_idx=stops)
            cases.append({"prompt": prompt[0].tolist(), "gen_length": gen_len, "seed": seed, "temperature": temperature,
                          "top_k": top_k, "top_p": top_p, "remasking": remasking, "denoising_steps": steps,
                          "block_length": block, "confidence_threshold": threshold,
                          "output": out[0].tolist(), "overwrites": overwrites(passes, config["mask_token_id"])})
    golden = {
        "reference": {"repository": "https://github.com/JetAstra/SDAR", "commit": commit,
                      "loop": "generate.py block_diffusion_generate", "model": f"{RELEASE_DIR}/modeling_sdar.py",
                      "transformers": transformers.__version__,
                      "flash_attn": "stand-in (plain torch, this script)" if isinstance(sys.modules["flash_attn"], types.ModuleType)
                      and not hasattr(sys.modules["flash_attn"], "__file__") else "installed"},
        "checkpoint": "tests/block_checkpoints.py write_sdar(seed=7), float32",
        "mask_id": config["mask_token_id"], "block_size": config["block_size"], "confidence_threshold": 0.85,
        "stopping_criteria_idx": stops, "cases": cases,
    }
    args.out.write_text(json.dumps(golden, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(cases)} cases, {args.clone} at {commit[:10]})")


if __name__ == "__main__":
    main()
