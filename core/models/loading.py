"""Checkpoint directories -> Denoiser, through one path for every family.

A checkpoint is a directory with config.json, model weights as safetensors (one file, or
shards listed in model.safetensors.index.json) and tokenizer.json. The backbone is built
on the meta device; every key and shape is checked against the shards' headers, and then
each weight is read a chunk at a time straight into its final place (core/models/assemble.py):
the load peaks at the loaded model's size, not at the checkpoint's plus the model's.
"""
from __future__ import annotations

import json
import logging
import re
from importlib import resources
from pathlib import Path

import torch
from safetensors.torch import save_file

from . import families, untrusted
from .assemble import assemble
from .derived import DerivedShards
from .denoiser import Denoiser, ModelSpec
from ..errors import ModelError
from .families.hf import (GENERATION_CONFIG_KEY, RELEASE_NAME_KEY, TOKENIZER_CONFIG_KEY, read_generation_config, read_tokenizer_config,
                          release_name)
from .model import ModelConfig, Transformer, on_meta_device
from .quantize import check_quantization
from .shards import Shards
from ..tokenizer import Tokenizer

log = logging.getLogger(__name__)

INDEX_FILE = "model.safetensors.index.json"


def embedded_model_path() -> Path:
    """The small model shipped inside the package, used when no --model is given."""
    return Path(str(resources.files("sharpen.core") / "embedded"))


def read_config(path: Path) -> dict:
    config_file = path / "config.json"
    if not path.is_dir():
        raise ModelError(f"model directory not found: {path}")
    if not config_file.exists():
        raise ModelError(f"no config.json in model directory {path}")
    config = untrusted.read_json(config_file)  # regular, bounded, finite numbers (core/models/untrusted.py)
    if not isinstance(config, dict):
        raise ModelError(f"{config_file} is not a JSON object")
    untrusted.check_numbers(config, str(config_file))
    if not isinstance(config.get("model_type", ""), str):  # the family lookup hashes it
        raise ModelError(f"{config_file}: model_type is {config['model_type']!r}, not a name")
    return config


