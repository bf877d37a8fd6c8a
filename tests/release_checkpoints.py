"""The releases' own small files (tests/releases/<release>/facts.json), shrunk for the fixtures.

Every fixture builder that has a record starts from it: the release's config.json with only the
sizes changed (`shrink`), its generation_config.json, special_tokens_map.json, added_tokens.json
and tokenizer_config.json with the special ids moved to the tiny vocabulary (the special tokens
keep their order and their place after the BPE vocabulary, as in the release), and its weight
names. `key_drift` is what tests/test_releases.py checks: a fixture whose config.json adds,
drops or renames a key of the release's fails there.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

RELEASES = Path(__file__).parent / "releases"


def facts(release: str) -> dict:
    return json.loads((RELEASES / release / "facts.json").read_text(encoding="utf-8"))


def source(release: str) -> str:
    return (RELEASES / release / "SOURCE").read_text(encoding="utf-8").strip()


def recorded() -> list[str]:
    return sorted(p.name for p in RELEASES.iterdir() if (p / "facts.json").exists())


def special_tokens(record: dict) -> list[tuple[int, str]]:
    """(release id, text) of every added token, in id order: tokenizer_config.json's
    added_tokens_decoder (what tokenizer.json holds), else added_tokens.json."""
    decoder = (record.get("tokenizer_config.json") or {}).get("added_tokens_decoder")
    if decoder:
        return sorted((int(i), t["content"]) for i, t in decoder.items())
    return sorted((i, t) for t, i in (record.get("added_tokens.json") or {}).items())


def id_map(record: dict, tiny_ids: dict[str, int]) -> dict[int, int]:
    """release id -> tiny id, through the token's text."""
    return {i: tiny_ids[text] for i, text in special_tokens(record) if text in tiny_ids}


def _remap(value, ids: dict[int, int]):
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return ids[value]
    if isinstance(value, list):
        return [_remap(v, ids) for v in value]
    return value


def shrink(config: dict, sizes: dict, ids: dict[int, int]) -> dict:
    """The release's config with only sizes changed: `sizes` names keys the release has (a key it
    lacks is an error here, never added), every *_token_id moves to the tiny vocabulary, and
    per-layer lists (layer_types) keep their value at the new depth."""
    out = copy.deepcopy(config)
    for key, value in sizes.items():
        if key not in out:
            raise KeyError(f"the release's config.json has no {key!r}: a fixture changes sizes, never adds keys")
        out[key] = value
    for key, value in out.items():
        if key.endswith("_token_id") and value is not None:
            out[key] = _remap(value, ids)
    if isinstance(out.get("layer_types"), list) and "num_hidden_layers" in sizes:
        out["layer_types"] = [out["layer_types"][0]] * sizes["num_hidden_layers"]
    return out


def generation_config(record: dict, ids: dict[int, int]) -> dict | None:
    found = record.get("generation_config.json")
    if found is None:
        return None
    return {k: (_remap(v, ids) if k.endswith("_token_id") and v is not None else v) for k, v in found.items()}


def tokenizer_config(record: dict, ids: dict[int, int], template: str | None) -> dict:
    """The release's tokenizer_config.json: its added_tokens_decoder at the tiny ids; where the
    release has a chat template, the fixture's shortened one stands in for it."""
    out = copy.deepcopy(record["tokenizer_config.json"])
    if "added_tokens_decoder" in out:
        out["added_tokens_decoder"] = {str(ids[int(i)]): t for i, t in out["added_tokens_decoder"].items()}
    if "chat_template" in out:
        if template is None:
            raise ValueError("the release's tokenizer_config.json has a chat template: pass the fixture's")
        out["chat_template"] = template
    return out


def added_tokens(record: dict, tiny_ids: dict[str, int], ids: dict[int, int]) -> dict | None:
    """added_tokens.json at the tiny ids (a name the tokenizer calls otherwise keeps its id's place:
    SDAR's says <MASK> for the id tokenizer_config.json calls <|MASK|>)."""
    found = record.get("added_tokens.json")
    if found is None:
        return None
    return {text: ids[i] for text, i in found.items()}


def key_drift(written: dict, release: dict, path: str = "") -> list[str]:
    """Keys the fixture's file adds or drops against the release's (nested objects too)."""
    drift = [f"adds {path}{k}" for k in written if k not in release]
    drift += [f"drops {path}{k}" for k in release if k not in written]
    for key in written:
        if key in release and isinstance(written[key], dict) and isinstance(release[key], dict) and key != "added_tokens_decoder":
            drift += key_drift(written[key], release[key], f"{path}{key}.")
    return drift


def weight_names(record: dict, layers: int) -> list[str]:
    """The release's weight names for a model of `layers` layers (experts: none recorded here)."""
    names = []
    for template in record["weights"]["names"]:
        if "{j}" in template:
            raise ValueError("expert weights: the MoE builders name their own expert count")
        names += [template.format(i=i) for i in range(layers)] if "{i}" in template else [template]
    return names


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
