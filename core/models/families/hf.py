"""What Hugging Face checkpoints say about their special tokens, read from their own files.

config.json names some ids (`mask_token_id`, `pad_token_id`, `eos_token_id`);
tokenizer_config.json names special tokens by their text (`mask_token`, `eos_token`, ...)
and usually carries the chat template (newer exports put it in chat_template.jinja).
Ids are always looked up in the checkpoint's tokenizer: nothing here is a literal id.
"""
from __future__ import annotations

import json
from pathlib import Path

from .. import untrusted
from ..jsonfile import read_json_object

# loading.py passes tokenizer_config.json and generation_config.json to `special_ids` under these
# keys of the config dict; no real config.json uses them.
TOKENIZER_CONFIG_KEY = "tokenizer_config"
GENERATION_CONFIG_KEY = "generation_config"
# ... and the release's name (the checkpoint directory, or the hub repository a cached snapshot
# came from) to `block_rule`: SDAR's block-size variants say their block size only there.
RELEASE_NAME_KEY = "release_name"


def release_name(path: Path) -> str:
    """The release a checkpoint directory holds: a hub cache snapshot
    (models--ORG--NAME/snapshots/HASH) is named by its repository, any other directory by itself."""
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        return path.parent.parent.name.split("--")[-1]
    return path.name


def read_generation_config(path: Path) -> dict:
    """generation_config.json of a checkpoint ({} when absent)."""
    return read_json_object(path / "generation_config.json")


def read_tokenizer_config(path: Path) -> dict:
    """tokenizer_config.json of a checkpoint ({} when absent), with chat_template.jinja folded in."""
    out = read_json_object(path / "tokenizer_config.json")  # checked as untrusted input (core/models/untrusted.py)
    jinja = path / "chat_template.jinja"
    if not out.get("chat_template") and jinja.exists():
        out["chat_template"] = untrusted.read_text(jinja, untrusted.TEMPLATE_BYTES)
    return out


def token_text(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _first_int(value) -> int | None:
    # generation configs may list several eos ids; the first is the canonical one
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def find_id(config: dict, tokenizer, id_key: str, token_key: str, fallback_names: tuple[str, ...] = ()) -> int | None:
    """An id from config.json, else from tokenizer_config's token text, else from known token names."""
    value = _first_int(config.get(id_key))
    if value is not None:
        return value
    tok_cfg = config.get(TOKENIZER_CONFIG_KEY) or {}
    for name in (token_text(tok_cfg.get(token_key)), *fallback_names):
        if name and tokenizer.token_id(name) is not None:
            return tokenizer.token_id(name)
    return None


def chat_template(config: dict) -> str | None:
    """The checkpoint's chat template, self-contained: its special-token texts bound inside.

    ModelSpec carries the template as one string, so the tokens a template refers to
    (`bos_token`, `eos_token`, ...) are bound by `set` lines in front of it.
    """
    tok_cfg = config.get(TOKENIZER_CONFIG_KEY) or {}
    template = tok_cfg.get("chat_template")
    if isinstance(template, list):  # several named templates: use the default one
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"), None)
    if not isinstance(template, str) or not template.strip():
        return None
    bindings = []
    for key in ("bos_token", "eos_token", "pad_token", "unk_token"):
        text = token_text(tok_cfg.get(key))
        if text is not None:
            bindings.append("{%- set " + key + " = " + json.dumps(text) + " %}")
    return "".join(bindings) + template


def _ints(value) -> list[int]:
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]


def declared_end_ids(config: dict, tokenizer) -> list[int]:
    """Every id the files declare as eos or pad: config.json, generation_config.json (ints or
    lists) and the tokenizer's eos/pad tokens. The union: a span ends on any of them."""
    generation = config.get(GENERATION_CONFIG_KEY) or {}
    tok_cfg = config.get(TOKENIZER_CONFIG_KEY) or {}
    ids = [i for source in (config, generation) for key in ("pad_token_id", "eos_token_id") for i in _ints(source.get(key))]
    for key in ("pad_token", "eos_token"):
        name = token_text(tok_cfg.get(key))
        if name and tokenizer.token_id(name) is not None:
            ids.append(tokenizer.token_id(name))
    return list(dict.fromkeys(ids))


def special_ids(config: dict, tokenizer, mask_names: tuple[str, ...], turn_end_names: tuple[str, ...] = ()) -> dict:
    """mask/pad/eos ids, every other declared end id, and the chat template of an HF-style checkpoint.

    The pad that fills a span's unused slots is the tokenizer's pad token when it names one
    (what training padded with: DiffuCoder's <|dlm_pad|>, where its config.json says
    <|endoftext|>), else config.json's. For instruct checkpoints (those with a chat template)
    the end-of-turn token is what ends an answer, so it becomes the eos id. Every id any file
    declares as eos or pad also ends a span (`end_ids`); none of them is banned.
    """
    template = chat_template(config)
    eos = find_id(config, tokenizer, "eos_token_id", "eos_token", ("<|endoftext|>",))
    if template is not None:
        turn_end = next((tokenizer.token_id(n) for n in turn_end_names if tokenizer.token_id(n) is not None), None)
        if turn_end is not None:
            eos = turn_end
    tok_pad = token_text((config.get(TOKENIZER_CONFIG_KEY) or {}).get("pad_token"))
    pad = tokenizer.token_id(tok_pad) if tok_pad and tokenizer.token_id(tok_pad) is not None else None
    if pad is None:
        pad = find_id(config, tokenizer, "pad_token_id", "pad_token")
    if pad is None:
        pad = _first_int(config.get("eos_token_id"))
    mask = find_id(config, tokenizer, "mask_token_id", "mask_token", mask_names)
    return {
        "mask_id": mask,
        "pad_id": pad,
        "eos_id": eos,
        "end_ids": [i for i in declared_end_ids(config, tokenizer) if i not in (mask, pad, eos)],
        "chat_template": template,
    }


def refuse_unsupported(c: dict, keys: tuple[str, ...] = ()) -> None:
    """Config switches of the Llama / Qwen backbones that change the computation and sharpen's
    backbone does not implement: a checkpoint using one is refused, never run wrong. `keys` are
    more boolean switches the family's release never sets (attention_bias, mlp_bias, ...)."""
    if c.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act={c['hidden_act']!r} is not supported (only 'silu')")
    if c.get("rope_scaling"):
        raise ValueError(f"rope_scaling={c['rope_scaling']!r} is not supported")
    if c.get("use_sliding_window"):
        raise ValueError("use_sliding_window=true is not supported (full attention only)")
    for key in keys:
        if c.get(key):
            raise ValueError(f"{key}=true is not supported (the release has none)")
