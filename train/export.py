"""Write a trained model as a sharpen checkpoint, sharded when large, and ship it.

The package ships weights as safetensors; files over `shard_bytes` (16 MiB by default, so
no single file in the wheel or the git history is large) are split into shards with a
model.safetensors.index.json, which core/models/loading.py reads like any sharded checkpoint.
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from safetensors.torch import load_file, save_file

from sharpen.core.models.loading import INDEX_FILE, save_checkpoint

log = logging.getLogger(__name__)

SHARD_BYTES = 16 * 1024 * 1024


def _clear_weights(directory: Path) -> None:
    for stale in [*directory.glob("*.safetensors"), directory / INDEX_FILE]:
        stale.unlink(missing_ok=True)


def shard(out: Path, max_bytes: int = SHARD_BYTES) -> list[Path]:
    """Split out/model.safetensors into shards of at most `max_bytes` (when it is larger)."""
    single = out / "model.safetensors"
    if single.stat().st_size <= max_bytes:
        return [single]
    tensors = load_file(str(single))
    groups: list[dict] = [{}]
    size = 0
    for name in sorted(tensors):
        nbytes = tensors[name].numel() * tensors[name].element_size()
        if groups[-1] and size + nbytes > max_bytes:  # a tensor larger than a shard gets its own
            groups.append({})
            size = 0
        groups[-1][name] = tensors[name]
        size += nbytes
    single.unlink()
    weight_map, files = {}, []
    for i, group in enumerate(groups, 1):
        file = out / f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        save_file(group, str(file))
        files.append(file)
        weight_map.update({name: file.name for name in group})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / INDEX_FILE).write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    return files


def export(model, tokenizer_file: Path, out: Path, meta: dict, shard_bytes: int = SHARD_BYTES) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    _clear_weights(out)  # a previous export may have been sharded differently
    save_checkpoint(model, tokenizer_file, out, {"name": "sharpen-embedded", "training": meta})
    shard(out, shard_bytes)
    return out


def ship(out: Path, dest: Path) -> None:
    """Copy an exported checkpoint into the package (core/embedded), replacing the old weights."""
    dest.mkdir(parents=True, exist_ok=True)
    _clear_weights(dest)
    names = ["config.json", "tokenizer.json", *(p.name for p in sorted(out.glob("*.safetensors")))]
    if (out / INDEX_FILE).exists():
        names.append(INDEX_FILE)
    for name in names:
        shutil.copyfile(out / name, dest / name)
    log.info("shipped %s -> %s (%s)", out, dest, ", ".join(names))
