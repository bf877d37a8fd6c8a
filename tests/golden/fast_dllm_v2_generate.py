"""Run Fast-dLLM v2's own `batch_sample` on the tiny Fast-dLLM v2 checkpoint once; write fast_dllm_v2_generate.json.

    PYTHONPATH=DIR python tests/golden/fast_dllm_v2_generate.py FAST_DLLM_GIT RELEASE_GIT [--out FILE]

The reference is two files nobody here may edit:

- the loop: `v2/generation_functions.py` (`Fast_dLLM_QwenForCausalLM.batch_sample`) of
  github.com/NVlabs/Fast-dLLM at d259b48 (2025-10-07, "update v2", by the paper's first author;
  unchanged through 6cf2722 of 2025-10-23). FAST_DLLM_GIT is any git directory holding that
  commit: the mirror used was github.com/mgustineli/Fast-dLLM, a fork carrying NVlabs' history.
- the model: the release's remote code (`modeling.py`, `configuration.py` of
  huggingface.co/Efficient-Large-Model/Fast_dLLM_v2_7B), which ships only on the hub. The copy
  run is the one vendored with the rest of the release's files (config.json, tokenizer files,
  model card) at github.com/Satgoy152/DualDiffusion 189fa7a, FastDLLM-inferencing/Fast_dLLM_v2_7B/
  (RELEASE_GIT is a git directory of that repository). That commit added one argument to the
  file's own `generate` (`steps`); `batch_sample` never calls `generate`, and everything it
  does call (both forwards, the attention with its cache, the rotary table, the block mask,
  `sample_with_top_p`) reads the same in two more copies of the release file compared by hand
  (Xenearkr/Fast-dLLM v2/base_models/Fast_dLLM_v2_7B/modeling.py, HoangMaizzz/failfasttesting
  Fast_dLLM_v2_1.5B/modeling.py). The sha256 of each file run is checked and recorded.

The files are written next to the tiny checkpoint of tests/block_checkpoints.py
(write_fast_dllm_v2, Fast_dLLM_v2_7B's file set, float32) byte for byte. The release was
written for transformers 4.53.1; under the transformers installed here (5.x) four things it
uses are gone, and this script puts back each one at run time without touching either file:

1. `ROPE_INIT_FUNCTIONS["default"]`: 5.x dropped the default entry. The stand-in computes what
   4.53's `_compute_default_rope_parameters` does (inverse frequencies base ** (-2i / head_dim),
   attention scaling 1.0).
2. `DynamicCache[i]` -> (keys, values) and `cache.key_cache[i]` / `value_cache[i]` (read and
   assign): 5.x keeps them in `cache.layers[i].keys / .values`. The stand-ins read and write
   those.
3. `@auto_docstring` on generation_functions.py's bare class: 5.x refuses a class it cannot
   name; while that file executes the decorator returns the class unchanged (it only writes a
   docstring).
4. 5.x's `from_pretrained` builds remote-code models on the meta device and leaves the
   release's non-persistent `inv_freq` buffer unfilled (uninitialised memory). The model is
   therefore built with `from_config` (its `__init__` computes the buffer, as in 4.53) and the
   shards are loaded with `load_state_dict(strict=True)`.

Under transformers 4.53.1 itself (pip install --target DIR transformers==4.53.1 einops, numpy
left to the venv) stand-ins 1 and 2 find nothing missing and stay out; that run wrote the same
cases as the committed 5.24 run, token for token and pass for pass.

Besides those, the script only wraps the model's forward to count the denoising passes
(observing, not changing, what batch_sample does) and seeds torch's global generator per case.
Two paths of batch_sample are kept out of the cases on purpose: a prompt of exactly one block
(it is not prefilled, `min_len > block_size`, and the next block is decoded at positions 0..31
with no prompt in the cache; sharpen prefills it, docs/models.md) and a stop token committed in
the first block of a prompt of at most one block (batch_sample then reads `len(None)` of the
cache it never built, and raises).

modeling.py imports einops (unused): put it on the path (pip install --target DIR einops, then
PYTHONPATH=DIR). No device string needed changing: batch_sample follows `self.device` (CPU).
The run is greedy at the release's defaults (threshold 0.95, small_block_size 8, bd_size 32,
use_block_cache False, temperature 0: eval.py's settings), plus three cases at a low temperature
(top-p 0.95, its default) and lower thresholds, where steps commit several tokens; batch size 1
(sharpen decodes one prompt per span). Each case also records how many denoising passes ran.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from block_checkpoints import write_fast_dllm_v2  # noqa: E402

LOOP = ("https://github.com/NVlabs/Fast-dLLM", "d259b48a570245e4dc3a75db30da44122be990da", "v2/generation_functions.py",
        "49b3168403f411259e6fae74edcace17ac44f0c343b35830f92d94acd46de3a1")
RELEASE = ("https://github.com/Satgoy152/DualDiffusion", "189fa7a74a83119647dad36b24363cc4e89370ab", "FastDLLM-inferencing/Fast_dLLM_v2_7B",
           {"modeling.py": "d0ff084e2a1df206cb85a4a21f3e8bbc9c03d2bb82c0fa1a380f4f1657a14888",
            "configuration.py": "760e76af3a1fdf23e70868eea0d221aae186b41eafdfc35222e79e1d14b22f4c"})
BLOCK, SMALL_BLOCK, THRESHOLD, TOP_P = 32, 8, 0.95, 0.95  # batch_sample's defaults
# (prompt length, generated slots, seed of the prompt, stop token): prompt and slots end on a block
# boundary, so batch_sample's last block is sharpen's. A prompt under one block (no prefill), ones
# ending inside a block (prefill of the whole blocks, the rest decoded with the slots), one of
# exactly two blocks (the prefill's last row writes the first slot: the token shift), and one the
# stop token ends two blocks early. The stop is the release's default, <|im_end|>, except in the
# last case: this random model never writes <|im_end|>, so that case stops at the release's other
# eos id (generation_config.json), <|endoftext|>, to run batch_sample's stop path.
CASES = [(10, 54, 10, "<|im_end|>", 0.95, 0.0), (40, 24, 40, "<|im_end|>", 0.95, 0.0), (64, 64, 64, "<|im_end|>", 0.95, 0.0),
         (70, 58, 70, "<|im_end|>", 0.95, 0.0), (27, 37, 3, "<|im_end|>", 0.95, 0.0), (50, 78, 5, "<|im_end|>", 0.95, 0.0),
         (54, 74, 14, "<|endoftext|>", 0.95, 0.0),
         # A random model's greedy probabilities stay far under any threshold (every step commits
         # its one most probable token); at a low temperature they pass it, and several tokens
         # commit a step. batch_sample then draws from torch's global generator, seeded here.
         (64, 64, 64, "<|im_end|>", 0.95, 0.1), (70, 58, 70, "<|im_end|>", 0.7, 0.05), (50, 78, 5, "<|im_end|>", 0.3, 0.1)]


def git_file(git: Path, commit: str, path: str, sha256: str) -> bytes:
    data = subprocess.run(["git", "-C", str(git), "show", f"{commit}:{path}"], capture_output=True, check=True).stdout
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SystemExit(f"{path} at {commit[:10]} is not the file this golden was made from")
    return data


def transformers_453_stand_ins() -> None:
    """Shims 1-2 of the module docstring (what transformers 5.x removed)."""
    import transformers.modeling_rope_utils as rope
    from transformers.cache_utils import DynamicCache

    def default_rope(config, device=None, seq_len=None):
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim))
        return inv_freq, 1.0

    rope.ROPE_INIT_FUNCTIONS.setdefault("default", default_rope)

    class Side:
        """cache.key_cache / value_cache as 4.53 had them: a list per layer, read and assigned."""
        def __init__(self, cache, name):
            self.cache, self.name = cache, name

        def __getitem__(self, i):
            return getattr(self.cache.layers[i], self.name)

        def __setitem__(self, i, tensor):
            setattr(self.cache.layers[i], self.name, tensor)

        def __len__(self):
            return len(self.cache.layers)

    if not hasattr(DynamicCache, "__getitem__"):
        DynamicCache.__getitem__ = lambda self, i: (self.layers[i].keys, self.layers[i].values)
    if not hasattr(DynamicCache(), "key_cache"):  # 4.x sets them per instance
        DynamicCache.key_cache = property(lambda self: Side(self, "keys"))
        DynamicCache.value_cache = property(lambda self: Side(self, "values"))


def load_loop(path: Path) -> types.ModuleType:
    """generation_functions.py as a module (shim 3 while it executes)."""
    import transformers.utils

    spec = importlib.util.spec_from_file_location("fast_dllm_generation_functions", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    keep = transformers.utils.auto_docstring
    transformers.utils.auto_docstring = lambda obj=None, **_: obj
    try:
        spec.loader.exec_module(module)
    finally:
        transformers.utils.auto_docstring = keep
    return module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("fast_dllm_git", type=Path, help="a git directory holding NVlabs/Fast-dLLM at d259b48")
    parser.add_argument("release_git", type=Path, help="a git directory of Satgoy152/DualDiffusion")
    parser.add_argument("--out", type=Path, default=HERE / "fast_dllm_v2_generate.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HF_MODULES_CACHE"] = str(Path(tmp) / "modules")  # remote code is imported from here, not ~/.cache
        import transformers
        from safetensors.torch import load_file
        from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

        transformers_453_stand_ins()
        ckpt = write_fast_dllm_v2(Path(tmp) / "Fast_dLLM_v2_7B-tiny")
        for name, sha in RELEASE[3].items():
            (ckpt / name).write_bytes(git_file(args.release_git, RELEASE[1], f"{RELEASE[2]}/{name}", sha))
        loop_file = Path(tmp) / "generation_functions.py"
        loop_file.write_bytes(git_file(args.fast_dllm_git, LOOP[1], LOOP[2], LOOP[3]))
        generation = load_loop(loop_file)

        config = AutoConfig.from_pretrained(str(ckpt), trust_remote_code=True)
        dtype_arg = "torch_dtype" if transformers.__version__.startswith("4.") else "dtype"  # 5.x renamed it
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=True, **{dtype_arg: torch.float32})  # shim 4
        state = {}
        for shard in sorted(ckpt.glob("model-*.safetensors")):
            state.update(load_file(str(shard)))
        model.load_state_dict(state, strict=True)
        model.eval()
        model.mdm_sample = types.MethodType(generation.Fast_dLLM_QwenForCausalLM.batch_sample, model)
        release_forward, passes = model.forward, []

        def counted_forward(*args, **kwargs):  # counts batch_sample's denoising passes (those that write no cache)
            passes.append(bool(kwargs.get("update_past_key_values")))
            return release_forward(*args, **kwargs)

        model.forward = counted_forward
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(ckpt))  # the release's tokenizer files; batch_sample reads pad_token_id
        mask_id = tokenizer.convert_tokens_to_ids("|<MASK>|")
        cases = []
        for prompt_len, slots, seed, stop_name, threshold, temperature in CASES:
            stop = tokenizer.convert_tokens_to_ids(stop_name)
            assert (prompt_len + slots) % BLOCK == 0
            prompt = torch.randint(0, 290, (1, prompt_len), generator=torch.Generator().manual_seed(seed))
            max_new = prompt_len + slots - prompt_len // BLOCK * BLOCK  # batch_sample runs max_new // 32 blocks past the prompt's whole ones
            passes.clear()
            torch.manual_seed(seed)  # sample_with_top_p draws from the global generator
            out = model.mdm_sample(prompt, tokenizer, block_size=BLOCK, max_new_tokens=max_new, small_block_size=SMALL_BLOCK,
                                   min_len=prompt_len, seq_len=torch.tensor([prompt_len]), mask_id=mask_id, threshold=threshold,
                                   stop_token=stop, use_block_cache=False, top_p=TOP_P, temperature=temperature)
            cases.append({"prompt": prompt[0].tolist(), "slots": slots, "max_new_tokens": max_new, "stop_token": stop,
                          "threshold": threshold, "temperature": temperature, "seed": seed,
                          "denoising_passes": passes.count(False), "output": out[0].tolist()})
    golden = {
        "reference": {
            "loop": {"repository": LOOP[0], "commit": LOOP[1], "path": LOOP[2], "sha256": LOOP[3],
                     "function": "Fast_dLLM_QwenForCausalLM.batch_sample", "read_from": "github.com/mgustineli/Fast-dLLM (NVlabs history)"},
            "model": {"repository": RELEASE[0], "commit": RELEASE[1], "path": RELEASE[2], "sha256": RELEASE[3],
                      "release": "huggingface.co/Efficient-Large-Model/Fast_dLLM_v2_7B (vendored copy)"},
            "transformers": transformers.__version__,
            "stand_ins": ["ROPE_INIT_FUNCTIONS['default']", "DynamicCache[i], key_cache, value_cache", "auto_docstring",
                          "from_config + load_state_dict"],
        },
        "checkpoint": "tests/block_checkpoints.py write_fast_dllm_v2(seed=13), float32",
        "mask_id": mask_id, "stop_token": tokenizer.convert_tokens_to_ids("<|im_end|>"), "pad_token_id": tokenizer.pad_token_id, "block_size": BLOCK,
        "small_block_size": SMALL_BLOCK, "default_threshold": THRESHOLD, "top_p": TOP_P, "use_block_cache": False, "cases": cases,
    }
    args.out.write_text(json.dumps(golden, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(cases)} cases; transformers {transformers.__version__})")


if __name__ == "__main__":
    main()
