"""Write a release's facts record (tests/releases/<release>/facts.json) from a directory of its files.

    python tests/releases/record.py DIR OUT_FOLDER "SOURCE LINE"

DIR holds the small files a release ships, as the hub (or a repository that keeps them) has them.
The record keeps what the files say: every key and value of config.json, generation_config.json,
special_tokens_map.json, added_tokens.json and tokenizer_config.json (the chat template, a long
text, only as its length and sha256), the list of files shipped, and the safetensors index as its
shard count, total size and, per weight name with the layer index as {i} (and an expert index as
{j}), the shard each layer's tensor is in. tests/release_files.py reads the records; the fixture
builders start from them.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

JSON_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
LAYER = re.compile(r"\.layers\.(\d+)\.")
EXPERT = re.compile(r"\.experts\.(\d+)\.")


def weights_record(index: dict) -> dict:
    shard_names = sorted(set(index["weight_map"].values()))
    layout: dict[str, dict] = {}
    for name, shard in index["weight_map"].items():
        layer, expert = LAYER.search(name), EXPERT.search(name)
        template = LAYER.sub(".layers.{i}.", name)
        template = EXPERT.sub(".experts.{j}.", template)
        key = (int(layer.group(1)) if layer else -1, int(expert.group(1)) if expert else -1)
        layout.setdefault(template, {})[f"{key[0]},{key[1]}"] = shard_names.index(shard) + 1
    compact = {}
    for template, where in sorted(layout.items()):
        shards = sorted(set(where.values()))
        compact[template] = shards[0] if len(shards) == 1 else {k: v for k, v in sorted(where.items(), key=lambda kv: tuple(map(int, kv[0].split(","))))}
    return {"shards": len(shard_names), "shard_files": shard_names, "total_size": index.get("metadata", {}).get("total_size"),
            "names": compact}


def record(directory: Path, shipped: list[str]) -> dict:
    out: dict = {"files": sorted(shipped)}
    for name in JSON_FILES:
        if (directory / name).exists():
            data = json.loads((directory / name).read_text(encoding="utf-8"))
            if name == "tokenizer_config.json" and isinstance(data.get("chat_template"), str):
                text = data["chat_template"]
                data["chat_template"] = {"chars": len(text), "sha256": hashlib.sha256(text.encode()).hexdigest()}
            out[name] = data
    index = directory / "model.safetensors.index.json"
    if index.exists():
        out["weights"] = weights_record(json.loads(index.read_text(encoding="utf-8")))
    return out


if __name__ == "__main__":
    src, dest, source = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    shipped = [p.name for p in src.iterdir() if p.is_file()] if len(sys.argv) < 5 else sys.argv[4].split(",")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "facts.json").write_text(json.dumps(record(src, shipped), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (dest / "SOURCE").write_text(source.strip() + "\n", encoding="utf-8")
