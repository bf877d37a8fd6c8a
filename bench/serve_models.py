"""The checkpoints bench/serve.py serves: one per loop kind, small and at the Qwen2-0.5B shape.

    masked        small: the embedded model          0.5b/1.5b: Open-dCoder's layout (plain Qwen2, tied head)
    block-causal  small: tests' tiny SDAR-8B-Chat    0.5b/1.5b: SDAR's layout (Qwen3 names, q/k norms, tied as SDAR-1.7B)
    moe           small: tests' tiny LLaDA2.0-mini   0.5b/1.5b: LLaDA2.0's layout, the release's vocabulary

Each is written the way the tests write it (tests/family_checkpoints.py, block_checkpoints.py,
moe_checkpoints.py: the release's own files, only sizes changed), random weights (float32 unless
asked otherwise: the GPU session stores bfloat16). At "0.5b" the tiny fixture's files are kept and
its config.json sizes and weights are replaced by Qwen2.5-0.5B's dimensions (bench/synthetic.py
SHAPES["qwen2-0.5b"]: width 896, 24 layers, 14 heads, 2 key/value heads, feed-forward 4864,
151,936 embedding rows; the tokenizer stays tiny, the rows past it are never sampled); at "1.5b"
by Qwen2.5-1.5B's (1536, 28 layers, 12 heads, 2 key/value heads, 8960). The mixture of experts has
no release that small: LLaDA2.0's layout at that width and depth, its first layer dense, the rest
16 experts of a fifteenth of the dense width (320 at 0.5b) in 4 groups, top 4 from 2 groups, one
shared expert, the release's 157,184-row vocabulary (at 0.5b about 0.68B parameters, 0.29B of
them used per token).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import torch

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "tests")]  # bench/synthetic.py, the tests' checkpoint writers

KINDS = ("masked", "block-causal", "moe")
MODELS = ("small", "0.5b", "1.5b")
SEED = 11
# Qwen2.5-1.5B's config.json (Fast-dLLM v2 1.5B's backbone): the GPU session's second size.
QWEN2_15B = dict(vocab_size=151936, dim=1536, n_layers=28, n_heads=12, n_kv_heads=2, ffn_hidden=8960)


def shape_of(model: str) -> dict:
    from synthetic import SHAPES

    return SHAPES["qwen2-0.5b"] if model == "0.5b" else QWEN2_15B


def _resize_config(out: Path, sizes: dict) -> dict:
    """config.json with `sizes` changed: every key must be one the release's file already has."""
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    missing = set(sizes) - set(config)
    if missing:
        raise KeyError(f"{out.name}: config.json has no {sorted(missing)}")
    config.update(sizes)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return config


def _masked(out: Path, model: str, dtype: torch.dtype) -> Path | None:
    if model == "small":
        return None  # the embedded model: no --model
    from family_checkpoints import _qwen2_shapes, random_state, write_open_dcoder, write_sharded

    s = shape_of(model)
    write_open_dcoder(out)  # one shard: the weights below overwrite it
    _resize_config(out, {"hidden_size": s["dim"], "intermediate_size": s["ffn_hidden"], "num_hidden_layers": s["n_layers"],
                         "num_attention_heads": s["n_heads"], "num_key_value_heads": s["n_kv_heads"], "vocab_size": s["vocab_size"]})
    shapes = _qwen2_shapes(s["vocab_size"], s["dim"], s["n_layers"], s["n_heads"], s["n_kv_heads"], s["ffn_hidden"], True)
    write_sharded(out, random_state(shapes, SEED), 1, dtype)
    return out


def _block_causal(out: Path, model: str, dtype: torch.dtype) -> Path:
    import block_checkpoints as blocks
    from family_checkpoints import random_state, write_sharded

    if model == "small":
        return blocks.write_sdar(out, dtype=dtype)
    s = shape_of(model)
    blocks.write_sdar(out, tie=True, shards=1)
    head_dim = s["dim"] // s["n_heads"]
    _resize_config(out, {"hidden_size": s["dim"], "intermediate_size": s["ffn_hidden"], "num_hidden_layers": s["n_layers"],
                         "num_attention_heads": s["n_heads"], "num_key_value_heads": s["n_kv_heads"], "head_dim": head_dim,
                         "max_window_layers": s["n_layers"], "vocab_size": s["vocab_size"]})
    # qwen3_shapes reads the fixture's module-level sizes: the same names, at this shape.
    with mock.patch.multiple(blocks, D=s["dim"], LAYERS=s["n_layers"], HEADS=s["n_heads"], KV=s["n_kv_heads"],
                             HEAD_DIM=head_dim, HIDDEN=s["ffn_hidden"]):
        shapes = blocks.qwen3_shapes(s["vocab_size"], True)
    write_sharded(out, random_state(shapes, SEED), 1, dtype)
    return out


def _moe(out: Path, model: str, dtype: torch.dtype) -> Path:
    from moe_checkpoints import write_llada2

    if model == "small":
        return write_llada2(out, dtype=dtype)
    s = shape_of(model)
    expert_hidden = 32 * round(s["ffn_hidden"] / 15 / 32)  # 16 experts top 4 + 1 shared: ~the dense width active
    return write_llada2(out, shards=1, dtype=dtype, release_ids=True, d=s["dim"], layers=s["n_layers"], heads=s["n_heads"], kv=s["n_kv_heads"],
                        head_dim=s["dim"] // s["n_heads"], dense_hidden=s["ffn_hidden"], first_dense=1,
                        experts=16, expert_hidden=expert_hidden, top_k=4, n_group=4, topk_group=2, shared=1)


BUILDERS = {"masked": _masked, "block-causal": _block_causal, "moe": _moe}


def checkpoint(kind: str, model: str, folder: Path, dtype: torch.dtype = torch.float32) -> str | None:
    """The --model argument for `kind` at `model` (None: the embedded model), its weights stored
    in `dtype`, written under `folder` unless a finished copy is there already (a `done` file)."""
    out = folder / (f"{kind}-{model}" if dtype == torch.float32 else f"{kind}-{model}-{str(dtype).split('.')[-1]}")
    if model == "small" and kind == "masked":
        return None
    if not (out / "done").exists():
        out.mkdir(parents=True, exist_ok=True)
        BUILDERS[kind](out, model, dtype)
        (out / "done").write_text("written by bench/serve_models.py\n")
    return str(out)
