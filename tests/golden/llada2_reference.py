"""Run LLaDA2's own modeling code once on the tiny checkpoint and record what it computes.

    python tests/golden/llada2_reference.py --reference DIR [--out tests/golden/llada2_tiny.json]

DIR holds the reference's `modeling_llada21_moe.py` and `configuration_llada21_moe.py`, taken
unchanged from ZHZisZZ/dllm at commit 62ebe4f3df3792d978204a724f0b1c2188c1d7fe
(dllm/pipelines/llada21/models/: the LLaDA2.1-mini release's remote code as dllm ships it; its
forward is the release's, it only passes a prebuilt 4-D mask straight through; the hub itself
is out of reach here), e.g.

    git -C dllm show 62ebe4f:dllm/pipelines/llada21/models/modeling_llada21_moe.py > DIR/modeling_llada21_moe.py

The code was written for transformers 4.5x; under 5.24 it needs these shims, applied from
outside (the file is imported as it is):
- `transformers.modeling_attn_mask_utils` is gone: a stand-in module (this run always passes a
  4-D additive mask: LLaDA2.1's code uses it as given; LLaDA2.0's eager path hands it to
  `_prepare_4d_causal_attention_mask`, which the stand-in returns as given, in the activations'
  dtype, as that file's SDPA path would; anything else raises);
- `ROPE_INIT_FUNCTIONS["default"]` is gone: the 4.x default (inv_freq over
  head_dim * partial_rotary_factor dimensions, attention scaling 1.0) is registered under it;
- (LLaDA2.0's file) `is_torch_fx_available` and `is_torch_greater_or_equal_than_1_13` are gone:
  False (no FX wrapping) and True.

Recorded (float32, CPU): for a fixed id sequence, under a full mask and a block-causal mask
(blocks of 4), the logits at every position and every MoE layer's chosen experts per token
(the router's top-k, in its order); plus the decode of the release's `generate`
(LLaDA2.1: token-to-token editing) in both published modes, with every committed and edited
token per step, recorded through a forward hook (see tests/golden/llada2_decode.py).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import shutil
import sys
import tempfile
import types
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the checkpoint builder

from moe_checkpoints import write_llada2  # noqa: E402

REPOSITORY = "ZHZisZZ/dllm"
COMMIT = "62ebe4f3df3792d978204a724f0b1c2188c1d7fe"
# LLaDA2.1's code (dllm/pipelines/llada21/models/) and LLaDA2.0's (dllm/pipelines/llada2/models/):
# the same forward, their own `generate` (2.0: no editing).
VERSIONS = {"2.1": ("llada21", "modeling_llada21_moe", "configuration_llada21_moe"),
            "2.0": ("llada2", "modeling_llada2_moe", "configuration_llada2_moe")}
FILES = tuple(f"{name}.py" for _, *names in VERSIONS.values() for name in names)
SEQUENCE_LENGTH = 12
BLOCK = 4


def install_shims() -> None:
    """What transformers 5.24 lacks of what the reference imports (see the module doc)."""
    def _unused(*args, **kwargs):
        raise NotImplementedError("shim: the golden run always passes a 4-D mask")

    def as_given(mask, input_shape, inputs_embeds, past_length, *args, **kwargs):
        # LLaDA2.0's eager path sends generate()'s additive 4-D block mask here: used as given, in the
        # activations' dtype, as its SDPA path and LLaDA2.1's code use it
        if mask is None or mask.dim() != 4:
            return _unused()
        return mask.to(inputs_embeds.dtype)

    masks = types.ModuleType("transformers.modeling_attn_mask_utils")
    masks._prepare_4d_causal_attention_mask_for_sdpa = _unused
    masks._prepare_4d_causal_attention_mask = as_given
    sys.modules["transformers.modeling_attn_mask_utils"] = masks

    from transformers import modeling_rope_utils

    def default_rope(config, device=None, seq_len=None, **kwargs):
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        dim = int(head_dim * getattr(config, "partial_rotary_factor", 1.0))
        exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim
        return 1.0 / (config.rope_theta ** exponents), 1.0

    modeling_rope_utils.ROPE_INIT_FUNCTIONS.setdefault("default", default_rope)

    # LLaDA2.0's file also imports two version probes transformers 5 dropped (torch >= 1.13 is a given).
    from transformers import pytorch_utils
    from transformers.utils import import_utils

    if not hasattr(import_utils, "is_torch_fx_available"):
        import_utils.is_torch_fx_available = lambda: False
    if not hasattr(pytorch_utils, "is_torch_greater_or_equal_than_1_13"):
        pytorch_utils.is_torch_greater_or_equal_than_1_13 = True


def load_reference(reference: Path, checkpoint: Path, version: str = "2.1"):
    """The reference model class of `version` on the tiny checkpoint, float32, eval, strict state dict."""
    package = Path(tempfile.gettempdir()) / "llada2_reference_code"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    for name in FILES:
        shutil.copy(reference / name, package / name)
    if str(package.parent) not in sys.path:
        sys.path.insert(0, str(package.parent))
    install_shims()
    _, modeling_name, configuration_name = VERSIONS[version]
    modeling = importlib.import_module(f"llada2_reference_code.{modeling_name}")
    configuration = importlib.import_module(f"llada2_reference_code.{configuration_name}")
    raw = json.loads((checkpoint / "config.json").read_text())
    config = configuration.LLaDA2MoeConfig(**{k: v for k, v in raw.items() if k not in ("model_type", "auto_map", "architectures")})
    # eager attention: generate() builds its block mask in bfloat16, which SDPA refuses beside float32
    # queries; eager adds it to float32 scores (0 and -inf, exact in any dtype)
    config._attn_implementation = "eager"
    model = modeling.LLaDA2MoeModelLM(config).float().eval()
    from safetensors.torch import load_file

    state = {}
    for file in sorted(checkpoint.glob("*.safetensors")):
        state.update(load_file(str(file)))
    missing, unexpected = model.load_state_dict(state, strict=False)
    # expert_bias is a registered buffer: it must load too. Nothing may be left over either way.
    if missing or unexpected:
        raise SystemExit(f"reference state dict mismatch: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return modeling, model


def additive_mask(length: int, block: int | None) -> torch.Tensor:
    """[1, 1, T, T] float additive mask: 0 where a query sees a key, -inf elsewhere."""
    if block is None:
        return torch.zeros(1, 1, length, length)
    blocks = torch.arange(length) // block
    seen = blocks[None, :] <= blocks[:, None]  # [T, T]
    return torch.zeros(length, length).masked_fill(~seen, float("-inf"))[None, None]


@torch.no_grad()
def forward_record(model, ids: torch.Tensor, block: int | None) -> dict:
    out = model(ids, attention_mask=additive_mask(ids.shape[1], block), position_ids=torch.arange(ids.shape[1])[None],
                output_router_logits=True, return_dict=True)
    routing = [layer[1][0].tolist() for layer in out.router_logits]  # per MoE layer: [T, k] expert ids
    return {"logits": [[round(v, 6) for v in row] for row in out.logits[0].tolist()], "experts": routing}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, required=True, help="directory with the reference's two files")
    parser.add_argument("--out", type=Path, default=HERE / "llada2_tiny.json")
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = write_llada2(Path(tmp) / "llada2", version="2.1", head_scale=3.0)
        modeling, model = load_reference(args.reference, checkpoint)
        vocab = json.loads((checkpoint / "config.json").read_text())["vocab_size"]
        ids = torch.randint(0, vocab, (1, SEQUENCE_LENGTH), generator=torch.Generator().manual_seed(7))
        record = {
            "reference": {"repository": REPOSITORY, "commit": COMMIT,
                          "files": [f"dllm/pipelines/{d}/models/{n}.py" for d, *names in VERSIONS.values() for n in names],
                          "sha256": {f: hashlib.sha256((args.reference / f).read_bytes()).hexdigest() for f in FILES},
                          "shims": ["transformers.modeling_attn_mask_utils stand-in (4-D additive masks, used as given)",
                                    "ROPE_INIT_FUNCTIONS['default'] = transformers 4.x default rope",
                                    "is_torch_fx_available = False, is_torch_greater_or_equal_than_1_13 = True (2.0's file)"]},
            "checkpoint": "tests/moe_checkpoints.py write_llada2(version='2.1', head_scale=3.0), its other defaults",
            "ids": ids[0].tolist(),
            "full": forward_record(model, ids, None),
            f"block_causal_{BLOCK}": forward_record(model, ids, BLOCK),
        }
        from llada2_decode import decode_record  # noqa: E402  (tests/golden/, beside this script)

        record["decode"] = decode_record(model, checkpoint)
        _, model_20 = load_reference(args.reference, checkpoint, "2.0")
        record["decode_2.0"] = decode_record(model_20, checkpoint, editing=False)
        # An answer shorter than its block: LLaDA2.0's generate clamps its steps to the answer's length.
        record["decode_2.0_short"] = decode_record(model_20, checkpoint, editing=False, gen_length=3, block=8, steps=8)
    args.out.write_text(json.dumps(record, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