def weight_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint, from the shard index when there is one."""
    index = path / INDEX_FILE
    if index.exists():
        weight_map = untrusted.read_json(index)
        weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(name, str) for name in weight_map.values()):
            raise ModelError(f"shard index {index} has no weight_map of tensor names to file names")
        # Names come from the file: each must stay inside the checkpoint (no "../x", no "/dev/zero").
        files = [untrusted.inside_name(path, name) for name in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.exists()]
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""  # an index may name thousands
            raise ModelError(f"shard index {index.name} lists missing files: {', '.join(missing[:3])}{more}")
    else:
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise ModelError(f"no *.safetensors weights in {path}")
    return [untrusted.checked_path(file) for file in files]  # regular files only: a FIFO shard would block the read


def source_names(family: families.Family, cfg: ModelConfig, shapes: dict[str, tuple[int, ...]], model: Transformer) -> dict[str, str]:
    """Backbone name -> checkpoint name, from the weights' headers alone: every key and shape
    must match exactly before a single tensor is read."""
    name_map = families.expand_weight_map(family, cfg.n_layers)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if cfg.tie_embeddings:
        expected.pop("output.weight", None)
        name_map = {src: dst for src, dst in name_map.items() if dst != "output.weight"}
    source: dict[str, str] = {}
    unexpected = []
    for key in shapes:
        if key in name_map and name_map[key] in expected:
            source[name_map[key]] = key
        elif not any(key.endswith(skip) for skip in family.skip_keys):
            unexpected.append(key)
    missing = sorted(set(expected) - set(source))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensors (first: {missing[0]})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected tensors (first: {sorted(unexpected)[0]})")
        raise ModelError(f"weights do not match the {family.name} layout: " + "; ".join(parts))
    for key, shape in expected.items():
        if tuple(shapes[source[key]]) != shape:
            raise ModelError(f"tensor {key} has shape {tuple(shapes[source[key]])}, expected {shape}")
    return source


def default_dtype(device: torch.device) -> torch.dtype:
    # bf16 on accelerators (half the bandwidth per step); float32 on CPU, where bf16 is slow.
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def model_config(path: Path, config: dict) -> tuple[families.Family, ModelConfig]:
    """The family of a checkpoint and its backbone config; errors are one-line ModelErrors."""
    family = families.family_for(config)
    try:
        cfg = family.to_config(config)
    except (TypeError, ValueError, KeyError, ArithmeticError) as exc:
        raise ModelError(f"config.json of {path} does not describe a {family.name} model: {exc}") from None
    for name in (*SANE_LIMITS, "n_kv_heads"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool):  # a string passes the family's mapping untouched
            raise ModelError(f"config.json of {path}: {name}={value!r} must be a whole number")
    for name, limit in SANE_LIMITS.items():
        value = getattr(cfg, name)
        if value > limit:
            raise ModelError(f"config.json of {path}: {name}={getattr(cfg, name)} is beyond any real model (at most {limit}); refusing to build it")
    return family, cfg


# Far beyond any released model, far below what would exhaust a machine before the weights are read.
SANE_LIMITS = {"n_layers": 1024, "dim": 65536, "n_heads": 1024, "ffn_hidden": 1 << 20, "vocab_size": 1 << 22, "max_seq_len": 1 << 24}


def check_against_weights(family: families.Family, cfg: ModelConfig, shapes: dict[str, tuple[int, ...]], path: Path) -> None:
    """The config's layer count and embedding size against the weights' headers, before anything
    is built: a config that announces a million layers stops here, not after minutes of building."""
    layers = set()
    for template in family.weight_map:
        if "{i}" in template:
            pattern = re.compile(re.escape(template).replace(re.escape("{i}"), r"(\d+)") + "$")
            layers.update(int(m.group(1)) for key in shapes if (m := pattern.match(key)))
    if layers and cfg.n_layers != max(layers) + 1:
        raise ModelError(f"config.json of {path} says {cfg.n_layers} layers, but the weights hold {max(layers) + 1}")
    embed_key = next((src for src, dst in family.weight_map.items() if dst == "embed.weight"), None)
    if embed_key in shapes and shapes[embed_key] != (cfg.vocab_size, cfg.dim):
        raise ModelError(f"config.json of {path} says a {cfg.vocab_size} x {cfg.dim} embedding, but the weights hold {shapes[embed_key]}")


# The oldest torch sharpen runs on, and why: torch._grouped_mm (the mixtures of experts' grouped
# matmul), torch._dynamo.config.recompile_limit (the compiled step) and torchao 0.18 (DiffusionGemma's
# --quantize; it dropped older torch) are newer than 2.6, where every MoE model and every compiled
# step failed. The suite runs on 2.11 and 2.13 (docs/speed.md); its golden block-loop outputs are
# draws from torch's multinomial stream, which also changed between 2.6 and 2.11.
MIN_TORCH = (2, 11)


def require_torch() -> None:
    """One line, before anything loads, when the installed torch is older than MIN_TORCH (an
    environment made with --no-deps, or a conda torch pip did not replace)."""
    found = re.match(r"(\d+)\.(\d+)", str(torch.__version__))
    if found is None or tuple(int(n) for n in found.groups()) < MIN_TORCH:
        need = ".".join(map(str, MIN_TORCH))
        raise ModelError(f"torch {torch.__version__} is too old: sharpen needs torch {need} or newer (pip install -U 'torch>={need}')")


def load_denoiser(
    path: str | Path | None = None,
    device: str = "cpu",
    dtype: torch.dtype | None = None,
    device_map: dict[str, str | int] | None = None,
    quantize: str | None = None,
) -> Denoiser:
    """Load a checkpoint directory (default: the embedded model) onto `device`.

    With a `device_map` (module name -> GPU index, "cpu" or "disk"; see placement.py) the
    model is spread over those devices by accelerate instead, run from the embedding's device.
    `quantize` ("int8" | "int4"): weight-only quantization of every linear layer (core/models/quantize.py),
    done as the weights are read: the full-precision model never exists in memory.
    """
    require_torch()
    path = Path(path) if path is not None else embedded_model_path()
    config = read_config(path)
    family, cfg = model_config(path, config)
    tokenizer = Tokenizer.from_directory(path)
    if tokenizer.vocab_size > cfg.vocab_size:  # its top ids would index past the embedding (IndexError mid-run)
        raise ModelError(f"the tokenizer of {path} has {tokenizer.vocab_size} tokens, more than the model's {cfg.vocab_size}-row embedding")
    # special_ids also sees tokenizer_config.json: special-token names and the chat template live there.
    seen = {**config, TOKENIZER_CONFIG_KEY: read_tokenizer_config(path), GENERATION_CONFIG_KEY: read_generation_config(path)}
    ids = family.special_ids(seen, tokenizer)
    if ids.get("mask_id") is None:
        raise ModelError(f"the tokenizer of {path} has no mask token and config.json names none")
    spec = ModelSpec(
        family=family.name,
        mask_id=int(ids["mask_id"]),
        pad_id=ids.get("pad_id"),
        eos_id=ids.get("eos_id"),
        shift_logits=family.shift_logits,
        chat_template=ids.get("chat_template"),
        instruct=ids.get("instruct"),
        name=config.get("name", release_name(path)),
        other_end_ids=tuple(ids.get("end_ids", ())),
        tempered_scores=family.tempered_scores,
        default_refresh=family.default_refresh,
        loop=family.loop,
        block=family.block_rule({**config, RELEASE_NAME_KEY: release_name(path)}) if family.block_rule else None,
    )

    torch_device = torch.device(device)
    dtype = dtype or default_dtype(torch_device)
    plan = None
    if device_map is not None:
        from .placement import DevicePlan, normalise

        plan = DevicePlan(normalise(device_map, cfg), {})
    if quantize is not None:
        check_quantization(quantize, plan.main_device if plan else torch_device)  # before any weight is read
    with Shards(weight_files(path)) as shards:
        if family.derived is not None:  # fused or per-expert tensors, seen under the backbone's layout
            shards = DerivedShards(shards, family.derived(cfg))
        shapes = shards.shapes()
        check_against_weights(family, cfg, shapes, path)
        with on_meta_device():
            model = Transformer(cfg)
        source = source_names(family, cfg, shapes, model)  # every name and shape checked before a byte is read
        try:
            if plan is not None:
                assemble(model, shards, source, dtype, where=plan.storage_device, runs_on=plan.execution_device, packed=False, quantize=quantize)
            else:
                # One device: the fused inference layout is built in place (quantized linears run unpacked).
                assemble(model, shards, source, dtype, where=lambda module: torch_device, runs_on=lambda module: torch_device,
                         packed=quantize is None, quantize=quantize)
        except torch.OutOfMemoryError:
            raise ModelError(f"out of memory loading {path} on {plan.main_device if plan else torch_device} as {quantize or dtype}; "
                             "try --quantize int8, or --device-map auto to spread it") from None
    if plan is not None:
        from .placement import dispatch

        model = dispatch(model, plan.device_map)  # accelerate's hooks own the parameters from here: left unpacked
    log.info("loaded %s model from %s (%s, %s%s)", family.name, path, device_map or torch_device, dtype, f", {quantize}" if quantize else "")
    return Denoiser(model, tokenizer, spec)


def save_checkpoint(model: Transformer, tokenizer_file: str | Path, out_dir: str | Path, extra_config: dict | None = None) -> Path:
    """Write a checkpoint of our own family: config.json, model.safetensors, tokenizer.json."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer.from_file(tokenizer_file)
    config = {"model_type": "sharpen", **model.cfg.to_dict(), **(extra_config or {})}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    if model.cfg.tie_embeddings:
        state.pop("output.weight")
    save_file(state, str(out / "model.safetensors"))
    tokenizer.hf.save(str(out / "tokenizer.json"))
    return out
