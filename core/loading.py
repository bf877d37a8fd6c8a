"""Checkpoint directories -> Denoiser, through one path for every family.

A checkpoint is a directory with config.json, model weights as safetensors (one file, or
shards listed in model.safetensors.index.json) and tokenizer.json. The backbone is built
on the meta device and the tensors are assigned in, after checking every key and shape.
"""
from __future__ import annotations

import json
import logging
import re
from importlib import resources
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from . import families
from .denoiser import Denoiser, ModelSpec
from .errors import ModelError
from .families.hf import GENERATION_CONFIG_KEY, TOKENIZER_CONFIG_KEY, read_generation_config, read_tokenizer_config
from .model import ModelConfig, Transformer, on_meta_device
from .quantize import check_quantization, quantize_backbone
from .tokenizer import Tokenizer

log = logging.getLogger(__name__)

INDEX_FILE = "model.safetensors.index.json"


def embedded_model_path() -> Path:
    """The small model shipped inside the package, used when no --model is given."""
    return Path(str(resources.files("sharpen.core") / "embedded"))


def read_config(path: Path) -> dict:
    config_file = path / "config.json"
    if not path.is_dir():
        raise ModelError(f"model directory not found: {path}")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelError(f"no config.json in model directory {path}") from None
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {config_file}: {exc}") from None
    if not isinstance(config, dict):
        raise ModelError(f"{config_file} is not a JSON object")
    return config


def weight_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint, from the shard index when there is one."""
    index = path / INDEX_FILE
    if index.exists():
        try:
            shard_names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError) as exc:
            raise ModelError(f"cannot read shard index {index}: {exc}") from None
        files = [path / name for name in shard_names]
        missing = [f.name for f in files if not f.exists()]
        if missing:
            raise ModelError(f"shard index {index.name} lists missing files: {', '.join(missing)}")
        return files
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelError(f"no *.safetensors weights in {path}")
    return files


def read_tensors(files: list[Path], device: torch.device | None = None, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint; with `device`/`dtype`, each is moved as soon as it is read,
    so host memory holds one tensor at a time instead of the whole model (16 GB for an 8B in bf16)."""
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            opened = safe_open(str(file), framework="pt")
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise ModelError(f"corrupt or truncated weights file {file.name}: {str(exc).splitlines()[0]}") from None
        with opened as handle:
            for key in handle.keys():
                # No name holds the raw tensor, so it is freed as soon as it is converted.
                tensors[key] = _read_one(handle, key, file) if device is None else _read_one(handle, key, file).to(device=device, dtype=dtype)
    return tensors


def _read_one(handle, key: str, file: Path) -> torch.Tensor:
    # Only the read is a file error: running out of device memory in .to() is not a corrupt file.
    try:
        return handle.get_tensor(key)
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise ModelError(f"corrupt or truncated weights file {file.name}: {str(exc).splitlines()[0]}") from None


def map_state_dict(family: families.Family, cfg: ModelConfig, tensors: dict[str, torch.Tensor], model: Transformer) -> dict[str, torch.Tensor]:
    """Rename checkpoint tensors to backbone names; every key and shape must match exactly."""
    name_map = families.expand_weight_map(family, cfg.n_layers)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if cfg.tie_embeddings:
        expected.pop("output.weight", None)
        name_map = {src: dst for src, dst in name_map.items() if dst != "output.weight"}
    state: dict[str, torch.Tensor] = {}
    unexpected = []
    for key, tensor in tensors.items():
        if key in name_map and name_map[key] in expected:
            state[name_map[key]] = tensor
        elif not any(key.endswith(skip) for skip in family.skip_keys):
            unexpected.append(key)
    missing = sorted(set(expected) - set(state))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensors (first: {missing[0]})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected tensors (first: {sorted(unexpected)[0]})")
        raise ModelError(f"weights do not match the {family.name} layout: " + "; ".join(parts))
    for key, shape in expected.items():
        if tuple(state[key].shape) != shape:
            raise ModelError(f"tensor {key} has shape {tuple(state[key].shape)}, expected {shape}")
    return state


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
    for name, limit in SANE_LIMITS.items():
        if getattr(cfg, name) > limit:
            raise ModelError(f"config.json of {path}: {name}={getattr(cfg, name)} is beyond any real model (at most {limit}); refusing to build it")
    return family, cfg


# Far beyond any released model, far below what would exhaust a machine before the weights are read.
SANE_LIMITS = {"n_layers": 1024, "dim": 65536, "n_heads": 1024, "ffn_hidden": 1 << 20, "vocab_size": 1 << 22, "max_seq_len": 1 << 24}


def header_shapes(file: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from a safetensors file's JSON header (8-byte length, then JSON); no tensor is read."""
    try:
        with open(file, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if not 2 <= length <= 100 * 2**20:
                raise ValueError(f"header length {length}")
            header = json.loads(handle.read(length))
        return {key: tuple(value["shape"]) for key, value in header.items() if key != "__metadata__"}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ModelError(f"corrupt or truncated weights file {file.name}: {exc}") from None


def check_against_weights(family: families.Family, cfg: ModelConfig, files: list[Path], path: Path) -> None:
    """The config's layer count and embedding size against the weights' headers, before anything
    is built: a config that announces a million layers stops here, not after minutes of building."""
    shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        shapes.update(header_shapes(file))
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
    `quantize` ("int8" | "int4"): torchao weight-only quantization of every linear layer.
    """
    path = Path(path) if path is not None else embedded_model_path()
    config = read_config(path)
    family, cfg = model_config(path, config)
    tokenizer = Tokenizer.from_directory(path)
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
        name=config.get("name", path.name),
        other_end_ids=tuple(ids.get("end_ids", ())),
        tempered_scores=family.tempered_scores,
        default_refresh=family.default_refresh,
    )

    torch_device = torch.device(device)
    dtype = dtype or default_dtype(torch_device)
    if quantize is not None:
        check_quantization(quantize, torch_device)  # before any weight is read
    files = weight_files(path)
    check_against_weights(family, cfg, files, path)
    with on_meta_device():
        model = Transformer(cfg)
    if device_map is not None:
        from .placement import dispatch

        state = map_state_dict(family, cfg, read_tensors(files), model)
        model = dispatch(model, state, device_map, dtype)
    else:
        state = map_state_dict(family, cfg, read_tensors(files, torch_device, dtype), model)
        model.load_state_dict(state, strict=not cfg.tie_embeddings, assign=True)
        if cfg.tie_embeddings:
            model.output.weight = model.embed.weight
        if quantize is not None:
            quantize_backbone(model, quantize)  # quantized linears run unpacked: packing is a float layout
        else:
            model.pack()  # fused inference layout (accelerate's hooks above own their parameters: left unpacked)
    log.info("loaded %s model from %s (%s, %s)", family.name, path, device_map or torch_device, dtype)
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
