"""Run Stable-DiffCoder's own generate_block on the tiny checkpoint once; write stable_diffcoder_generate.json.

    python tests/golden/stable_diffcoder_generate.py MODELING_FILE [--out tests/golden/stable_diffcoder_generate.json]

MODELING_FILE is the release's modeling_stable_diffcoder.py (ByteDance-Seed/Stable-DiffCoder-8B-Instruct
on Hugging Face, the transformers-5 revision: StableDiffcoderForCausalLM, a LlamaForCausalLM with
`generate_block`). The script writes the tiny checkpoint of tests/block_checkpoints.py, loads it
with that class (transformers' own Llama underneath) and calls `generate_block` unchanged, seeding
torch's global generator first (its Gumbel noise draws from it). The file's sha256 goes into the
golden, since the release lives on the Hub, not in a git repository this script can name.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from block_checkpoints import write_stable_diffcoder  # noqa: E402

# (prompt length, generated tokens, total steps, temperature, seed); generate_block needs gen_length
# divisible by the block (4) and steps by the number of generated blocks.
CASES = [(8, 16, 16, 0.0, 0), (10, 12, 12, 0.0, 1), (7, 16, 8, 0.0, 2), (8, 16, 16, 0.8, 3), (9, 12, 6, 1.0, 4)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("modeling", type=Path, help="the release's modeling_stable_diffcoder.py")
    parser.add_argument("--out", type=Path, default=HERE / "stable_diffcoder_generate.json")
    args = parser.parse_args()
    import transformers

    spec = importlib.util.spec_from_file_location("modeling_stable_diffcoder", args.modeling)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # transformers looks the class's module up by name
    spec.loader.exec_module(module)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = write_stable_diffcoder(Path(tmp) / "stable-diffcoder-tiny")
        config = json.loads((ckpt / "config.json").read_text())
        # generate_block builds its mask in bfloat16 (the release runs in bf16); in float32, SDPA refuses a
        # bf16 mask, transformers' eager attention adds it: a loading choice, the file is unchanged.
        model = module.StableDiffcoderForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32, attn_implementation="eager").eval()
        cases = []
        for prompt_len, gen_len, steps, temperature, seed in CASES:
            prompt = torch.randint(6, 290, (1, prompt_len), generator=torch.Generator().manual_seed(200 + seed))
            torch.manual_seed(seed)
            out = model.generate(input_ids=prompt, steps=steps, gen_length=gen_len, block_length=4, temperature=temperature,
                                 remasking="low_confidence", mask_id=5, threshold=None, shift=False, eos_id=config["eos_token_id"])
            cases.append({"prompt": prompt[0].tolist(), "gen_length": gen_len, "steps": steps, "temperature": temperature,
                          "seed": seed, "output": out[0].tolist()})
    golden = {
        "reference": {"release": "huggingface.co/ByteDance-Seed/Stable-DiffCoder-8B-Instruct (transformers-5 revision)",
                      "file": "modeling_stable_diffcoder.py", "sha256": hashlib.sha256(args.modeling.read_bytes()).hexdigest(),
                      "loop": "StableDiffcoderForCausalLM.generate -> generate_block", "transformers": transformers.__version__,
                      "attention": "eager (float32 weights, the file's bfloat16 mask)"},
        "checkpoint": "tests/block_checkpoints.py write_stable_diffcoder(seed=9), float32",
        "mask_id": 5, "block_length": 4, "eos_id": config["eos_token_id"], "remasking": "low_confidence", "threshold": None,
        "cases": cases,
    }
    args.out.write_text(json.dumps(golden, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
